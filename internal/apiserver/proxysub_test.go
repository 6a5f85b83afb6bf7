package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/minikit/minikit/internal/store"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// echoed is what a test backend saw of a proxied request.
type echoed struct {
	Backend string      `json:"backend"`
	Method  string      `json:"method"`
	Path    string      `json:"path"`
	Query   string      `json:"query"`
	Body    string      `json:"body"`
	Header  http.Header `json:"header"`
}

// echoBackend answers every request with what it saw, as JSON, except
// /redirect (a Location on the backend's own address) and /page (HTML with
// links to rewrite).
func echoBackend(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			w.Header().Set("Location", "http://"+r.Host+"/other")
			w.WriteHeader(http.StatusFound)
			return
		case "/page":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<html><body><a href="/docs/">docs</a><img src="logo.png"></body></html>`)
			return
		}
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(echoed{Backend: name, Method: r.Method, Path: r.URL.EscapedPath(),
			Query: r.URL.RawQuery, Body: string(b), Header: r.Header})
	})
}

// proxyLab is an API server whose proxy dials fake cluster addresses
// (ADDR:PORT) that tests map to loopback httptest servers; any other address
// is refused, so no test packet leaves loopback.
type proxyLab struct {
	*testAPI
	mu     sync.Mutex
	routes map[string]string // fake "ip:port" -> "127.0.0.1:port"
	dialed []string
}

func newProxyLab(t *testing.T) *proxyLab {
	t.Helper()
	l := &proxyLab{testAPI: newTestAPI(t), routes: map[string]string{}}
	l.srv.cfg.NodeToken = "node-secret"
	l.srv.proxy.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		l.mu.Lock()
		real, ok := l.routes[addr]
		l.dialed = append(l.dialed, addr)
		l.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("dial %s %s: connect: connection refused", network, addr)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, real)
	}
	return l
}

// serve maps the fake address to a new loopback backend (TLS when tls).
func (l *proxyLab) serve(t *testing.T, fake, name string, tls bool, h http.Handler) {
	t.Helper()
	if h == nil {
		h = echoBackend(name)
	}
	var hs *httptest.Server
	if tls {
		hs = httptest.NewTLSServer(h)
	} else {
		hs = httptest.NewServer(h)
	}
	t.Cleanup(hs.Close)
	l.mu.Lock()
	l.routes[fake] = hs.Listener.Addr().String()
	l.mu.Unlock()
}

// setStatus writes an object's status as its controller would.
func (l *proxyLab) setStatus(t *testing.T, res *resource, ns, name string, mutate func(runtime.Object)) {
	t.Helper()
	if _, err := l.srv.Update(res, ns, name, "status", func(cur runtime.Object) (runtime.Object, error) {
		mutate(cur)
		return cur, nil
	}); err != nil {
		t.Fatal(err)
	}
}

func (l *proxyLab) addPod(t *testing.T, name, ip string, ports ...int32) {
	t.Helper()
	p := newPod(name, "", map[string]string{"app": "web"})
	for _, port := range ports {
		p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{ContainerPort: port})
	}
	l.create(podsPath, p)
	if ip != "" {
		l.setStatus(t, proxyPodResource, "default", name, func(o runtime.Object) {
			pod := o.(*corev1.Pod)
			pod.Status.PodIP = ip
			pod.Status.PodIPs = []corev1.PodIP{{IP: ip}}
		})
	}
}

func (l *proxyLab) addNode(t *testing.T, name, ip string, port int32) {
	t.Helper()
	l.create(nodesPath, newNode(name))
	l.setStatus(t, nodeResource, "", name, func(o runtime.Object) {
		n := o.(*corev1.Node)
		if ip != "" {
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}}
		}
		n.Status.DaemonEndpoints.KubeletEndpoint.Port = port
	})
}

// send makes a request as kubectl would (with the API's bearer token), without
// following redirects.
func (l *proxyLab) send(t *testing.T, method, path, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, l.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer api-secret")
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func (l *proxyLab) echo(t *testing.T, method, path, body string) echoed {
	t.Helper()
	resp := l.send(t, method, path, body)
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, b)
	}
	var e echoed
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("%s %s: not an echo: %v: %s", method, path, err, b)
	}
	if e.Header.Get("Authorization") != "" && e.Backend != "agent" {
		t.Errorf("%s %s: the backend saw credentials %q", method, path, e.Header.Get("Authorization"))
	}
	return e
}

func (l *proxyLab) wantError(t *testing.T, method, path string, code int, reason metav1.StatusReason, msg string) {
	t.Helper()
	resp := l.send(t, method, path, "")
	b, _ := io.ReadAll(resp.Body)
	response{code: resp.StatusCode, body: b}.wantStatus(t, code, reason, msg)
}

const podProxy = "/api/v1/namespaces/default/pods/"

func TestPodProxy(t *testing.T) {
	l := newProxyLab(t)
	l.addPod(t, "web", "10.244.1.5", 8080, 9090)
	l.addPod(t, "noports", "10.244.1.6")
	l.addPod(t, "pending", "")
	l.addPod(t, "loop", "127.0.0.1", 8080)
	l.serve(t, "10.244.1.5:8080", "web:8080", false, nil)
	l.serve(t, "10.244.1.5:9090", "web:9090", false, nil)
	l.serve(t, "10.244.1.5:8443", "web:8443", true, nil)
	l.serve(t, "10.244.1.6:80", "noports:80", false, nil)

	for _, c := range []struct {
		name, path, backend, wantPath, wantQuery string
	}{
		{"first container port", "web/proxy/hello", "web:8080", "/hello", ""},
		{"name:port", "web:9090/proxy/a/b/?x=1&y=2", "web:9090", "/a/b/", "x=1&y=2"},
		{"scheme:name:port", "https:web:8443/proxy/tls", "web:8443", "/tls", ""},
		{"http scheme", "http:web:9090/proxy/", "web:9090", "/", ""},
		{"trailing slash only", "web/proxy/", "web:8080", "/", ""},
		{"no port declared: scheme default", "noports/proxy/x", "noports:80", "/x", ""},
		{"escaped path", "web/proxy/a%20b/c", "web:8080", "/a%20b/c", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := l.echo(t, http.MethodGet, podProxy+c.path, "")
			if e.Backend != c.backend || e.Path != c.wantPath || e.Query != c.wantQuery {
				t.Errorf("reached %s %s?%s, want %s %s?%s", e.Backend, e.Path, e.Query, c.backend, c.wantPath, c.wantQuery)
			}
		})
	}

	t.Run("forwarded headers", func(t *testing.T) {
		e := l.echo(t, http.MethodGet, podProxy+"web/proxy/hello/", "")
		// Host and Proto come from the request URL, which for a request to a
		// server has neither, in kube-apiserver as here: only the URI is set.
		for k, want := range map[string]string{
			"X-Forwarded-Uri":   "/api/v1/namespaces/default/pods/web/proxy/hello/",
			"X-Forwarded-Host":  "",
			"X-Forwarded-Proto": "",
		} {
			if got := e.Header.Get(k); got != want {
				t.Errorf("%s = %q, want %q", k, got, want)
			}
		}
		if e.Header.Get("X-Forwarded-For") == "" {
			t.Error("no X-Forwarded-For")
		}
	})

	t.Run("every method", func(t *testing.T) {
		for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
			e := l.echo(t, m, podProxy+"web/proxy/some/path/with/"+m, "body-"+m)
			if e.Method != m || e.Path != "/some/path/with/"+m {
				t.Errorf("%s reached the backend as %s %s", m, e.Method, e.Path)
			}
			if m != "GET" && m != "OPTIONS" && e.Body != "body-"+m {
				t.Errorf("%s: backend got body %q", m, e.Body)
			}
		}
		if resp := l.send(t, http.MethodHead, podProxy+"web/proxy/some/path/with/HEAD", ""); resp.StatusCode != http.StatusOK {
			t.Errorf("HEAD: HTTP %d", resp.StatusCode)
		}
	})

	t.Run("empty subpath: GET and HEAD redirect, others go to /", func(t *testing.T) {
		for _, m := range []string{"GET", "HEAD"} {
			resp := l.send(t, m, podProxy+"web/proxy?method="+m, "")
			want := "/api/v1/namespaces/default/pods/web/proxy/?method=" + m
			if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != want {
				t.Errorf("%s: HTTP %d Location %q, want 301 %q", m, resp.StatusCode, resp.Header.Get("Location"), want)
			}
		}
		for _, m := range []string{"DELETE", "OPTIONS", "PATCH", "POST", "PUT"} {
			e := l.echo(t, m, podProxy+"web/proxy?method="+m, "foo")
			if e.Method != m || e.Path != "/" || e.Query != "method="+m {
				t.Errorf("%s reached the backend as %s %s?%s", m, e.Method, e.Path, e.Query)
			}
		}
	})

	t.Run("location rewritten", func(t *testing.T) {
		resp := l.send(t, http.MethodGet, podProxy+"web/proxy/redirect", "")
		want := "/api/v1/namespaces/default/pods/web/proxy/other"
		if resp.StatusCode != http.StatusFound || !strings.HasSuffix(resp.Header.Get("Location"), want) {
			t.Errorf("HTTP %d Location %q, want 302 ending in %q", resp.StatusCode, resp.Header.Get("Location"), want)
		}
	})

	t.Run("html links rewritten", func(t *testing.T) {
		resp := l.send(t, http.MethodGet, podProxy+"web/proxy/page", "")
		b, _ := io.ReadAll(resp.Body)
		if want := `href="/api/v1/namespaces/default/pods/web/proxy/docs/"`; !strings.Contains(string(b), want) {
			t.Errorf("page %s does not contain %s", b, want)
		}
	})

	for _, c := range []struct {
		name, method, path string
		code               int
		reason             metav1.StatusReason
		msg                string
	}{
		{"too many colons", "GET", "a:b:c:d/proxy/", 400, metav1.StatusReasonBadRequest, `invalid pod request "a:b:c:d"`},
		{"unknown scheme", "GET", "ftp:web:80/proxy/", 400, metav1.StatusReasonBadRequest, `invalid pod request "ftp:web:80"`},
		{"empty name", "GET", ":80/proxy/", 400, metav1.StatusReasonBadRequest, "invalid pod request"},
		{"missing pod", "GET", "nope/proxy/", 404, metav1.StatusReasonNotFound, `pods "nope" not found`},
		{"missing pod, empty subpath", "GET", "nope/proxy", 404, metav1.StatusReasonNotFound, `pods "nope" not found`},
		{"no pod IP yet", "GET", "pending/proxy/", 400, metav1.StatusReasonBadRequest, "address not allowed"},
		{"loopback pod IP", "GET", "loop/proxy/", 400, metav1.StatusReasonBadRequest, "address not allowed"},
		{"nothing listens", "GET", "web:7070/proxy/", 503, metav1.StatusReasonServiceUnavailable, "error trying to reach service: dial tcp 10.244.1.5:7070"},
		{"method", "TRACE", "web/proxy/", 405, metav1.StatusReasonMethodNotAllowed, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			l.wantError(t, c.method, podProxy+c.path, c.code, c.reason, c.msg)
		})
	}
	t.Run("not a proxyable resource", func(t *testing.T) {
		l.wantError(t, "GET", "/api/v1/namespaces/default/configmaps/x/proxy/", 404, metav1.StatusReasonNotFound, "")
		l.wantError(t, "GET", podProxy+"web/status/extra", 404, metav1.StatusReasonNotFound, "")
	})
}

const svcProxy = "/api/v1/namespaces/default/services/"

func TestServiceProxy(t *testing.T) {
	l := newProxyLab(t)
	l.addPod(t, "web-a", "10.244.1.5")
	l.addPod(t, "web-b", "10.244.2.5")
	l.addPod(t, "web-stale", "10.244.3.9") // the slice's address is not this pod's
	l.serve(t, "10.244.1.5:8080", "web-a", false, nil)
	l.serve(t, "10.244.2.5:8080", "web-b", false, nil)
	l.serve(t, "10.244.1.5:8443", "web-a-tls", true, nil)
	l.serve(t, "10.244.2.5:8443", "web-b-tls", true, nil)
	l.serve(t, "10.244.1.5:9376", "single", false, nil)

	svc := newService("web", func(s *corev1.Service) {
		s.Spec.Selector = nil
		s.Spec.Ports = []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromString("http")},
			{Name: "tls", Port: 443, TargetPort: intstr.FromInt32(8443)},
		}
	})
	l.create(servicesPath, svc)
	l.create(servicesPath, newService("single", func(s *corev1.Service) {
		s.Spec.Ports = []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(9376)}}
	}))
	l.create(servicesPath, newService("empty"))
	l.create(servicesPath, newService("unready"))

	ready, notReady := true, false
	ref := func(name string) *corev1.ObjectReference {
		return &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: name}
	}
	port := func(name string, p int32) discoveryv1.EndpointPort {
		tcp := corev1.ProtocolTCP
		ep := discoveryv1.EndpointPort{Port: &p, Protocol: &tcp}
		if name != "" {
			ep.Name = &name
		}
		return ep
	}
	slice := func(name, svc string, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			TypeMeta:    metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
			ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
			AddressType: discoveryv1.AddressTypeIPv4, Ports: ports, Endpoints: eps,
		}
	}
	webPorts := []discoveryv1.EndpointPort{port("http", 8080), port("tls", 8443)}
	l.create(slicesPath, slice("web-1", "web", webPorts,
		discoveryv1.Endpoint{Addresses: []string{"10.244.1.5"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}, TargetRef: ref("web-a")},
		discoveryv1.Endpoint{Addresses: []string{"10.244.9.9"}, Conditions: discoveryv1.EndpointConditions{Ready: &notReady}, TargetRef: ref("web-b")},
		discoveryv1.Endpoint{Addresses: []string{"10.244.3.3"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}, TargetRef: ref("web-stale")},
		discoveryv1.Endpoint{Addresses: []string{"10.244.4.4"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}},
	))
	// Ready is unset: an endpoint whose readiness is unknown counts as ready.
	l.create(slicesPath, slice("web-2", "web", webPorts,
		discoveryv1.Endpoint{Addresses: []string{"10.244.2.5"}, TargetRef: ref("web-b")}))
	l.create(slicesPath, slice("single-1", "single", []discoveryv1.EndpointPort{port("", 9376)},
		discoveryv1.Endpoint{Addresses: []string{"10.244.1.5"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}, TargetRef: ref("web-a")}))
	l.create(slicesPath, slice("unready-1", "unready", []discoveryv1.EndpointPort{port("http", 8080)},
		discoveryv1.Endpoint{Addresses: []string{"10.244.1.5"}, Conditions: discoveryv1.EndpointConditions{Ready: &notReady}, TargetRef: ref("web-a")}))

	for _, c := range []struct {
		name, path string
		backends   []string
		wantPath   string
	}{
		{"port number mapped to its name", "web:80/proxy/x", []string{"web-a", "web-b"}, "/x"},
		{"port name", "web:http/proxy/x/", []string{"web-a", "web-b"}, "/x/"},
		{"http:name:portname", "http:web:http/proxy/", []string{"web-a", "web-b"}, "/"},
		{"https:name:port", "https:web:443/proxy/secure", []string{"web-a-tls", "web-b-tls"}, "/secure"},
		{"bare name, unnamed port", "single/proxy/", []string{"single"}, "/"},
	} {
		t.Run(c.name, func(t *testing.T) {
			seen := map[string]bool{}
			for range 40 {
				e := l.echo(t, http.MethodGet, svcProxy+c.path, "")
				if e.Path != c.wantPath {
					t.Fatalf("backend got path %q, want %q", e.Path, c.wantPath)
				}
				seen[e.Backend] = true
			}
			for _, b := range c.backends {
				if !seen[b] {
					t.Errorf("40 requests never reached %s (reached %v)", b, seen)
				}
			}
			if len(seen) != len(c.backends) {
				t.Errorf("reached %v, want only %v", seen, c.backends)
			}
		})
	}
	t.Run("only valid endpoints are dialed", func(t *testing.T) {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, a := range l.dialed {
			if !strings.HasPrefix(a, "10.244.1.5:") && !strings.HasPrefix(a, "10.244.2.5:") {
				t.Errorf("dialed %s: not ready, or not its pod's address", a)
			}
		}
	})

	for _, c := range []struct {
		name, path string
		code       int
		reason     metav1.StatusReason
		msg        string
	}{
		{"bad id", "a:b:c:d/proxy/", 400, metav1.StatusReasonBadRequest, `invalid service request "a:b:c:d"`},
		{"missing service", "nope/proxy/", 404, metav1.StatusReasonNotFound, `services "nope" not found`},
		{"unknown port number", "web:81/proxy/", 503, metav1.StatusReasonServiceUnavailable, `no service port 81 found for service "web"`},
		{"unknown port name", "web:metrics/proxy/", 503, metav1.StatusReasonServiceUnavailable, `no endpoints available for service "web:metrics"`},
		{"named ports need a port", "web/proxy/", 503, metav1.StatusReasonServiceUnavailable, `no endpoints available for service "web"`},
		{"no slices", "empty:80/proxy/", 503, metav1.StatusReasonServiceUnavailable, `no endpoints available for service "empty:80"`},
		{"no ready endpoint", "unready:http/proxy/", 503, metav1.StatusReasonServiceUnavailable, `no endpoints available for service "unready:http"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			l.wantError(t, "GET", svcProxy+c.path, c.code, c.reason, c.msg)
		})
	}
}

