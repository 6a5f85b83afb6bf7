//go:build benchupstream

// The peer benchmark is a program, not a test of CI: scripts/bench-proxy.sh
// --upstream builds it with -tags benchupstream and runs it.

package upstreamproxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// metric returns the value of the first series of name (with ip_family="IPv4"
// when labelled) in Prometheus text, or 0.
func metric(text, name string) float64 {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, name+"{") || strings.HasPrefix(l, name+" ") {
			f := strings.Fields(l)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			return v
		}
	}
	return 0
}

type scraper func(ctx context.Context) (string, error)

// hist is a histogram's count and sum.
type hist struct{ count, sum float64 }

func readHist(ctx context.Context, get scraper, name string) (hist, error) {
	text, err := get(ctx)
	if err != nil {
		return hist{}, err
	}
	return hist{metric(text, name+"_count"), metric(text, name+"_sum")}, nil
}

// waitMore polls until the histogram's count exceeds before's, and returns
// the mean of the new observations.
func waitMore(t *testing.T, ctx context.Context, get scraper, name string, before hist, d time.Duration) (float64, hist) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		h, err := readHist(ctx, get, name)
		if err == nil && h.count > before.count {
			return (h.sum - before.sum) / (h.count - before.count), h
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no new observation after %v (last error %v)", name, d, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// median is the middle value: the machine is shared, and one sync that
// waited for the CPU should not move the figure.
func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// TestBenchUpstream: minikit's proxy (on lab node1) against upstream
// kube-proxy v1.37.2 (in its own namespace mirroring node1), same API
// objects, S ClusterIP services x 5 endpoints, iptables mode:
//   - full sync duration (kubeproxy_sync_full_proxy_rules_duration_seconds):
//     minikit's after its canary is deleted (a resync over its own state);
//     upstream's first sync (all S services, from empty tables) and, up to
//     RESYNC_MAX services, its resync after its canary is deleted;
//   - EndpointSlice change -> rules in the kernel
//     (kubeproxy_network_programming_duration_seconds from the slice's
//     last-change-trigger-time) and the partial sync duration, CHANGES times.
//
// minikit is measured first, before the peer starts, so that neither's
// measurement shares the 2 cores with the other's big restore.
// Env: SIZES (default 1000,10000), CHANGES (default 7), RESYNC_MAX (default 1000),
// KUBE_PROXY (the binary; default: scripts/build-upstream-proxy.sh).
func TestBenchUpstream(t *testing.T) {
	testenv.RequireRoot(t)
	sizes := []int{1000, 10000}
	if s := os.Getenv("SIZES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatal(err)
			}
			sizes = append(sizes, n)
		}
	}
	changes := envInt("CHANGES", 7)
	resyncMax := envInt("RESYNC_MAX", 1000)
	bin := os.Getenv("KUBE_PROXY")
	if bin == "" {
		bin = KubeProxy(t)
	}
	modes := []string{"iptables", "nftables"}
	if m := os.Getenv("MODES"); m != "" {
		modes = strings.Split(m, ",")
	}
	for _, mode := range modes {
		for _, n := range sizes {
			t.Run(fmt.Sprintf("%s/S=%d", mode, n), func(t *testing.T) { benchSize(t, bin, mode, n, changes, resyncMax) })
		}
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func benchSlice(i, gen int) *discovery.EndpointSlice {
	name := fmt.Sprintf("bench-%05d", i)
	ready := true
	sl := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-1", Namespace: "default", Labels: map[string]string{
			discovery.LabelServiceName: name, discovery.LabelManagedBy: "upstream-parity.minikit.dev"}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr("http"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(8080))}},
	}
	for e := 0; e < 5; e++ {
		// Unique per service and endpoint, inside the cluster CIDR but off node1's pod CIDR.
		k := i*5 + e
		ip := fmt.Sprintf("10.244.%d.%d", 10+k/250, 2+k%250)
		if e == 0 && gen > 0 {
			ip = fmt.Sprintf("10.244.%d.%d", 250, 2+gen%250)
		}
		ep := discovery.Endpoint{Addresses: []string{ip}, NodeName: ptr("node9"), Conditions: discovery.EndpointConditions{Ready: &ready}}
		sl.Endpoints = append(sl.Endpoints, ep)
	}
	return sl
}

