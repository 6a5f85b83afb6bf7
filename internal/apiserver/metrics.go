package apiserver

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// serverMetrics are the API server's Prometheus metrics, served at /metrics
// in the text exposition format as kube-apiserver serves its own. The names
// and labels are kube-apiserver's (k8s.io/apiserver/pkg/endpoints/metrics):
// scrapers and dashboards written for a real cluster read them unchanged.
// Each Server has its own registry, so several servers in one process (the
// HA tests, a lab's nodes) do not share counters.
type serverMetrics struct {
	registry *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	inflight *prometheus.GaugeVec
	longRun  *prometheus.GaugeVec
	handler  http.Handler
}

func newServerMetrics() *serverMetrics {
	m := &serverMetrics{registry: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "apiserver_request_total",
		Help: "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.",
	}, []string{"verb", "dry_run", "group", "version", "resource", "subresource", "scope", "component", "code"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "apiserver_request_duration_seconds",
		Help: "Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component.",
		Buckets: []float64{0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3,
			4, 5, 6, 8, 10, 15, 20, 30, 45, 60},
	}, []string{"verb", "dry_run", "group", "version", "resource", "subresource", "scope", "component"})
	m.inflight = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "apiserver_current_inflight_requests",
		Help: "Maximal number of currently used inflight request limit of this apiserver per request kind in last second.",
	}, []string{"request_kind"})
	m.longRun = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "apiserver_longrunning_requests",
		Help: "Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component. Not all requests are tracked this way.",
	}, []string{"verb", "group", "version", "resource", "subresource", "scope", "component"})
	m.registry.MustRegister(m.requests, m.latency, m.inflight, m.longRun,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.handler = promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
	return m
}

// requestLabels are kube-apiserver's labels for one request: the verb as
// its metrics report it (the HTTP method, with LIST and WATCH apart from
// GET, APPLY apart from PATCH, CONNECT for streams and proxies), and the
// resource's group, version and scope.
type requestLabels struct {
	verb, dryRun, group, version, resource, subresource, scope string
	longRunning                                                bool
}

func labelsOf(r *http.Request) requestLabels {
	info, err := requestInfoFactory.NewRequestInfo(r)
	if err != nil || info == nil {
		return requestLabels{verb: strings.ToUpper(r.Method)}
	}
	l := requestLabels{group: info.APIGroup, version: info.APIVersion, resource: info.Resource, subresource: info.Subresource}
	if r.URL.Query().Has("dryRun") {
		l.dryRun = "All"
	}
	switch {
	case !info.IsResourceRequest:
		l.verb = strings.ToUpper(r.Method)
	case info.Verb == "create":
		l.verb = "POST"
	case info.Verb == "update":
		l.verb = "PUT"
	case info.Verb == "patch" && r.Header.Get("Content-Type") == "application/apply-patch+yaml":
		l.verb = "APPLY"
	case info.Verb == "watch" || info.Verb == "watchList":
		l.verb = "WATCH"
		l.longRunning = true
	default: // get, list, patch, delete, deletecollection
		l.verb = strings.ToUpper(info.Verb)
	}
	switch info.Subresource {
	case "exec", "attach", "portforward", "proxy", "log":
		l.longRunning = true
		l.verb = "CONNECT"
	}
	switch {
	case !info.IsResourceRequest:
	case info.Namespace != "":
		l.scope = "namespace"
	case info.Name != "":
		l.scope = "resource"
	default:
		l.scope = "cluster"
	}
	return l
}

// instrument runs next as one request kube-apiserver would count.
func (m *serverMetrics) instrument(w http.ResponseWriter, r *http.Request, next func(http.ResponseWriter, *http.Request)) {
	l := labelsOf(r)
	kind := "readOnly"
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		kind = "mutating"
	}
	if l.longRunning {
		g := m.longRun.WithLabelValues(l.verb, l.group, l.version, l.resource, l.subresource, l.scope, "apiserver")
		g.Inc()
		defer g.Dec()
	} else {
		g := m.inflight.WithLabelValues(kind)
		g.Inc()
		defer g.Dec()
	}
	timer := prometheus.NewTimer(m.latency.WithLabelValues(l.verb, l.dryRun, l.group, l.version, l.resource, l.subresource, l.scope, "apiserver"))
	rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
	defer func() {
		if !l.longRunning {
			timer.ObserveDuration()
		}
		m.requests.WithLabelValues(l.verb, l.dryRun, l.group, l.version, l.resource, l.subresource, l.scope, "apiserver", strconv.Itoa(rec.code)).Inc()
	}()
	next(rec, r)
}

// statusRecorder remembers the response code; it passes Flush and
// Hijack through (watches flush, exec and port-forward hijack).
type statusRecorder struct {
	http.ResponseWriter
	code        int
	wroteHeader bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wroteHeader {
		s.code, s.wroteHeader = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.wroteHeader = true
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush, Hijack and deadlines.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack hands the connection over (exec, attach and port-forward upgrades);
// the request counts as 101 Switching Protocols.
func (s *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(s.ResponseWriter).Hijack()
	if err == nil && !s.wroteHeader {
		s.code, s.wroteHeader = http.StatusSwitchingProtocols, true
	}
	return c, rw, err
}
