package apiserver

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// BenchmarkCustomResourcesVsConfigMaps creates, gets and lists 1,000 custom
// resources (the test Widget: schema validation, defaults, CEL rules) and
// 1,000 ConfigMaps on the same kind of server in the same run, and reports
// how many times slower each operation is for the custom resources.
func BenchmarkCustomResourcesVsConfigMaps(b *testing.B) {
	const n = 1000
	type timings struct{ create, get, list time.Duration }
	run := func(a *testAPI, collection string, body func(i int) any) timings {
		var t timings
		start := time.Now()
		for i := range n {
			if r := a.post(collection, body(i)); r.code != http.StatusCreated {
				b.Fatalf("HTTP %d: %s", r.code, r.body)
			}
		}
		t.create = time.Since(start)
		start = time.Now()
		for i := range n {
			if r := a.get(fmt.Sprintf("%s/o-%d", collection, i)); r.code != http.StatusOK {
				b.Fatalf("HTTP %d: %s", r.code, r.body)
			}
		}
		t.get = time.Since(start)
		start = time.Now()
		for range 10 {
			if r := a.get(collection); r.code != http.StatusOK {
				b.Fatalf("HTTP %d: %s", r.code, r.body)
			}
		}
		t.list = time.Since(start)
		return t
	}
	var cm, cr timings
	for range b.N {
		a := newTestAPI(b)
		c := run(a, configMapsPath, func(i int) any {
			return newConfigMap(fmt.Sprintf("o-%d", i), map[string]string{"color": "red", "replicas": "3"})
		})
		a.establish(widgetCRD(), widgetsPath)
		w := run(a, widgetsPath, func(i int) any {
			return widget(fmt.Sprintf("o-%d", i), map[string]any{"color": "red", "replicas": 3})
		})
		cm.create, cm.get, cm.list = cm.create+c.create, cm.get+c.get, cm.list+c.list
		cr.create, cr.get, cr.list = cr.create+w.create, cr.get+w.get, cr.list+w.list
	}
	b.ReportMetric(float64(cr.create)/float64(cm.create), "create-ratio")
	b.ReportMetric(float64(cr.get)/float64(cm.get), "get-ratio")
	b.ReportMetric(float64(cr.list)/float64(cm.list), "list-ratio")
	b.ReportMetric(float64(cr.create.Milliseconds())/float64(b.N), "cr-create-ms")
}