func benchSize(t *testing.T, bin, mode string, n, changes, resyncMax int) {
	ctx := context.Background()
	l := testenv.NewLabConfig(t, lab.Config{Nodes: 1, ProxyMode: mode})
	// How each side is made to run a full sync: iptables, by deleting the
	// canary chain both monitors poll; nftables, by deleting the table
	// (minikit's drift monitor; kube-proxy has none, so its figure is its
	// first sync).
	drop := []string{"iptables", "-t", "mangle", "-X", "KUBE-PROXY-CANARY"}
	if mode == "nftables" {
		drop = []string{"nft", "delete", "table", "ip", "kube-proxy"}
		resyncMax = 0
	}
	c := testenv.Client(t, l)
	nodeNS := lab.NS(l.Name(), "node1")
	minikit := func(ctx context.Context) (string, error) {
		return GetInNetns(ctx, nodeNS, "http://127.0.0.1:10249/metrics")
	}

	// The objects, 16 requests at a time.
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				name := fmt.Sprintf("bench-%05d", i)
				svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
					Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
				if err := create(ctx, c, svc, benchSlice(i, 0)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	t.Logf("created %d services and endpointslices in %v", n, time.Since(start).Round(time.Second))

	// minikit: wait until it has every service, then a full resync.
	testutil.Eventually(t, 20*time.Minute, "minikit synced every service", func() error {
		out, err := GetInNetns(ctx, nodeNS, "http://127.0.0.1:10249/stats")
		if err != nil {
			return err
		}
		var ports int
		if i := strings.Index(out, `"servicePorts": `); i >= 0 {
			fmt.Sscanf(out[i+len(`"servicePorts": `):], "%d", &ports)
		}
		if ports < n {
			return fmt.Errorf("%d service ports", ports)
		}
		return nil
	})
	mFull := fullResync(t, ctx, l, minikit, func() error {
		_, err := testenv.Run(l, "node1", drop...)
		return err
	}, 10*time.Minute)
	mProg, mPart := endpointChanges(t, ctx, c, minikit, n, changes, 1)

	// Upstream: start it now; its first sync has every service.
	b := make([]byte, 3)
	rand.Read(b)
	peer, err := StartPeer(PeerConfig{Binary: bin, NS: "mkt-parity-bench-" + hex.EncodeToString(b), MirrorNS: nodeNS,
		Kubeconfig: l.Kubeconfig(), Hostname: "node1", ClusterCIDR: lab.ClusterCIDR, Args: []string{"--proxy-mode", mode}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("=== kube-proxy log (last 4 KiB)\n%s", tail(peer.Log(), 4<<10))
		}
		if dir := os.Getenv("KUBE_PROXY_LOG_DIR"); dir != "" {
			os.WriteFile(fmt.Sprintf("%s/kube-proxy-S%d.log", dir, n), []byte(peer.Log()), 0o644)
		}
		if err := peer.Stop(); err != nil {
			t.Error(err)
		}
	})
	upstream := peer.Metrics
	uFirst, _ := waitMore(t, ctx, upstream, "kubeproxy_sync_full_proxy_rules_duration_seconds", hist{}, 60*time.Minute)
	uFull := -1.0
	if n <= resyncMax {
		uFull = fullResync(t, ctx, l, upstream, func() error {
			_, err := runIn(peer.NS, drop...)
			return err
		}, 60*time.Minute)
	}
	uProg, uPart := endpointChanges(t, ctx, c, upstream, n, changes, 1+changes)

	fmt.Printf("# load %s", loadavg())
	what := "resync"
	if mode == "nftables" {
		what = "table deleted, from empty"
	}
	fmt.Printf("%s S=%d E=5: full sync minikit %.3fs (%s) | upstream %.3fs (first, from empty)", mode, n, mFull, what, uFirst)
	if uFull >= 0 {
		fmt.Printf(", %.3fs (resync) -> ratio minikit/upstream %.2f (resync vs resync)", uFull, mFull/uFull)
	} else {
		fmt.Printf(" -> ratio minikit/upstream %.2f (minikit %s vs upstream first sync)", mFull/uFirst, what)
	}
	fmt.Printf("\n%s S=%d E=5: EndpointSlice change -> kernel (network_programming_duration, median of %d) minikit %.3fs upstream %.3fs ratio %.2f\n",
		mode, n, changes, mProg, uProg, mProg/uProg)
	fmt.Printf("%s S=%d E=5: partial sync (sync_partial_proxy_rules_duration, median) minikit %.4fs upstream %.4fs ratio %.2f\n",
		mode, n, mPart, uPart, mPart/uPart)
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return string(b)
}

