package stream

import (
	"context"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/test/testenv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BenchmarkStream reports, for each kubectl, the median time of
// `kubectl exec POD -- true` against `kubectl get pod POD` (20 runs each, the
// same binary in the same lab), and HTTP requests per second through
// `kubectl port-forward` against the same load sent directly to the pod from
// its node. scripts/bench-stream.sh runs it; nothing is asserted on time.
func BenchmarkStream(b *testing.B) {
	l, ks := setup(b)
	c := testenv.Client(b, l)
	pod, err := c.CoreV1().Pods("default").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		const runs, requests, conc = 20, 2000, 20
		for _, k := range ks {
			tag := strings.ReplaceAll(k.name, ".", "")
			exec := median(b, runs, k, "exec", "shell", "--", "true")
			get := median(b, runs, k, "get", "pod", "shell")
			b.ReportMetric(float64(exec.Microseconds())/1000, "ms/exec-"+tag)
			b.ReportMetric(float64(get.Microseconds())/1000, "ms/get-"+tag)
			b.Logf("kubectl %s: median exec %v, get %v (exec/get %.2f)", k.name, exec, get, float64(exec)/float64(get))

			addr, stop := portForward(b, k, "pod/web", ":9376")
			start := time.Now()
			n, errs := load(addr, requests, conc)
			fwd := float64(n) / time.Since(start).Seconds()
			stop()
			if errs != nil {
				b.Fatalf("port-forward: %d errors, first %v", len(errs), errs[0])
			}
			b.ReportMetric(fwd, "req/s-port-forward-"+tag)
			b.Logf("kubectl %s: port-forward %.0f req/s over %d connections", k.name, fwd, conc)
		}
		// The reference: the same load from the pod's node straight to the pod.
		tr := &http.Transport{MaxConnsPerHost: conc, MaxIdleConnsPerHost: conc,
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return l.DialContext(ctx, "node1", network, net.JoinHostPort(pod.Status.PodIP, "9376"))
			}}
		start := time.Now()
		n, errs := loadWith(tr, "web", requests, conc, nil)
		direct := float64(n) / time.Since(start).Seconds()
		if errs != nil {
			b.Fatalf("direct: %d errors, first %v", len(errs), errs[0])
		}
		b.ReportMetric(direct, "req/s-direct")
		b.Logf("direct from node1 to the pod: %.0f req/s over %d connections", direct, conc)
	}
}

// median runs kubectl args n times and returns the median wall time.
func median(b *testing.B, n int, k kubectl, args ...string) time.Duration {
	var ds []time.Duration
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		out, err := k.cmd(ctx, args...).CombinedOutput()
		ds = append(ds, time.Since(start))
		cancel()
		if err != nil {
			b.Fatalf("kubectl %s %v: %v\n%s", k.name, args, err, out)
		}
	}
	slices.Sort(ds)
	return ds[n/2]
}
