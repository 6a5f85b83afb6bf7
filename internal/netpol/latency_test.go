package netpol

import (
	"io"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/netns"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// BenchmarkFirstPacket measures a new TCP connection from pod a to pod b on
// one bridge (SYN through FORWARD, SYN-ACK back, the enforcer's chains on the
// way) with no policy, and with b isolated among 1,000 pods and 200 policies
// (benchWorld) whose dispatch rules come before b's, and reports the ratio
// of the medians (target <= 1.2); loaded-unpoliced is b not isolated while
// the 200 policies are in place.
func BenchmarkFirstPacket(b *testing.B) {
	l := newLab(b)
	listen(b, l.b, 8080)
	w := benchWorld()
	w.nss = append(w.nss, ns("zz"))
	w.pods = append(w.pods,
		pod("zz", "a", "n1", "10.250.0.2", []string{"app", "a"}),
		pod("zz", "b", "n1", "10.250.0.3", []string{"app", "b"}, cport("http", 8080, corev1.ProtocolTCP)))
	policed := append(append([]*networkingv1.NetworkPolicy(nil), w.pols...),
		ingress(policy("zz", "a-to-b", sel("app", "b")), []networkingPeer{podPeer(sel("app", "a"), nil)}, named("http", corev1.ProtocolTCP)))
	e, _, _ := l.enforcer(b, w, slog.New(slog.NewTextHandler(io.Discard, nil)))
	e.SetInitialized()
	dial := func() time.Duration {
		var d time.Duration
		err := netns.Do(l.a, func() error {
			start := time.Now()
			c, err := net.DialTimeout("tcp", "10.250.0.3:8080", 5*time.Second)
			d = time.Since(start)
			if err != nil {
				return err
			}
			return c.Close()
		})
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	measure := func(pols []*networkingv1.NetworkPolicy) time.Duration {
		w.setPolicies(pols...)
		inNode(b, l, func() error { e.forgetKernel(); return e.Sync() })
		dial() // warm up
		// The median: other work on a shared machine only adds outliers.
		ds := make([]time.Duration, b.N)
		for i := range ds {
			ds[i] = dial()
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	b.ResetTimer()
	plain := measure(nil)
	loaded := measure(policed[:len(policed)-1])
	withPolicy := measure(policed)
	b.ReportMetric(float64(loaded.Nanoseconds())/1e3, "loaded-unpoliced-us")
	b.ReportMetric(float64(plain.Nanoseconds())/1e3, "unpoliced-us")
	b.ReportMetric(float64(withPolicy.Nanoseconds())/1e3, "policed-us")
	b.ReportMetric(float64(withPolicy)/float64(plain), "policed/unpoliced")
}