func fmtList(v []float64) string {
	var b []string
	for _, x := range v {
		b = append(b, strconv.FormatFloat(x, 'f', 3, 64))
	}
	return strings.Join(b, " ")
}

func runIn(ns string, argv ...string) (string, error) {
	out, err := execCommand("ip", append([]string{"netns", "exec", ns}, argv...)...)
	return out, err
}

func create(ctx context.Context, c kubernetes.Interface, svc *corev1.Service, sl *discovery.EndpointSlice) error {
	for attempt := 0; ; attempt++ {
		_, err := c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
		if err == nil || strings.Contains(err.Error(), "already exists") {
			break
		}
		if attempt > 5 {
			return err
		}
		time.Sleep(time.Second)
	}
	for attempt := 0; ; attempt++ {
		_, err := c.DiscoveryV1().EndpointSlices("default").Create(ctx, sl, metav1.CreateOptions{})
		if err == nil || strings.Contains(err.Error(), "already exists") {
			return nil
		}
		if attempt > 5 {
			return err
		}
		time.Sleep(time.Second)
	}
}

// fullResync deletes a proxy's canary and returns the duration of the full
// sync its monitor then runs (within its 30 s sync period).
func fullResync(t *testing.T, ctx context.Context, l *lab.Lab, get scraper, dropCanary func() error, d time.Duration) float64 {
	t.Helper()
	before, err := readHist(ctx, get, "kubeproxy_sync_full_proxy_rules_duration_seconds")
	if err != nil {
		t.Fatal(err)
	}
	if err := dropCanary(); err != nil {
		t.Fatalf("deleting the canary: %v", err)
	}
	v, _ := waitMore(t, ctx, get, "kubeproxy_sync_full_proxy_rules_duration_seconds", before, d)
	return v
}

// endpointChanges replaces one endpoint of `changes` services, one at a time
// (2 s apart, past the 1 s minimum sync interval both use), stamped with the
// trigger time; it returns the mean network programming latency and partial
// sync duration the proxy reported (medians).
func endpointChanges(t *testing.T, ctx context.Context, c kubernetes.Interface, get scraper, n, changes, gen int) (prog, partial float64) {
	t.Helper()
	var progs, parts []float64
	for k := 0; k < changes; k++ {
		i := (k*7919 + gen*104729) % n
		pb, err := readHist(ctx, get, "kubeproxy_network_programming_duration_seconds")
		if err != nil {
			t.Fatal(err)
		}
		sb, err := readHist(ctx, get, "kubeproxy_sync_partial_proxy_rules_duration_seconds")
		if err != nil {
			t.Fatal(err)
		}
		sl := benchSlice(i, gen+k)
		cur, err := c.DiscoveryV1().EndpointSlices("default").Get(ctx, sl.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sl.ResourceVersion = cur.ResourceVersion
		sl.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Now().Format(time.RFC3339Nano)}
		if _, err := c.DiscoveryV1().EndpointSlices("default").Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if os.Getenv("KUBE_PROXY_LOG_DIR") != "" {
			t.Logf("%s updated %s", time.Now().Format("15:04:05.000000"), sl.Name)
		}
		p, _ := waitMore(t, ctx, get, "kubeproxy_network_programming_duration_seconds", pb, 10*time.Minute)
		s, _ := waitMore(t, ctx, get, "kubeproxy_sync_partial_proxy_rules_duration_seconds", sb, time.Minute)
		progs, parts = append(progs, p), append(parts, s)
		time.Sleep(2 * time.Second)
	}
	fmt.Printf("#   per change: network programming %s; partial sync %s\n", fmtList(progs), fmtList(parts))
	return median(progs), median(parts)
}

func execCommand(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}
