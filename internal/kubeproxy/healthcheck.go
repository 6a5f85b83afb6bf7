package kubeproxy

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// healthServers runs one HTTP server per healthCheckNodePort of the
// LoadBalancer services with externalTrafficPolicy: Local, answering as
// kube-proxy's pkg/proxy/healthcheck does: 200 when this node has local
// endpoints, 503 when it has none, so a load balancer sends traffic only to
// nodes that can serve it without SNAT.
type healthServers struct {
	listen func(port int) (net.Listener, error)
	log    *slog.Logger

	mu       sync.Mutex // guards servers and counts
	servers  map[types.NamespacedName]*hcServer
	counts   map[types.NamespacedName]int
	failures int
}

type hcServer struct {
	port int
	addr string
	srv  *http.Server
}

func newHealthServers(listen func(port int) (net.Listener, error), log *slog.Logger) *healthServers {
	if listen == nil {
		listen = func(port int) (net.Listener, error) { return net.Listen("tcp", ":"+strconv.Itoa(port)) }
	}
	return &healthServers{listen: listen, log: log,
		servers: map[types.NamespacedName]*hcServer{}, counts: map[types.NamespacedName]int{}}
}

// sync makes the set of servers match want (service -> port) and updates the
// local endpoint counts they report.
func (h *healthServers) sync(want map[types.NamespacedName]int, counts map[types.NamespacedName]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts = counts
	for name, s := range h.servers {
		if port, ok := want[name]; !ok || port != s.port {
			s.srv.Close()
			delete(h.servers, name)
			h.log.Info("stopped health check server", "service", name.String(), "port", s.port)
		}
	}
	for name, port := range want {
		if _, ok := h.servers[name]; ok {
			continue
		}
		ln, err := h.listen(port)
		if err != nil {
			h.failures++
			h.log.Error("starting health check server", "service", name.String(), "port", port, "err", err)
			continue
		}
		srv := &http.Server{Handler: h.handler(name)}
		h.servers[name] = &hcServer{port: port, addr: ln.Addr().String(), srv: srv}
		go srv.Serve(ln)
		h.log.Info("started health check server", "service", name.String(), "port", port)
	}
}

func (h *healthServers) handler(name types.NamespacedName) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		count := h.counts[name]
		h.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(count))
		if count != 0 {
			w.WriteHeader(http.StatusOK)
		} else {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintf(w, "{\n\t\"service\": {\n\t\t\"namespace\": %q,\n\t\t\"name\": %q\n\t},\n\t\"localEndpoints\": %d,\n\t\"serviceProxyHealthy\": true\n}",
			name.Namespace, name.Name, count)
	})
}

func (h *healthServers) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, s := range h.servers {
		s.srv.Close()
		delete(h.servers, name)
	}
}

// addrOf returns the address a server listens on (for tests).
func (h *healthServers) addrOf(s *hcServer) string { return s.addr }
