package netpol

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/iptables"
	"github.com/minikit/minikit/internal/netns"

	vnetns "github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// benchWorld is 1,000 pods on this node in 10 namespaces and 200 policies
// of the e2e suite's shapes: pod and namespace selectors, named and numbered
// ports, ipBlock with except, egress.
func benchWorld() *world {
	w := &world{}
	for n := range 10 {
		w.nss = append(w.nss, ns(fmt.Sprintf("ns%d", n), "team", fmt.Sprintf("t%d", n%3)))
	}
	for i := range 1000 {
		w.pods = append(w.pods, pod(fmt.Sprintf("ns%d", i%10), fmt.Sprintf("pod%d", i), "n1",
			fmt.Sprintf("10.244.%d.%d", i/250, i%250+2), []string{"app", fmt.Sprintf("app%d", i%50), "tier", fmt.Sprintf("t%d", i%4)},
			cport("http", 8080, corev1.ProtocolTCP), cport("dns", 53, corev1.ProtocolUDP)))
	}
	for k := range 200 {
		n := fmt.Sprintf("ns%d", k%10)
		var p *networkingv1.NetworkPolicy
		switch k % 4 {
		case 0:
			p = ingress(policy(n, fmt.Sprintf("pol%d", k), sel("app", fmt.Sprintf("app%d", k%50))),
				[]networkingPeer{podPeer(sel("tier", "t1"), nil)}, tcp(8080))
		case 1:
			p = ingress(policy(n, fmt.Sprintf("pol%d", k), sel("app", fmt.Sprintf("app%d", k%50))),
				[]networkingPeer{podPeer(sel("tier", "t2"), sel("team", "t1"))}, named("http", corev1.ProtocolTCP))
		case 2:
			p = ingress(policy(n, fmt.Sprintf("pol%d", k), sel("tier", fmt.Sprintf("t%d", k%4))),
				[]networkingPeer{blockPeer("10.244.0.0/16", "10.244.1.0/24"), podPeer(nil, sel("team", "t0"))}, portRange(8000, 8100), udp(53))
		default:
			p = egress(policy(n, fmt.Sprintf("pol%d", k), sel("app", fmt.Sprintf("app%d", k%50)), tOut),
				[]networkingPeer{podPeer(sel("tier", "t3"), sel())}, named("dns", corev1.ProtocolUDP), tcp(8080))
		}
		w.pols = append(w.pols, p)
	}
	return w
}

// BenchmarkSync measures, in a throwaway namespace, a full sync of 1,000
// pods and 200 policies (listing, computing, the ipset diff, the restore of
// every chain) against the bare iptables-restore of the same text, and
// reports the ratio (target <= 1.25); cold is the same after a restart,
// when the sets are first read back from the kernel. It also reports the first sync (sets created) and the
// sync after one pod's label changed (target < 100 ms), which writes only
// what changed.
func BenchmarkSync(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root: creates a network namespace")
	}
	name := fmt.Sprintf("mkt-npbench-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		b.Fatalf("%v: %s", err, out)
	}
	b.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	h, err := vnetns.GetFromName(name)
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	w := benchWorld()
	var e *Enforcer
	var ipt iptables.Interface
	var sets IPSets
	do := func(f func() error) {
		if err := netns.Do(h, f); err != nil {
			b.Fatal(err)
		}
	}
	do(func() error {
		if ipt, err = iptables.New(); err != nil {
			return err
		}
		sets, err = NewNetlinkSetsAt(h)
		return err
	})
	e = New(Config{NodeName: "n1", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, ipt, sets, w.listers())
	e.SetInitialized()

	var first time.Duration
	do(func() error {
		start := time.Now()
		err := e.Sync()
		first = time.Since(start)
		return err
	})
	st := Compute(Input{NodeName: "n1", Policies: w.pols, Pods: w.pods, Namespaces: w.nss})
	data := restoreInput(st, nil, jumpFix{})
	rules := 0
	for _, c := range st.Chains {
		rules += len(c.Rules)
	}
	b.Logf("state: %d chains, %d rules, %d sets, %d bytes of restore input; first sync %v", len(st.Chains), rules, len(st.Sets), len(data), first)

	var coldT, syncT, bareT, labelT time.Duration
	for i := 0; i < b.N; i++ {
		do(func() error {
			// A full sync as after a restart: sets read back, every chain written.
			e.forgetKernel()
			start := time.Now()
			if err := e.Sync(); err != nil {
				return err
			}
			coldT += time.Since(start)
			// A full sync with the sets known: every chain written.
			e.mu.Lock()
			e.lastChains = nil
			e.mu.Unlock()
			start = time.Now()
			if err := e.Sync(); err != nil {
				return err
			}
			syncT += time.Since(start)
			start = time.Now()
			if err := ipt.Restore(data, true); err != nil {
				return err
			}
			bareT += time.Since(start)
			// One pod's label changes: it leaves one selector, joins another.
			w.mu.Lock()
			p := w.pods[i%len(w.pods)].DeepCopy()
			p.Labels["tier"] = fmt.Sprintf("t%d", (i+1)%4)
			w.pods[i%len(w.pods)] = p
			w.mu.Unlock()
			start = time.Now()
			if err := e.Sync(); err != nil {
				return err
			}
			labelT += time.Since(start)
			return nil
		})
	}
	b.ReportMetric(float64(syncT.Milliseconds())/float64(b.N), "sync-ms")
	b.ReportMetric(float64(bareT.Milliseconds())/float64(b.N), "restore-ms")
	b.ReportMetric(float64(labelT.Milliseconds())/float64(b.N), "label-change-ms")
	b.ReportMetric(float64(coldT.Milliseconds())/float64(b.N), "cold-sync-ms")
	b.ReportMetric(float64(syncT)/float64(bareT), "sync/restore")
	b.ReportMetric(float64(coldT)/float64(bareT), "cold/restore")
	do(func() error { return Cleanup(ipt, sets) })
}
