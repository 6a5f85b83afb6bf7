package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
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
	// TLS holds the data ports of HTTPS listeners (the key present: the
	// port terminates TLS) with the certificates of their valid listeners.
	TLS map[int32][]ServerCert
	// Passthrough holds the data ports of TLS listeners (tls.mode
	// Passthrough): their connections are spliced by server name
	// (SplitPassthrough), routed by the port's Table.
	Passthrough map[int32]bool
	// TCP holds the data ports of TCP listeners: their connections are
	// spliced to the port's route's backends (serveTCP).
	TCP map[int32]bool
	// UDP holds the data ports of UDP listeners (served by a UDPRelay,
	// never by the HTTP server).
	UDP map[int32]bool
	// Endpoints maps a backend (Service and port) to "ip:port" of its ready endpoints.
	Endpoints map[BackendKey][]string
}

// BackendKey names a Service port: its number and, since a Service may
// have a TCP and a UDP port of one number (kube-dns's 53), whether it is
// the UDP one (a UDPRoute's backends).
type BackendKey struct {
	Service types.NamespacedName
	Port    int32
	UDP     bool
}

// ResolveEndpoints fills s.Endpoints for every backend of every table from
// the Services and their EndpointSlices.
func ResolveEndpoints(tables map[int32]*Table, svcs map[types.NamespacedName]*corev1.Service, slices map[types.NamespacedName][]*discoveryv1.EndpointSlice) map[BackendKey][]string {
	out := map[BackendKey][]string{}
	for _, t := range tables {
		for _, e := range t.entries {
			bs := e.act.Backends
			for _, m := range e.act.Mirrors {
				bs = append(bs[:len(bs):len(bs)], m.Backend)
			}
			for _, b := range bs {
				k := b.Key()
				if _, done := out[k]; done || b.Invalid {
					continue
				}
				out[k] = endpointsOf(svcs[b.Service], slices[b.Service], k)
			}
		}
	}
	return out
}

// endpointsOf is the ready endpoints of a Service port: the port of that
// number and protocol (an unset protocol is TCP, the API's default).
func endpointsOf(svc *corev1.Service, sl []*discoveryv1.EndpointSlice, k BackendKey) []string {
	if svc == nil {
		return nil
	}
	var sp *corev1.ServicePort
	for i, p := range svc.Spec.Ports {
		if p.Port == k.Port && (p.Protocol == corev1.ProtocolUDP) == k.UDP {
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

// backendTransport is how the data plane reaches endpoints: HTTP/1.1, or
// with h2c HTTP/2 with prior knowledge (as a gRPC server expects), through
// dial when it is set.
func backendTransport(dial Dialer, h2c bool) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Keep idle connections to every endpoint as ingress-nginx's upstream
	// keepalive 320 does: the default of 2 per host closed most backend
	// connections after one request under 64 clients
	// (scripts/bench-gateway.sh: about 5,000 TIME_WAIT sockets in 3 s).
	tr.MaxIdleConnsPerHost = 320
	tr.MaxIdleConns = 0 // no total bound beyond the per-host one
	if dial != nil {
		tr.DialContext = dial
	}
	if h2c {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	return tr
}

// Handler serves one data port from the snapshot load returns on each request.
func Handler(dataPort int32, load func() *Snapshot, dial Dialer) http.Handler {
	proxy := func(h2c bool) *httputil.ReverseProxy {
		return &httputil.ReverseProxy{
			Transport: backendTransport(dial, h2c),
			Rewrite: func(pr *httputil.ProxyRequest) {
				// Host and the raw request URI go to the backend unchanged.
				pr.Out.URL.Scheme = "http"
				pr.Out.URL.Host = pr.In.Context().Value(endpointKey{}).(string)
				pr.Out.Host = pr.In.Host
			},
			ModifyResponse: func(resp *http.Response) error {
				if p, _ := resp.Request.Context().Value(pickKey{}).(*picked); p != nil {
					if p.act.CORS != nil {
						p.act.CORS.response(resp.Header, resp.Request.Header.Get("Origin"))
					}
					ModifyHeaders(resp.Header, p.act.ResponseHeaders)
					ModifyHeaders(resp.Header, p.backend.ResponseHeaders)
				}
				return nil
			},
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
				if errors.Is(r.Context().Err(), context.DeadlineExceeded) {
					// The rule's timeout passed (Action.Timeout).
					if isGRPC(r) {
						grpcError(w, grpcDeadlineExceeded, "upstream: "+err.Error())
						return
					}
					http.Error(w, "upstream request timeout", http.StatusGatewayTimeout)
					return
				}
				if isGRPC(r) {
					grpcError(w, grpcUnavailable, "upstream: "+err.Error())
					return
				}
				http.Error(w, "upstream: "+err.Error(), http.StatusBadGateway)
			},
		}
	}
	rp, grpcProxy := proxy(false), proxy(true)
	mirror := newMirrorer(dial)
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
			if isGRPC(r) {
				// GRPCRoute's spec: a call no route matches is Unimplemented.
				// The call's messages are read first, as a gRPC server reads
				// them: answering an HTTP/2 stream the client is still
				// sending on resets it, and the client sees a stream error
				// (curl's exit 92) instead of the status.
				_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, maxDrainedCall))
				grpcError(w, grpcUnimplemented, "no route matches")
				return
			}
			http.Error(w, "no route matches", http.StatusNotFound)
			return
		}
		if act.Fault != "" {
			http.Error(w, "the route's rule cannot be served: "+act.Fault, http.StatusInternalServerError)
			return
		}
		if act.CORS != nil && isPreflight(r) {
			act.CORS.preflight(w, r)
			return
		}
		if act.Redirect != nil {
			if act.CORS != nil {
				act.CORS.response(w.Header(), r.Header.Get("Origin"))
			}
			ModifyHeaders(w.Header(), act.ResponseHeaders)
			redirect(w, r, host, s.Ports[dataPort], act)
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
		eps := s.Endpoints[b.Key()]
		if len(eps) == 0 {
			http.Error(w, "no ready endpoint", http.StatusServiceUnavailable)
			return
		}
		ModifyHeaders(r.Header, act.RequestHeaders)
		ModifyHeaders(r.Header, b.RequestHeaders)
		if rw := act.Rewrite; rw != nil {
			if rw.Hostname != nil {
				r.Host = string(*rw.Hostname)
			}
			if rw.Path != nil {
				u := *r.URL
				u.Path, u.RawPath = act.ModifyPath(r.URL.Path, rw.Path), ""
				r.URL = &u
			}
		}
		if len(act.Mirrors) > 0 {
			mirror.send(r, act, s.Endpoints)
		}
		ctx := context.WithValue(contextWith(r, eps[rand.IntN(len(eps))]), pickKey{}, &picked{act, b})
		if act.Timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, act.Timeout)
			defer cancel()
		}
		if act.GRPC {
			grpcProxy.ServeHTTP(w, r.WithContext(ctx))
			return
		}
		rp.ServeHTTP(w, r.WithContext(ctx))
	})
}

