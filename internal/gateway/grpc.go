package gateway

import (
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// GRPCRoutes are served as the HTTP/2 requests they are: a gRPC call is a
// POST to "/<service>/<method>" with its metadata as headers. So each
// GRPCRoute is read as the HTTPRoute that says the same (grpcAsHTTP) and goes
// through the same status rules, attachment and routing Table; what differs
// is the kind (listeners' allowedRoutes, ReferenceGrants, which status is
// written), the backend protocol (h2c, Action.GRPC) and how "no route"
// is answered (gRPC status Unimplemented, as the GRPCRoute spec asks).
//
// A method match becomes a path match:
//
//	Exact, service and method      Exact "/service/method"
//	Exact, service only            PathPrefix "/service" (every method of it)
//	Exact, method only             RegularExpression "/[^/]+/method"
//	RegularExpression              RegularExpression "/(service)/(method)", a
//	                               missing part being "[^/]+"
//
// Precedence then follows the HTTPRoute order (exact paths before
// expressions before prefixes, then more headers), which keeps what the
// GRPCRoute spec orders first (a method match over none, more headers) first.

const kindGRPC = "GRPCRoute"

// routeKind is the kind a route given to the rules stands for: GRPCRoutes,
// TLSRoutes, TCPRoutes and UDPRoutes come as HTTPRoutes whose TypeMeta says
// their kind (grpcAsHTTP, tlsAsHTTP, tcpAsHTTP, udpAsHTTP).
func routeKind(rt *gatewayv1.HTTPRoute) string {
	switch rt.Kind {
	case kindGRPC, kindTLS, kindTCP, kindUDP:
		return rt.Kind
	}
	return kindHTTP
}

// routeAsHTTP is an HTTPRoute, of another route kind, with that route's
// metadata, parents and hostnames and no rules yet.
func routeAsHTTP(kind string, meta metav1.ObjectMeta, common gatewayv1.CommonRouteSpec, hosts []gatewayv1.Hostname) *gatewayv1.HTTPRoute {
	return &gatewayv1.HTTPRoute{
		TypeMeta:   metav1.TypeMeta{APIVersion: gatewayv1.GroupVersion.String(), Kind: kind},
		ObjectMeta: meta,
		Spec:       gatewayv1.HTTPRouteSpec{CommonRouteSpec: common, Hostnames: hosts},
	}
}

// grpcAsHTTP is the HTTPRoute that routes what a GRPCRoute does.
func grpcAsHTTP(g *gatewayv1.GRPCRoute) *gatewayv1.HTTPRoute {
	rt := routeAsHTTP(kindGRPC, g.ObjectMeta, g.Spec.CommonRouteSpec, g.Spec.Hostnames)
	for _, r := range g.Spec.Rules {
		hr := gatewayv1.HTTPRouteRule{Name: r.Name}
		for _, m := range r.Matches {
			hm := gatewayv1.HTTPRouteMatch{Path: grpcPath(m.Method)}
			for _, h := range m.Headers {
				typ := gatewayv1.HeaderMatchExact
				if deref(h.Type, gatewayv1.GRPCHeaderMatchExact) == gatewayv1.GRPCHeaderMatchRegularExpression {
					typ = gatewayv1.HeaderMatchRegularExpression
				}
				hm.Headers = append(hm.Headers, gatewayv1.HTTPHeaderMatch{Type: &typ, Name: gatewayv1.HTTPHeaderName(h.Name), Value: h.Value})
			}
			hr.Matches = append(hr.Matches, hm)
		}
		hr.Filters = grpcFilters(r.Filters)
		for _, b := range r.BackendRefs {
			hr.BackendRefs = append(hr.BackendRefs, gatewayv1.HTTPBackendRef{BackendRef: b.BackendRef, Filters: grpcFilters(b.Filters)})
		}
		rt.Spec.Rules = append(rt.Spec.Rules, hr)
	}
	return rt
}

// grpcFilters are GRPCRoute filters as the HTTPRoute filters of the same
// names, every one of them (an unknown type too), so that the rules refuse
// what the data plane cannot honour instead of skipping it.
func grpcFilters(fs []gatewayv1.GRPCRouteFilter) []gatewayv1.HTTPRouteFilter {
	var out []gatewayv1.HTTPRouteFilter
	for _, f := range fs {
		out = append(out, gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterType(f.Type),
			RequestHeaderModifier: f.RequestHeaderModifier, ResponseHeaderModifier: f.ResponseHeaderModifier,
			RequestMirror: f.RequestMirror, ExtensionRef: f.ExtensionRef})
	}
	return out
}

func grpcPath(m *gatewayv1.GRPCMethodMatch) *gatewayv1.HTTPPathMatch {
	if m == nil {
		return nil
	}
	svc, method := deref(m.Service, ""), deref(m.Method, "")
	path := func(t gatewayv1.PathMatchType, v string) *gatewayv1.HTTPPathMatch {
		return &gatewayv1.HTTPPathMatch{Type: &t, Value: &v}
	}
	if deref(m.Type, gatewayv1.GRPCMethodMatchExact) == gatewayv1.GRPCMethodMatchRegularExpression {
		if svc == "" {
			svc = "[^/]+"
		}
		if method == "" {
			method = "[^/]+"
		}
		return path(gatewayv1.PathMatchRegularExpression, "/(?:"+svc+")/(?:"+method+")")
	}
	switch {
	case svc != "" && method != "":
		return path(gatewayv1.PathMatchExact, "/"+svc+"/"+method)
	case svc != "":
		return path(gatewayv1.PathMatchPathPrefix, "/"+svc)
	case method != "":
		return path(gatewayv1.PathMatchRegularExpression, "/[^/]+/"+regexp.QuoteMeta(method))
	}
	return nil
}

// gRPC status codes the data plane answers with itself.
const (
	grpcDeadlineExceeded = 4
	grpcUnimplemented    = 12
	grpcUnavailable      = 14
)

// isGRPC reports whether a request is a gRPC call (its content type says so).
func isGRPC(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	return ct == "application/grpc" || strings.HasPrefix(ct, "application/grpc+") || strings.HasPrefix(ct, "application/grpc;")
}

// grpcError answers a gRPC call with a status and no message: HTTP 200 and
// the status in a trailers-only response, as gRPC servers do.
// maxDrainedCall bounds how much of an unroutable call is read before it is
// answered.
const maxDrainedCall = 1 << 20

func grpcError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/grpc")
	w.Header().Set("Grpc-Status", strconv.Itoa(code))
	w.Header().Set("Grpc-Message", url.PathEscape(msg))
	w.WriteHeader(http.StatusOK)
}