func TestNodeProxy(t *testing.T) {
	l := newProxyLab(t)
	l.addNode(t, "node1", "192.168.50.11", 10250)
	l.addNode(t, "loop", "127.0.0.1", 10250)
	l.addNode(t, "bare", "", 10250)
	agent := echoBackend("agent")
	l.serve(t, "192.168.50.11:10250", "agent", false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer node-secret" {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		agent.ServeHTTP(w, r)
	}))
	l.serve(t, "192.168.50.11:9100", "exporter", false, nil)

	for _, path := range []string{"node1/proxy/healthz", "node1:10250/proxy/healthz", "https:node1:10250/proxy/healthz"} {
		e := l.echo(t, http.MethodGet, "/api/v1/nodes/"+path, "")
		if e.Backend != "agent" || e.Path != "/healthz" {
			t.Errorf("%s reached %s %s, want the agent's /healthz", path, e.Backend, e.Path)
		}
		if got := e.Header.Get("X-Forwarded-Uri"); got != "/api/v1/nodes/"+strings.SplitN(path, "/", 2)[0]+"/proxy/healthz" {
			t.Errorf("%s: X-Forwarded-Uri %q", path, got)
		}
	}
	e := l.echo(t, http.MethodGet, "/api/v1/nodes/node1:9100/proxy/metrics", "")
	if e.Backend != "exporter" || e.Path != "/metrics" || e.Header.Get("Authorization") != "" {
		t.Errorf("another port: reached %s %s with Authorization %q", e.Backend, e.Path, e.Header.Get("Authorization"))
	}
	l.wantError(t, "GET", "/api/v1/nodes/nope/proxy/", 404, metav1.StatusReasonNotFound, `nodes "nope" not found`)
	l.wantError(t, "GET", "/api/v1/nodes/a:b:c:d/proxy/", 400, metav1.StatusReasonBadRequest, `invalid node request "a:b:c:d"`)
	l.wantError(t, "GET", "/api/v1/nodes/loop/proxy/healthz", 400, metav1.StatusReasonBadRequest, "address not allowed")
	l.wantError(t, "GET", "/api/v1/nodes/bare/proxy/healthz", 503, metav1.StatusReasonServiceUnavailable, `node "bare" has no address`)
	l.wantError(t, "GET", "/api/v1/nodes/node1:9999/proxy/", 503, metav1.StatusReasonServiceUnavailable, "error trying to reach service")
	resp := l.send(t, http.MethodGet, "/api/v1/nodes/node1/proxy", "")
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/api/v1/nodes/node1/proxy/" {
		t.Errorf("empty subpath: HTTP %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func TestProxyDiscovery(t *testing.T) {
	a := newTestAPI(t)
	var list metav1.APIResourceList
	a.read("/api/v1", &list)
	want := map[string]string{"pods/proxy": "PodProxyOptions", "services/proxy": "ServiceProxyOptions", "nodes/proxy": "NodeProxyOptions"}
	for _, r := range list.APIResources {
		if kind, ok := want[r.Name]; ok {
			if r.Kind != kind || !strings.Contains(strings.Join(r.Verbs, ","), "create,delete,get,patch,update") {
				t.Errorf("%s: kind %q verbs %v", r.Name, r.Kind, r.Verbs)
			}
			delete(want, r.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("discovery lacks %v", want)
	}
}

// TestKubernetesEndpointSlice checks the slice of default/kubernetes that the
// API server writes next to its Endpoints, and that a restart with another
// address or port rewrites both.
func TestKubernetesEndpointSlice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	for _, c := range []struct {
		addr     string
		port     int32
		addrType discoveryv1.AddressType
	}{
		{"192.168.50.11", 6443, discoveryv1.AddressTypeIPv4},
		{"192.168.50.12", 7443, discoveryv1.AddressTypeIPv4},
		{"fd00::11", 6443, discoveryv1.AddressTypeIPv6},
	} {
		st, err := store.OpenBolt(path, 0)
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(Config{Store: st, AdvertiseAddress: c.addr, Port: c.port, Version: "test",
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			st.Close()
			t.Fatal(err)
		}
		obj, err := s.get(proxySliceResource, "default", "kubernetes")
		if err != nil {
			st.Close()
			t.Fatal(err)
		}
		sl := obj.(*discoveryv1.EndpointSlice)
		if len(sl.Labels) != 1 || sl.Labels[discoveryv1.LabelServiceName] != "kubernetes" {
			t.Errorf("%s: labels %v, want only the service name", c.addr, sl.Labels)
		}
		if sl.AddressType != c.addrType || len(sl.Endpoints) != 1 || len(sl.Endpoints[0].Addresses) != 1 ||
			sl.Endpoints[0].Addresses[0] != c.addr || sl.Endpoints[0].Conditions.Ready == nil || !*sl.Endpoints[0].Conditions.Ready {
			t.Errorf("%s: slice %s %+v", c.addr, sl.AddressType, sl.Endpoints)
		}
		if len(sl.Ports) != 1 || *sl.Ports[0].Name != "https" || *sl.Ports[0].Port != c.port || *sl.Ports[0].Protocol != corev1.ProtocolTCP {
			t.Errorf("%s: ports %+v", c.addr, sl.Ports)
		}
		eobj, err := s.get(lookup("", "v1", "endpoints"), "default", "kubernetes")
		if err != nil {
			st.Close()
			t.Fatal(err)
		}
		ep := eobj.(*corev1.Endpoints)
		if got := ep.Subsets[0].Addresses[0].IP; netip.MustParseAddr(got) != netip.MustParseAddr(c.addr) {
			t.Errorf("%s: Endpoints address %s", c.addr, got)
		}
		st.Close()
	}
}
