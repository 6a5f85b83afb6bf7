package cluster

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
)

// /metrics answers the process gauges in Prometheus text format, and every
// other path still reaches the wrapped handler.
func TestProcessMetrics(t *testing.T) {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "inner "+r.URL.Path) })
	srv := httptest.NewServer(withProcessMetrics(inner))
	defer srv.Close()
	get := func(path string) string {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	m := get("/metrics")
	for _, name := range []string{"go_goroutines", "go_threads", "process_open_fds", "process_resident_memory_bytes"} {
		if !regexp.MustCompile(`(?m)^# TYPE ` + name + ` gauge\n` + name + ` [1-9][0-9]*$`).MatchString(m) {
			t.Errorf("no positive %s gauge in:\n%s", name, m)
		}
	}
	if got := get("/stats"); got != "inner /stats" {
		t.Errorf("/stats = %q, want the wrapped handler's answer", got)
	}
}
