package stream

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/netns"

	"github.com/minikit/minikit/test/testenv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// bulkBytes is the size of the bulk download: large enough that setting up the
// connection does not count, small enough for a loaded 2-core machine.
const bulkBytes = 512 << 20

// BenchmarkStream reports, for each kubectl, the median time of
// `kubectl exec POD -- true` against `kubectl get pod POD` (20 runs each, the
// same binary in the same lab); HTTP requests per second through
// `kubectl port-forward` against the same load sent directly to the pod from
// its node; and the rate of one bulk download through port-forward against the
// same download from the node. scripts/bench-stream.sh runs it; nothing is
// asserted on time.
func BenchmarkStream(b *testing.B) {
	l, ks := setup(b)
	c := testenv.Client(b, l)
	pod, err := c.CoreV1().Pods("default").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	bulkPort := serveBulk(b, testenv.SandboxName(b, c, pod))
	toPod := func(port int) *http.Transport {
		return &http.Transport{DisableCompression: true,
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return l.DialContext(ctx, "node1", network, net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port)))
			}}
	}
	b.ResetTimer()
	for range b.N {
		const runs, requests, conc = 20, 10000, 20
		// The reference first and last: the machine is shared, so the
		// ratios use the mean of the two.
		directRate := func() float64 {
			tr := toPod(9376)
			tr.MaxConnsPerHost, tr.MaxIdleConnsPerHost = conc, conc
			start := time.Now()
			n, errs := loadWith(tr, "web", requests, conc, nil)
			if errs != nil {
				b.Fatalf("direct: %d errors, first %v", len(errs), errs[0])
			}
			return float64(n) / time.Since(start).Seconds()
		}
		directBulk := func() float64 { return bulk(b, toPod(bulkPort), "web") }
		direct, directMB := directRate(), directBulk()
		type result struct {
			name        string
			rate, bytes float64
		}
		var results []result
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
			addr, stop = portForward(b, k, "pod/web", ":"+strconv.Itoa(bulkPort))
			fwdMB := bulk(b, &http.Transport{DisableCompression: true}, addr)
			stop()
			b.ReportMetric(fwd, "req/s-port-forward-"+tag)
			b.ReportMetric(fwdMB, "MB/s-port-forward-"+tag)
			results = append(results, result{k.name, fwd, fwdMB})
		}
		direct2, directMB2 := directRate(), directBulk()
		b.Logf("direct from node1 to the pod: %.0f then %.0f req/s over %d connections; bulk %.0f then %.0f MB/s",
			direct, direct2, conc, directMB, directMB2)
		direct, directMB = (direct+direct2)/2, (directMB+directMB2)/2
		b.ReportMetric(direct, "req/s-direct")
		b.ReportMetric(directMB, "MB/s-direct")
		for _, r := range results {
			b.Logf("kubectl %s: port-forward %.0f req/s over %d connections (%.2fx direct), bulk %.0f MB/s (%.2fx direct)",
				r.name, r.rate, conc, r.rate/direct, r.bytes, r.bytes/directMB)
		}
	}
}

// serveBulk serves GET /N (N bytes of zeros) on a port of the pod's network
// namespace, from this process: a server whose own cost is the same for the
// direct download and the forwarded one. It returns the port.
func serveBulk(b *testing.B, podNS string) int {
	var ln net.Listener
	err := netns.DoPath(netns.NetNSPath(podNS), func() error {
		var err error
		ln, err = net.Listen("tcp4", "0.0.0.0:0")
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(n))
		for n > 0 {
			m, err := w.Write(chunk[:min(n, len(chunk))])
			if err != nil {
				return
			}
			n -= m
		}
	})}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// bulk downloads bulkBytes from the bulk server at addr and returns MB/s.
func bulk(b *testing.B, tr *http.Transport, addr string) float64 {
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 60 * time.Second}
	start := time.Now()
	resp, err := client.Get(fmt.Sprintf("http://%s/%d", addr, bulkBytes))
	if err != nil {
		b.Fatalf("bulk download from %s: %v", addr, err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || n != bulkBytes {
		b.Fatalf("bulk download from %s: %d bytes of %d, %v", addr, n, bulkBytes, err)
	}
	return float64(n) / time.Since(start).Seconds() / 1e6
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
