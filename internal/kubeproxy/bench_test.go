//go:build benchproxy

// The proxy benchmark is a program, not a test: scripts/bench-proxy.sh builds it
// with -tags benchproxy and runs it inside a namespace it owns.

package kubeproxy

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/iptables"
)

// TestBenchProxy is the benchmark of issue 5, run by scripts/bench-proxy.sh
// inside a throwaway network namespace (it refuses to run in the root one).
// For S services x 5 endpoints it times, side by side in one run:
//   - minikit's full sync (render + read foreign chains + one restore), from
//     empty tables and over its own state, against the floor: a bare
//     iptables-restore of the very same input text from the same state;
//   - minikit's partial sync after one endpoint change against a bare
//     iptables-restore --noflush of the same input;
//   - at S <= PERRULE_MAX, the same rules applied one iptables exec per chain
//     and rule (the go-iptables way).
//
// Env: MINIKIT_BENCH_NETNS (required: the namespace's name), SIZES
// (default 100,1000,10000), REPS (default 5/3/1 by size), PARTIAL_REPS (default 9),
// PERRULE_MAX (default 1000).
func TestBenchProxy(t *testing.T) {
	ns := os.Getenv("MINIKIT_BENCH_NETNS")
	if ns == "" {
		t.Skip("run through scripts/bench-proxy.sh")
	}
	self, _ := os.Readlink("/proc/self/ns/net")
	want, err := os.Readlink("/run/netns/" + ns)
	if err != nil {
		// /run/netns/NAME is a bind mount, not a link: compare inodes instead.
		var a, b []byte
		a, _ = exec.Command("stat", "-L", "-c", "%i", "/proc/self/ns/net").Output()
		b, _ = exec.Command("stat", "-L", "-c", "%i", "/run/netns/"+ns).Output()
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Fatalf("not inside network namespace %s (self %s); refusing to touch iptables", ns, self)
		}
	} else if want != self {
		t.Fatalf("not inside network namespace %s; refusing", ns)
	}
	sizes := []int{100, 1000, 10000}
	if s := os.Getenv("SIZES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, _ := strconv.Atoi(f)
			sizes = append(sizes, n)
		}
	}
	perRuleMax := 1000
	if s := os.Getenv("PERRULE_MAX"); s != "" {
		perRuleMax, _ = strconv.Atoi(s)
	}
	real, err := iptables.New()
	if err != nil {
		t.Fatal(err)
	}
	ver, _ := exec.Command("iptables", "--version").Output()
	fmt.Printf("# %s (backend %s); S services x 5 endpoints; wall seconds, median (min-max) of n; load = 1-min load average\n", strings.TrimSpace(string(ver)), real.Backend())
	for _, S := range sizes {
		reps := 5
		if S >= 1000 {
			reps = 3
		}
		if S >= 10000 {
			reps = 1
		}
		if s := os.Getenv("REPS"); s != "" {
			reps, _ = strconv.Atoi(s)
		}
		benchSize(t, real, S, reps, S <= perRuleMax)
	}
}

// recorder remembers the last restore input.
type recorder struct {
	iptables.Interface
	last    []byte
	noFlush bool
}

func (r *recorder) Restore(data []byte, noFlush bool) error {
	r.last, r.noFlush = append([]byte(nil), data...), noFlush
	return r.Interface.Restore(data, noFlush)
}

func (r *recorder) ReplaceTables(tables []string, keep func(string, string) bool, build func(map[string]*iptables.TableState) ([]byte, error)) error {
	return r.Interface.ReplaceTables(tables, keep, func(s map[string]*iptables.TableState) ([]byte, error) {
		data, err := build(s)
		r.last, r.noFlush = append([]byte(nil), data...), false
		return data, err
	})
}

func resetTables(t *testing.T) {
	for _, table := range []string{"nat", "filter", "mangle"} {
		for _, a := range [][]string{{"-F"}, {"-X"}} {
			if out, err := exec.Command("iptables", append([]string{"-w", "-t", table}, a...)...).CombinedOutput(); err != nil {
				t.Fatalf("resetting %s: %v: %s", table, err, out)
			}
		}
	}
}

func bareRestore(t *testing.T, data []byte, noFlush bool) time.Duration {
	args := []string{"-w", "5"}
	if noFlush {
		args = append(args, "--noflush")
	}
	cmd := exec.Command("iptables-restore", args...)
	cmd.Stdin = bytes.NewReader(data)
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("iptables-restore: %v: %s", err, out)
	}
	return time.Since(start)
}

type stat []time.Duration

func (s stat) String() string {
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return fmt.Sprintf("%.3f (%.3f-%.3f) n=%d", s[len(s)/2].Seconds(), s[0].Seconds(), s[len(s)-1].Seconds(), len(s))
}

