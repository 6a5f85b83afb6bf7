package apiserver

import (
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// BenchmarkServerSideApplyVsUpdate changes a Service's label 500 times with
// server-side apply and 500 times with a plain update (GET then PUT, as
// client-go's update loop does), interleaved on the same server in the same
// run, and reports how many times slower apply is. Target: at most 2x.
func BenchmarkServerSideApplyVsUpdate(b *testing.B) {
	const n = 500
	var apply, update time.Duration
	for range b.N {
		a := newTestAPI(b)
		a.create(servicesPath, newService("put"))
		body := func(i int) string {
			return fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata:\n  name: ssa\n  labels:\n    round: \"%d\"\nspec:\n"+
				"  selector:\n    app: ssa\n  ports:\n  - name: http\n    port: 80\n    targetPort: 8080\n", i)
		}
		if r := a.patch(servicesPath+"/ssa?fieldManager=bench", applyYAML, body(n)); r.code != http.StatusCreated {
			b.Fatalf("HTTP %d: %s", r.code, r.body)
		}
		for i := range n {
			start := time.Now()
			if r := a.patch(servicesPath+"/ssa?fieldManager=bench", applyYAML, body(i)); r.code != http.StatusOK {
				b.Fatalf("HTTP %d: %s", r.code, r.body)
			}
			apply += time.Since(start)
			start = time.Now()
			var s corev1.Service
			a.read(servicesPath+"/put", &s)
			s.Labels = map[string]string{"round": fmt.Sprint(i)}
			if r := a.put(servicesPath+"/put", &s); r.code != http.StatusOK {
				b.Fatalf("HTTP %d: %s", r.code, r.body)
			}
			update += time.Since(start)
		}
	}
	b.ReportMetric(float64(apply)/float64(update), "apply/update")
	b.ReportMetric(float64(apply.Microseconds())/float64(b.N*n), "apply-us")
	b.ReportMetric(float64(update.Microseconds())/float64(b.N*n), "update-us")
}

// BenchmarkGatewayAPIBundleMemory reports the live heap of a server before
// and after the Gateway API experimental channel's CRDs are installed (served,
// their OpenAPI built, an HTTPRoute applied), on the same server in the same
// run, and the difference.
func BenchmarkGatewayAPIBundleMemory(b *testing.B) {
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	var without, with uint64
	for range b.N {
		a := newTestAPI(b)
		a.get("/openapi/v2").mustCode(b, http.StatusOK, nil)
		a.patch(configMapsPath+"/warm?fieldManager=bench", applyYAML, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: warm\n").mustCode(b, http.StatusCreated, nil)
		before := heap()
		// The experimental channel: every kind of the standard one, and more.
		for _, crd := range gatewayAPICRDs(b, "experimental") {
			a.post(crdsPath, crd).mustCode(b, http.StatusCreated, nil)
		}
		a.waitEstablished("httproutes.gateway.networking.k8s.io", "/apis/gateway.networking.k8s.io/v1/httproutes")
		a.get("/openapi/v2").mustCode(b, http.StatusOK, nil)
		a.patch("/apis/gateway.networking.k8s.io/v1/namespaces/default/httproutes/r?fieldManager=bench", applyYAML,
			"apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata:\n  name: r\nspec: {}\n").mustCode(b, http.StatusCreated, nil)
		after := heap()
		without += before
		with += after
		runtime.KeepAlive(a)
	}
	b.ReportMetric(float64(without)/float64(b.N)/(1<<20), "heap-MiB-without")
	b.ReportMetric(float64(with)/float64(b.N)/(1<<20), "heap-MiB-with")
	b.ReportMetric((float64(with)-float64(without))/float64(b.N)/(1<<20), "heap-MiB-added")
}
