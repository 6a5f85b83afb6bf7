package netpol_test

import (
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkNetworkPolicy measures, in a 2-node lab (scripts/bench-netpol.sh):
//   - one pod label change until the kernel reflects it: from the API call that
//     adds (or removes) the label a policy's peer selector matches until the
//     pod's address is in (or out of) the enforcer's ipsets on the other node,
//     for isolated changes and for changes back to back;
//   - the first packet's latency: TCP connect time from a pod on node1 to a pod
//     on node2 that a policy isolates, against one no policy selects,
//     interleaved, as medians and 90th percentiles and their ratio.
//
// No assertion on the numbers: they are reported, not tested.
func BenchmarkNetworkPolicy(b *testing.B) {
	labels := b.N // run with -benchtime 1x; more means more label changes
	l := testenv.NewLab(b, 2)
	c := testenv.Client(b, l)
	mk := func(name, node string, lbl map[string]string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl}, Spec: corev1.PodSpec{NodeName: node,
			Containers: []corev1.Container{{Name: "c", Image: agnhost, Args: []string{"porter"},
				Env: []corev1.EnvVar{{Name: "SERVE_PORT_80", Value: name}}}}}}
		if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		return p
	}
	mk("client", "node1", map[string]string{"role": "client"})
	mk("mover", "node1", nil)
	mk("policed", "node2", map[string]string{"app": "policed"})
	mk("open", "node2", nil)
	ip := map[string]string{}
	var client *corev1.Pod
	for _, n := range []string{"client", "mover", "policed", "open"} {
		p := testenv.WaitPodReady(b, c, "default", n)
		ip[n] = p.Status.PodIP
		if n == "client" {
			client = p
		}
	}
	np := ingress(policy("default", "bench", sel("app", "policed")), nil, podPeer("role", "client"))
	if _, err := c.NetworkingV1().NetworkPolicies("default").Create(ctx, np, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	testutil.Eventually(b, 30*time.Second, "client in node2's ipsets", func() error {
		if ok, err := inSet(l, "node2", ip["client"]); !ok {
			return fmt.Errorf("not yet (%v)", err)
		}
		return nil
	})

	// One label change → the kernel: isolated changes (250 ms apart, so no
	// sync ran just before), then back to back (each right after the kernel
	// showed the previous one: the enforcer's MinSyncPeriod spaces them).
	n := max(labels, 20)
	toggle := func(i int) time.Duration {
		want := i%2 == 0
		v := `null`
		if want {
			v = `"client"`
		}
		start := time.Now()
		if _, err := c.CoreV1().Pods("default").Patch(ctx, "mover", "application/merge-patch+json",
			[]byte(`{"metadata":{"labels":{"role":`+v+`}}}`), metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
		for {
			ok, err := inSet(l, "node2", ip["mover"])
			if err != nil {
				b.Fatal(err)
			}
			if ok == want {
				return time.Since(start)
			}
			if time.Since(start) > 30*time.Second {
				b.Fatalf("label change %d: node2's ipsets did not follow in 30s", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	var isolated, b2b []time.Duration
	for i := 0; i < n; i++ {
		time.Sleep(250 * time.Millisecond) // spacing between samples, not a wait for a condition
		isolated = append(isolated, toggle(i))
	}
	for i := 0; i < n; i++ {
		b2b = append(b2b, toggle(i))
	}
	b.Logf("label change -> node2's ipsets, isolated: median %v, p90 %v, max %v over %d changes", pct(isolated, 50), pct(isolated, 90), pct(isolated, 100), n)
	b.Logf("label change -> node2's ipsets, back to back: median %v, p90 %v, max %v over %d changes", pct(b2b, 50), pct(b2b, 90), pct(b2b, 100), n)

	// First packet: TCP connect time, policed vs open, interleaved.
	const samples = 400
	var policed, open []time.Duration
	err := netns.DoPath(netns.NetNSPath(testenv.SandboxName(b, c, client)), func() error {
		dial := func(addr string) (time.Duration, error) {
			start := time.Now()
			conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
			d := time.Since(start)
			if err != nil {
				return 0, err
			}
			conn.Close()
			return d, nil
		}
		for i := 0; i < samples; i++ {
			for _, t := range []struct {
				addr string
				into *[]time.Duration
			}{{net.JoinHostPort(ip["policed"], "80"), &policed}, {net.JoinHostPort(ip["open"], "80"), &open}} {
				d, err := dial(t.addr)
				if err != nil {
					return err
				}
				*t.into = append(*t.into, d)
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("first packet (TCP connect node1 -> node2, %d samples each): policed median %v p90 %v; open median %v p90 %v; ratio median %.2fx p90 %.2fx",
		samples, pct(policed, 50), pct(policed, 90), pct(open, 50), pct(open, 90),
		float64(pct(policed, 50))/float64(pct(open, 50)), float64(pct(policed, 90))/float64(pct(open, 90)))
}

// pct is the p-th percentile of ds (nearest rank).
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p+99)/100 - 1
	return s[max(0, min(i, len(s)-1))]
}