func (s stat) median() float64 {
	c := append(stat(nil), s...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	return c[len(c)/2].Seconds()
}

func load() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.Fields(string(b))[0]
}

func benchSize(t *testing.T, real iptables.Interface, S, reps int, perRule bool) {
	rec := &recorder{Interface: real}
	liberal := false
	p, err := New(Config{NodeName: testNode, NodeIP: netip.MustParseAddr("192.168.56.10"),
		ClusterCIDR: netip.MustParsePrefix("10.244.0.0/16"),
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)), Conntrack: &fakeConntrack{}, TCPBeLiberal: &liberal}, rec)
	if err != nil {
		t.Fatal(err)
	}
	p.initialized = true
	benchServices(p, S)

	var fullEmpty, floorEmpty, fullOver, floorOver, partial, floorPartial stat
	var fullText []byte
	for r := 0; r < reps; r++ {
		resetTables(t)
		p.forceFullSync()
		start := time.Now()
		mustSync(t, p)
		fullEmpty = append(fullEmpty, time.Since(start))
		fullText = rec.last

		p.forceFullSync()
		start = time.Now()
		mustSync(t, p)
		fullOver = append(fullOver, time.Since(start))

		floorOver = append(floorOver, bareRestore(t, rec.last, false))
		resetTables(t)
		floorEmpty = append(floorEmpty, bareRestore(t, fullText, false))
	}
	// Partial syncs: move svc0's last endpoint back and forth; the floor
	// restores the same input from the same state.
	resetTables(t)
	p.forceFullSync()
	mustSync(t, p)
	alt := []string{"10.250.0.1", ""}
	var lastText []byte
	// Partial syncs are cheap: more samples than full ones, for a steadier median.
	partialReps := max(reps, 9)
	if s := os.Getenv("PARTIAL_REPS"); s != "" {
		partialReps, _ = strconv.Atoi(s)
	}
	for r := 0; r < partialReps; r++ {
		p.OnEndpointSliceUpdate(benchSlice("svc0", 0, alt[0]))
		start := time.Now()
		mustSync(t, p)
		partial = append(partial, time.Since(start))
		lastText = rec.last
		if !rec.noFlush {
			t.Fatal("partial sync did not use --noflush")
		}
		// Back to the previous state, then the floor of the same input.
		p.OnEndpointSliceUpdate(benchSlice("svc0", 0, alt[1]))
		mustSync(t, p)
		floorPartial = append(floorPartial, bareRestore(t, lastText, true))
		p.OnEndpointSliceUpdate(benchSlice("svc0", 0, alt[1]))
		mustSync(t, p) // no-op
	}
	st := p.Stats()
	fmt.Printf("S=%d rules=%d nat_chains=%d full_input_bytes=%d partial_input_bytes=%d load=%s\n",
		S, st.NATRules+st.FilterRules, st.NATChains, len(fullText), len(lastText), load())
	fmt.Printf("  full sync from empty     minikit %s   floor %s   ratio %.2f\n", fullEmpty, floorEmpty, fullEmpty.median()/floorEmpty.median())
	fmt.Printf("  full sync over own state minikit %s   floor %s   ratio %.2f\n", fullOver, floorOver, fullOver.median()/floorOver.median())
	fmt.Printf("  partial sync (1 endpoint) minikit %s   floor %s   ratio %.2f\n", partial, floorPartial, partial.median()/floorPartial.median())
	if perRule {
		resetTables(t)
		d := applyPerRule(t, fullText)
		fmt.Printf("  per-rule iptables         %.3f s   full sync / per-rule = 1/%.0f   load=%s\n", d.Seconds(), d.Seconds()/fullEmpty.median(), load())
	}
}

// applyPerRule applies restore text one iptables exec per chain and rule.
func applyPerRule(t *testing.T, text []byte) time.Duration {
	var cmds [][]string
	table := ""
	for _, l := range strings.Split(string(text), "\n") {
		switch {
		case strings.HasPrefix(l, "*"):
			table = l[1:]
		case strings.HasPrefix(l, ":"):
			name := strings.Fields(l[1:])[0]
			if !iptables.IsBuiltin(table, name) {
				cmds = append(cmds, []string{"-w", "-t", table, "-N", name})
			}
		case strings.HasPrefix(l, "-A "):
			cmds = append(cmds, append([]string{"-w", "-t", table}, iptables.SplitRule(l)...))
		}
	}
	start := time.Now()
	for _, c := range cmds {
		if out, err := exec.Command("iptables", c...).CombinedOutput(); err != nil {
			t.Fatalf("iptables %v: %v: %s", c, err, out)
		}
	}
	return time.Since(start)
}
