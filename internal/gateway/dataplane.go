package gateway

import (
	"context"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// The node's data plane answers requests from a Snapshot: for each data port
// the routing Table of the Gateway listeners behind it, and the ready
// endpoints of the Services the tables name.
//
// It is served by net/http's server and ReverseProxy, not yet by package
// ingress/httpproxy: that proxy's model is one config.Config of hosts and
// path locations on fixed ports, and HTTPRoute needs a table per port with
// header, query and method matches, weighted backends and filters. Moving
// onto it means teaching httpproxy to route through an interface that both
// config.Config and Table satisfy (its conn.go handle and h2.go call
// Server(host).Match(path) today); that is the next step, so that one proxy
// serves both APIs.

// Snapshot is one immutable state of the data plane.
type Snapshot struct {
	// Tables maps a data port to what it serves.
	Tables map[int32]*Table
	// Ports maps a data port to its Gateway listener port (for redirects).
	Ports map[int32]int32
	// Endpoints maps a backend (Service and port) to "ip:port" of its ready endpoints.
	Endpoints map[BackendKey][]string
}

// BackendKey names a Service port.
type BackendKey struct {
	Service types.NamespacedName
	Port    int32
}

// ResolveEndpoints fills s.Endpoints for every backend of every table from
// the Services and their EndpointSlices.
func ResolveEndpoints(tables map[int32]*Table, svcs map[types.NamespacedName]*corev1.Service, slices map[types.NamespacedName][]*discoveryv1.EndpointSlice) map[BackendKey][]string {
	out := map[BackendKey][]string{}
	for _, t := range tables {
		for _, e := range t.entries {
			for _, b := range e.act.Backends {
				k := BackendKey{b.Service, b.Port}
				if _, done := out[k]; done || b.Invalid {
					continue
				}
				out[k] = endpointsOf(svcs[b.Service], slices[b.Service], b.Port)
			}
		}
	}
	return out
}

func endpointsOf(svc *corev1.Service, sl []*discoveryv1.EndpointSlice, port int32) []string {
	if svc == nil {
		return nil
	}
	var sp *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].Port == port {
			sp = &svc.Spec.Ports[i]
		}
	}
	if sp == nil {
		return nil
	}
	var out []string
	for _, s := range sl {
		var target int32
		for _, p := range s.Ports {
			if deref(p.Name, "") == sp.Name && p.Port != nil {
				target = *p.Port
			}
		}
		if target == 0 {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				out = append(out, net.JoinHostPort(a, strconv.Itoa(int(target))))
			}
		}
	}
	return out
}

// Dialer opens connections to endpoints (nil: the system's).
type Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

// Handler serves one data port from the snapshot load returns on each request.
func Handler(dataPort int32, load func() *Snapshot, dial Dialer) http.Handler {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if dial != nil {
		tr.DialContext = dial
	}
	rp := &httputil.ReverseProxy{
		Transport: tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			// Host and the raw request URI go to the backend unchanged.
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = pr.In.Context().Value(endpointKey{}).(string)
			pr.Out.Host = pr.In.Host
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			http.Error(w, "upstream: "+err.Error(), http.StatusBadGateway)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := load()
		t := s.Tables[dataPort]
		host := strings.ToLower(r.Host)
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		var act *Action
		if t != nil {
			act = t.Route(Request{Host: host, Path: r.URL.Path, Method: r.Method, Header: r.Header, Query: r.URL.Query()})
		}
		if act == nil {
			http.Error(w, "no route matches", http.StatusNotFound)
			return
		}
		if act.Redirect != nil {
			redirect(w, r, host, s.Ports[dataPort], act.Redirect)
			return
		}
		total := act.TotalWeight()
		if total == 0 {
			http.Error(w, "the rule has no valid backend", http.StatusInternalServerError)
			return
		}
		b, ok := act.Pick(rand.IntN(total))
		if !ok {
			http.Error(w, "the backend is not valid", http.StatusInternalServerError)
			return
		}
		eps := s.Endpoints[BackendKey{b.Service, b.Port}]
		if len(eps) == 0 {
			http.Error(w, "no ready endpoint", http.StatusServiceUnavailable)
			return
		}
		if m := act.RequestHeaders; m != nil {
			for _, h := range m.Set {
				r.Header.Set(string(h.Name), h.Value)
			}
			for _, h := range m.Add {
				r.Header.Add(string(h.Name), h.Value)
			}
			for _, h := range m.Remove {
				r.Header.Del(h)
			}
		}
		ctx := contextWith(r, eps[rand.IntN(len(eps))])
		rp.ServeHTTP(w, r.WithContext(ctx))
	})
}

// redirect answers a RequestRedirect filter: scheme, hostname and port
// default to the request's, a changed scheme drops to its well-known port,
// the path and query stay, the status defaults to 302.
func redirect(w http.ResponseWriter, r *http.Request, host string, listenerPort int32, f *gatewayv1.HTTPRequestRedirectFilter) {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	port := listenerPort
	if f.Scheme != nil && *f.Scheme != scheme {
		scheme = *f.Scheme
		port = 0
	}
	if f.Hostname != nil {
		host = string(*f.Hostname)
	}
	if f.Port != nil {
		port = int32(*f.Port)
	}
	loc := scheme + "://" + host
	if port != 0 && !(scheme == "http" && port == 80) && !(scheme == "https" && port == 443) {
		loc += ":" + strconv.Itoa(int(port))
	}
	loc += r.URL.RequestURI()
	code := 302
	if f.StatusCode != nil {
		code = *f.StatusCode
	}
	w.Header().Set("Location", loc)
	w.WriteHeader(code)
}

type endpointKey struct{}

func contextWith(r *http.Request, ep string) context.Context {
	return context.WithValue(r.Context(), endpointKey{}, ep)
}
