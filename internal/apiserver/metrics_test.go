package apiserver

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// /metrics is kube-apiserver's Prometheus text: every request served before
// it is counted under kube-apiserver's metric names and labels (verb as its
// metrics spell it, resource, scope, response code), and its latency is in
// the histogram.
func TestMetricsCountRequests(t *testing.T) {
	a := newTestAPI(t).with(t)
	defer a.close()
	a.create(configMapsPath, newConfigMap("one", map[string]string{"k": "v"}))
	a.get(configMapsPath).mustCode(t, http.StatusOK, nil)
	a.get(configMapsPath+"/missing").wantStatus(t, http.StatusNotFound, "NotFound", "")

	r := a.get("/metrics")
	if r.code != http.StatusOK {
		t.Fatalf("GET /metrics = %d %s", r.code, r.body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(r.body))
	if err != nil {
		t.Fatalf("/metrics is not Prometheus text: %v\n%s", err, r.body)
	}
	count := func(verb, scope, code string) float64 {
		f := families["apiserver_request_total"]
		if f == nil {
			t.Fatalf("no apiserver_request_total in /metrics:\n%s", r.body)
		}
		for _, m := range f.Metric {
			l := model.LabelSet{}
			for _, p := range m.Label {
				l[model.LabelName(p.GetName())] = model.LabelValue(p.GetValue())
			}
			if l["verb"] == model.LabelValue(verb) && l["resource"] == "configmaps" && l["version"] == "v1" &&
				l["scope"] == model.LabelValue(scope) && l["code"] == model.LabelValue(code) {
				return m.Counter.GetValue()
			}
		}
		return 0
	}
	for _, c := range []struct {
		verb, scope, code string
	}{{"POST", "namespace", "201"}, {"LIST", "namespace", "200"}, {"GET", "namespace", "404"}} {
		if got := count(c.verb, c.scope, c.code); got != 1 {
			t.Errorf("apiserver_request_total{verb=%q,resource=configmaps,scope=%q,code=%q} = %v, want 1", c.verb, c.scope, c.code, got)
		}
	}
	var samples uint64
	if h := families["apiserver_request_duration_seconds"]; h != nil {
		for _, m := range h.Metric {
			samples += m.Histogram.GetSampleCount()
		}
	}
	if samples < 3 {
		t.Errorf("apiserver_request_duration_seconds has %d samples, want one per request before /metrics", samples)
	}
	if families["go_goroutines"] == nil || families["process_start_time_seconds"] == nil {
		t.Errorf("the Go and process collectors are missing")
	}
}
