//go:build benchproxy

package kubeproxy

import (
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/iptables"
	"github.com/minikit/minikit/internal/nft"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestBenchDualStack is issue 33's benchmark, run by
// `scripts/bench-proxy.sh --ip-family dual` inside a throwaway network
// namespace (it refuses to run in the root one). Per proxy mode it times, at
// S ClusterIP services x 5 endpoints, the first full sync into empty tables
// and a partial sync after one endpoint changed, single-stack (one IPv4
// proxier) against dual-stack (each service with an IPv4 and an IPv6
// ClusterIP and an EndpointSlice of each family; one proxier per family, as
// MetaProxier runs them: both sync concurrently, and the wall time of the
// pair is what is timed). A dual-stack partial sync changes one pod's
// endpoint in both families' slices, as a pod replaced on a dual-stack
// cluster does.
//
// Env: MINIKIT_BENCH_NETNS (required), MODES (default iptables,nftables),
// SIZES (default 1000,10000), REPS (default 3, 1 at 10000), PARTIAL_REPS (9).
func TestBenchDualStack(t *testing.T) {
	mustBeInBenchNetns(t)
	modes := strings.Split(envOr("MODES", "iptables,nftables"), ",")
	var sizes []int
	for _, f := range strings.Split(envOr("SIZES", "1000,10000"), ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("SIZES=%q: %v", f, err)
		}
		sizes = append(sizes, n)
	}
	ver, _ := exec.Command("iptables", "--version").Output()
	nftVer, _ := exec.Command("nft", "--version").Output()
	fmt.Printf("# %s; %s; S services x 5 endpoints (x 2 families when dual); wall milliseconds, median (min-max) of n; load = 1-min load average\n",
		strings.TrimSpace(string(ver)), strings.TrimSpace(string(nftVer)))
	for _, mode := range modes {
		for _, S := range sizes {
			reps := 3
			if S >= 10000 {
				reps = 1
			}
			if s := os.Getenv("REPS"); s != "" {
				reps, _ = strconv.Atoi(s)
			}
			partialReps := max(reps, 9)
			if s := os.Getenv("PARTIAL_REPS"); s != "" {
				partialReps, _ = strconv.Atoi(s)
			}
			var full, partial [2]stat
			var loads [2]string
			for i, dual := range []bool{false, true} {
				full[i], partial[i] = benchFamilies(t, mode, S, dual, reps, partialReps)
				loads[i] = load()
			}
			fmt.Printf("mode=%s S=%d load single=%s dual=%s\n", mode, S, loads[0], loads[1])
			fmt.Printf("  full sync from empty       single %s   dual %s   dual/single %.2f\n", full[0].ms(), full[1].ms(), full[1].median()/full[0].median())
			fmt.Printf("  partial sync (1 endpoint)  single %s   dual %s   dual/single %.2f\n", partial[0].ms(), partial[1].ms(), partial[1].median()/partial[0].median())
		}
	}
}

// ms is the stat in milliseconds: nftables' partial syncs take less than one.
func (s stat) ms() string {
	c := append(stat(nil), s...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	f := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return fmt.Sprintf("%.1f (%.1f-%.1f) n=%d", f(c[len(c)/2]), f(c[0]), f(c[len(c)-1]), len(c))
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// mustBeInBenchNetns stops the benchmark unless the process runs inside the
// namespace scripts/bench-proxy.sh made for it.
func mustBeInBenchNetns(t *testing.T) {
	ns := os.Getenv("MINIKIT_BENCH_NETNS")
	if ns == "" {
		t.Skip("run through scripts/bench-proxy.sh")
	}
	a, _ := exec.Command("stat", "-L", "-c", "%i", "/proc/self/ns/net").Output()
	b, _ := exec.Command("stat", "-L", "-c", "%i", "/run/netns/"+ns).Output()
	if len(a) == 0 || string(a) != string(b) {
		t.Fatalf("not inside network namespace %s; refusing to touch iptables or nftables", ns)
	}
}

// syncer is one family's proxier under the benchmark.
type syncer struct {
	sync  func() error
	slice func(*discovery.EndpointSlice)
	svc   func(*corev1.Service)
	stats func() Stats
	close func()
}

// benchFamilies times S services' first full sync (reps times, each into
// emptied tables by fresh proxiers) and partial syncs of one endpoint change.
func benchFamilies(t *testing.T, mode string, S int, dual bool, reps, partialReps int) (full, partial stat) {
	families := []corev1.IPFamily{corev1.IPv4Protocol}
	if dual {
		families = append(families, corev1.IPv6Protocol)
	}
	var ps []syncer
	setup := func() {
		for _, p := range ps {
			p.close()
		}
		ps = nil
		resetKernel(t, mode)
		for _, fam := range families {
			ps = append(ps, newBenchSyncer(t, mode, fam, dual))
		}
		for i := 0; i < S; i++ {
			svc, s4, s6 := dualBenchObjects(i, dual, "")
			for f, p := range ps {
				p.svc(svc)
				if f == 0 {
					p.slice(s4)
				} else {
					p.slice(s6)
				}
			}
		}
	}
	syncAll := func() time.Duration {
		errs := make([]error, len(ps))
		var wg sync.WaitGroup
		start := time.Now()
		for i, p := range ps {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = p.sync() }()
		}
		wg.Wait()
		d := time.Since(start)
		for _, err := range errs {
			if err != nil {
				t.Fatalf("%s sync: %v", mode, err)
			}
		}
		return d
	}
	for r := 0; r < reps; r++ {
		setup()
		full = append(full, syncAll())
	}
	if dual {
		// The IPv6 proxier wrote svc0's IPv6 ClusterIP into its own family's tables.
		cmd := exec.Command("ip6tables-save", "-t", "nat")
		if mode == "nftables" {
			cmd = exec.Command("nft", "list", "map", "ip6", nftTableName, "service-ips")
		}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "fd00:10:96::a") {
			t.Fatalf("%s: no IPv6 rule for svc0 (fd00:10:96::a) after a dual-stack sync: %v\n%.2000s", mode, err, out)
		}
	}
	for r := 0; r < partialReps; r++ {
		override := ""
		if r%2 == 0 {
			override = "changed"
		}
		_, s4, s6 := dualBenchObjects(0, dual, override)
		ps[0].slice(s4)
		if dual {
			ps[1].slice(s6)
		}
		partial = append(partial, syncAll())
	}
	for _, p := range ps {
		// One full sync (the first), then partial ones only.
		if st := p.stats(); st.FullSyncs != 1 {
			t.Fatalf("%s: partial syncs were full: %+v", mode, st)
		}
		p.close()
	}
	resetKernel(t, mode)
	return full, partial
}