// redirect answers a RequestRedirect filter: scheme, hostname and port
// default to the request's, a changed scheme drops to its well-known port,
// the path stays unless the filter modifies it, the query stays, the
// status defaults to 302.
func redirect(w http.ResponseWriter, r *http.Request, host string, listenerPort int32, act *Action) {
	f := act.Redirect
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
	if f.Path != nil {
		u := *r.URL
		u.Path, u.RawPath = act.ModifyPath(r.URL.Path, f.Path), ""
		loc += u.RequestURI()
	} else {
		loc += r.URL.RequestURI()
	}
	code := 302
	if f.StatusCode != nil {
		code = *f.StatusCode
	}
	w.Header().Set("Location", loc)
	w.WriteHeader(code)
}

// TerminateTLS wraps a data port's listener: a connection accepted while
// the snapshot says the port is an HTTPS listener's is served over TLS, its
// certificate chosen at the handshake from the snapshot then current
// (PickCertificate), so a changed Secret, ReferenceGrant or listener takes
// effect on the next connection without reopening the port. net/http's
// server does the handshake and sets Request.TLS.
func TerminateTLS(ln net.Listener, dataPort int32, load func() *Snapshot) net.Listener {
	cfg := &tls.Config{
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if c := PickCertificate(load().TLS[dataPort], hello); c != nil {
				return c, nil
			}
			return nil, fmt.Errorf("no valid HTTPS listener on data port %d serves %q", dataPort, hello.ServerName)
		},
	}
	return &tlsListener{Listener: ln, port: dataPort, load: load, cfg: cfg}
}

type tlsListener struct {
	net.Listener
	port int32
	load func() *Snapshot
	cfg  *tls.Config
}

func (l *tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if _, secure := l.load().TLS[l.port]; secure {
		return tls.Server(c, l.cfg), nil
	}
	return c, nil
}

type endpointKey struct{}

// pickKey carries a proxied request's Action and Backend (a *picked) to
// ModifyResponse.
type pickKey struct{}

type picked struct {
	act     *Action
	backend Backend
}

func contextWith(r *http.Request, ep string) context.Context {
	return context.WithValue(r.Context(), endpointKey{}, ep)
}