// dualBenchObjects is service i (ClusterIP 10.96.x.y, and fd00:10:96::i
// when dual) and its EndpointSlices of 5 endpoints per family; override
// moves the last endpoint to another address.
func dualBenchObjects(i int, dual bool, override string) (*corev1.Service, *discovery.EndpointSlice, *discovery.EndpointSlice) {
	n := i + 10
	vip := fmt.Sprintf("10.%d.%d.%d", 96+(n>>16), (n>>8)&255, n&255)
	name := "svc" + strconv.Itoa(i)
	opts := []svcOpt{withPorts(corev1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)})}
	if dual {
		opts = append(opts, withIPv6(fmt.Sprintf("fd00:10:96::%x", n)))
	}
	svc := makeService("ns", name, vip, opts...)
	ov4 := ""
	if override != "" {
		ov4 = "10.250.0.1"
	}
	s4 := benchSlice(name, i, ov4)
	if !dual {
		return svc, s4, nil
	}
	var eps []ep
	for e := 0; e < 5; e++ {
		k := i*5 + e + 2
		eps = append(eps, ep{ip: fmt.Sprintf("fd00:10:244:%x::%x", k>>8, k&255), node: testOther})
	}
	if override != "" {
		eps[4].ip = "fd00:10:250::1"
	}
	return svc, s4, makeSlice6("ns", name, []discovery.EndpointPort{slicePort("http", corev1.ProtocolTCP, 8080)}, eps...)
}

// newBenchSyncer is a real proxier of mode and family writing the kernel of
// the benchmark's namespace; ServiceCIDRs has both families' ranges when dual.
func newBenchSyncer(t *testing.T, mode string, fam corev1.IPFamily, dual bool) syncer {
	liberal := false
	cfg := Config{NodeName: testNode, Family: fam, NodeIP: testNodeIP, ClusterCIDR: netip.MustParsePrefix("10.244.0.0/16"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Conntrack: &fakeConntrack{}, TCPBeLiberal: &liberal}
	cidrs := []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}
	if dual {
		cidrs = append(cidrs, netip.MustParsePrefix("fd00:10:96::/112"))
	}
	if fam == corev1.IPv6Protocol {
		cfg.NodeIP, cfg.ClusterCIDR = testNodeIP6, netip.MustParsePrefix("fd00:10:244::/56")
	}
	switch mode {
	case "iptables":
		newIPT := iptables.New
		if fam == corev1.IPv6Protocol {
			newIPT = iptables.NewIPv6
		}
		ipt, err := newIPT()
		if err != nil {
			t.Fatal(err)
		}
		p, err := New(cfg, ipt)
		if err != nil {
			t.Fatal(err)
		}
		p.initialized = true
		return syncer{sync: p.syncProxyRules, slice: p.OnEndpointSliceUpdate, svc: p.OnServiceUpdate, stats: p.Stats, close: p.health.close}
	case "nftables":
		nf := nft.IPv4Family
		if fam == corev1.IPv6Protocol {
			nf = nft.IPv6Family
		}
		nl, err := nft.NewNetlink(nf, nftTableName)
		if err != nil {
			t.Fatal(err)
		}
		p, err := NewNFT(NFTConfig{Config: cfg, ServiceCIDRs: cidrs}, nl)
		if err != nil {
			t.Fatal(err)
		}
		p.initialized = true
		return syncer{sync: p.syncProxyRules, slice: p.OnEndpointSliceUpdate, svc: p.OnServiceUpdate, stats: p.Stats,
			close: func() { p.health.close(); nl.Close() }}
	}
	t.Fatalf("MODES: unknown mode %q (iptables or nftables)", mode)
	return syncer{}
}

// resetKernel empties the namespace's tables of mode for both families.
func resetKernel(t *testing.T, mode string) {
	if mode == "nftables" {
		if out, err := exec.Command("nft", "flush", "ruleset").CombinedOutput(); err != nil {
			t.Fatalf("nft flush ruleset: %v: %s", err, out)
		}
		return
	}
	for _, bin := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"nat", "filter", "mangle"} {
			for _, a := range [][]string{{"-F"}, {"-X"}} {
				if out, err := exec.Command(bin, append([]string{"-w", "-t", table}, a...)...).CombinedOutput(); err != nil {
					t.Fatalf("resetting %s %s: %v: %s", bin, table, err, out)
				}
			}
		}
	}
}
