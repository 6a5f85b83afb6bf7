package gateway

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// A Table is what one HTTP listener serves: every match of every rule of the
// routes attached to it (Compute's Attached), in the HTTPRoute spec's
// precedence order, answering which rule serves a request. It is the data
// plane's routing model, pure and immutable once built; the proxy swaps a
// new one in on every change, as the Ingress proxy swaps a config.Config.
//
// Precedence (HTTPRouteRule's doc), first difference wins:
//  1. the most specific hostname: an exact name, then the longest wildcard,
//     then a route without hostnames;
//  2. path: Exact, then RegularExpression (implementation-specific; after
//     Exact and before any prefix, as Envoy Gateway orders it), then
//     PathPrefix, the longest value first;
//  3. a method match over none;
//  4. more header matches; 5. more query-parameter matches;
//  6. the older route (creationTimestamp), then "namespace/name";
//  7. the rule's and the match's order within the route.
type Table struct {
	entries []*entry
}

type entry struct {
	hosts []string // nil: any host
	match compiledMatch
	key   sortKey
	act   *Action
}

type sortKey struct {
	pathRank  int // 0 Exact, 1 RegularExpression, 2 PathPrefix
	pathLen   int
	method    bool
	headers   int
	queries   int
	created   int64
	route     string
	rule, idx int
}

func (a sortKey) compare(b sortKey) int {
	return cmp.Or(
		cmp.Compare(a.pathRank, b.pathRank),
		-cmp.Compare(a.pathLen, b.pathLen),
		-cmpBool(a.method, b.method),
		-cmp.Compare(a.headers, b.headers),
		-cmp.Compare(a.queries, b.queries),
		cmp.Compare(a.created, b.created),
		strings.Compare(a.route, b.route),
		cmp.Compare(a.rule, b.rule),
		cmp.Compare(a.idx, b.idx),
	)
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

type compiledMatch struct {
	pathType gatewayv1.PathMatchType
	path     string // Exact value, or PathPrefix value without its trailing slash
	pathRE   *regexp.Regexp
	method   string
	headers  []valueMatch
	queries  []valueMatch
}

type valueMatch struct {
	name  string // canonical header name, or the query parameter as written
	exact string
	re    *regexp.Regexp
}

func (v valueMatch) matches(vals []string) bool {
	if len(vals) == 0 {
		return false
	}
	// The first value is the one matched (the spec lets an implementation
	// pick for repeated headers and parameters).
	if v.re != nil {
		return v.re.MatchString(vals[0])
	}
	return vals[0] == v.exact
}

// Request is what a Table routes on.
type Request struct {
	Host   string // lowercase, without a port
	Path   string // the URL path, without the query
	Method string
	Header http.Header
	Query  url.Values
}

// Backend is one backendRef of a rule.
type Backend struct {
	Service types.NamespacedName
	Port    int32
	Weight  int32
	// Invalid is set when the ref does not resolve (unknown kind, not
	// permitted, missing Service): its share of the traffic gets 500.
	Invalid bool
	// RequestHeaders and ResponseHeaders are the backendRef's own header
	// filters, applied after the rule's when this backend is picked.
	RequestHeaders, ResponseHeaders *gatewayv1.HTTPHeaderFilter
	// UDP is set for a UDPRoute's backend: its endpoints are the
	// Service's UDP port of that number.
	UDP bool
}

// Key names the Service port whose endpoints the backend is served by.
func (b Backend) Key() BackendKey { return BackendKey{Service: b.Service, Port: b.Port, UDP: b.UDP} }

// Action is what a matched rule does.
type Action struct {
	Route types.NamespacedName
	Rule  int
	// Backends share the traffic by Weight.
	Backends []Backend
	// Redirect, when set, answers instead of a backend.
	Redirect *gatewayv1.HTTPRequestRedirectFilter
	// RequestHeaders modifies the request sent to the backend.
	RequestHeaders *gatewayv1.HTTPHeaderFilter
	// ResponseHeaders modifies the response sent to the client.
	ResponseHeaders *gatewayv1.HTTPHeaderFilter
	// Rewrite, when set, changes the request's host or path on its way to
	// the backend (URLRewrite).
	Rewrite *gatewayv1.HTTPURLRewriteFilter
	// Prefix is the rule's PathPrefix match value, without its trailing
	// slash ("" for "/"): what a ReplacePrefixMatch path modifier replaces.
	// The API allows that modifier only on a rule with exactly one match,
	// a PathPrefix one.
	Prefix string
	// Timeout bounds the time from the request's arrival to the end of the
	// backend's response (0: none): the smaller of the rule's
	// timeouts.request and timeouts.backendRequest, which are the same bound
	// here since the proxy makes one backend request per request (no
	// retries). Past it the client gets 504.
	Timeout time.Duration
	// GRPC is set for a GRPCRoute's rule: its backends speak gRPC, so
	// HTTP/2 without TLS (h2c) whatever the request came over.
	GRPC bool
	// CORS, when set, answers preflight requests and adds the CORS
	// response headers.
	CORS *CORS
	// Mirrors are the rule's RequestMirror filters, in order.
	Mirrors []Mirror
	// Fault, when set, says why the rule cannot be served as written (a
	// filter of a type the proxy does not implement, an ExtensionRef it
	// cannot resolve): every request it matches gets 500, as the spec asks
	// instead of skipping the filter.
	Fault string
}

// Mirror is a RequestMirror filter: a copy of a share of the requests
// (Numerator/Denominator) goes to one endpoint of Backend, its response
// discarded. A Backend that does not resolve (Invalid) is dropped, as the
// filter's doc says: nothing is mirrored, the route's ResolvedRefs says why.
type Mirror struct {
	Backend                Backend
	Numerator, Denominator int32
}

// Sampled reports whether the request that drew n, uniformly in
// [0, Denominator), is mirrored.
func (m Mirror) Sampled(n int32) bool { return n < m.Numerator }

func mirrorOf(w World, rt *gatewayv1.HTTPRoute, f *gatewayv1.HTTPRequestMirrorFilter) Mirror {
	ref := f.BackendRef
	m := Mirror{Backend: Backend{Service: types.NamespacedName{Namespace: string(deref(ref.Namespace, gatewayv1.Namespace(rt.Namespace))), Name: string(ref.Name)},
		Port: int32(deref(ref.Port, 0)), Weight: 1, Invalid: checkBackend(w, routeKind(rt), rt.Namespace, ref) != nil},
		Numerator: 100, Denominator: 100}
	switch {
	case f.Percent != nil:
		m.Numerator = *f.Percent
	case f.Fraction != nil:
		m.Numerator, m.Denominator = f.Fraction.Numerator, deref(f.Fraction.Denominator, 100)
	}
	if m.Denominator <= 0 { // the API forbids it; never divide by it
		m.Numerator, m.Denominator = 0, 1
	}
	return m
}

// Pick chooses the backend for a request by weight, n uniformly in
// [0, total weight); ok is false when the request must get a 500: the rule has
// no backend with weight, or n falls on an invalid one.
func (a *Action) Pick(n int) (Backend, bool) {
	for _, b := range a.Backends {
		if n < int(b.Weight) {
			return b, !b.Invalid
		}
		n -= int(b.Weight)
	}
	return Backend{}, false
}

// TotalWeight is the sum of the backends' weights (0: every request gets 500).
func (a *Action) TotalWeight() int {
	t := 0
	for _, b := range a.Backends {
		t += int(b.Weight)
	}
	return t
}

// BuildTable builds a listener's Table from its attachments. Matches that
// cannot be compiled (a bad regular expression) are left out and reported.
func BuildTable(w World, attached []Attachment) (*Table, []error) {
	t := &Table{}
	var errs []error
	for _, at := range attached {
		rt := at.Route
		rkey := types.NamespacedName{Namespace: rt.Namespace, Name: rt.Name}
		for ri, rule := range rt.Spec.Rules {
			act := &Action{Route: rkey, Rule: ri, GRPC: routeKind(rt) == kindGRPC}
			for fi, f := range rule.Filters {
				switch f.Type {
				case gatewayv1.HTTPRouteFilterRequestRedirect:
					act.Redirect = f.RequestRedirect
				case gatewayv1.HTTPRouteFilterRequestHeaderModifier:
					act.RequestHeaders = f.RequestHeaderModifier
				case gatewayv1.HTTPRouteFilterResponseHeaderModifier:
					act.ResponseHeaders = f.ResponseHeaderModifier
				case gatewayv1.HTTPRouteFilterURLRewrite:
					act.Rewrite = f.URLRewrite
				case gatewayv1.HTTPRouteFilterCORS:
					if f.CORS != nil {
						act.CORS = &CORS{*f.CORS}
					}
				case gatewayv1.HTTPRouteFilterRequestMirror:
					if m := f.RequestMirror; m != nil {
						act.Mirrors = append(act.Mirrors, mirrorOf(w, rt, m))
					}
				case gatewayv1.HTTPRouteFilterExtensionRef:
					act.Fault = fmt.Sprintf("filter %d (ExtensionRef) cannot be resolved", fi)
				default:
					act.Fault = fmt.Sprintf("filter %d (%s) is not supported", fi, f.Type)
				}
				if act.Fault != "" {
					break
				}
			}
			if to := rule.Timeouts; to != nil {
				for _, d := range []*gatewayv1.Duration{to.Request, to.BackendRequest} {
					if d == nil {
						continue
					}
					v, err := time.ParseDuration(string(*d))
					if err != nil {
						errs = append(errs, fmt.Errorf("HTTPRoute %s rule %d timeout %q: %w", rkey, ri, *d, err))
						continue
					}
					if v > 0 && (act.Timeout == 0 || v < act.Timeout) {
						act.Timeout = v
					}
				}
			}
			if len(rule.Matches) == 1 && rule.Matches[0].Path != nil &&
				deref(rule.Matches[0].Path.Type, gatewayv1.PathMatchPathPrefix) == gatewayv1.PathMatchPathPrefix {
				act.Prefix = strings.TrimSuffix(deref(rule.Matches[0].Path.Value, "/"), "/")
			}
			for _, br := range rule.BackendRefs {
				b := Backend{Service: types.NamespacedName{Namespace: string(deref(br.Namespace, gatewayv1.Namespace(rt.Namespace))), Name: string(br.Name)},
					Port: int32(deref(br.Port, 0)), Weight: deref(br.Weight, 1), UDP: routeKind(rt) == kindUDP}
				b.Invalid = checkBackend(w, routeKind(rt), rt.Namespace, br.BackendObjectReference) != nil
				for _, f := range br.Filters {
					switch f.Type {
					case gatewayv1.HTTPRouteFilterRequestHeaderModifier:
						b.RequestHeaders = f.RequestHeaderModifier
					case gatewayv1.HTTPRouteFilterResponseHeaderModifier:
						b.ResponseHeaders = f.ResponseHeaderModifier
					default:
						// A filter the proxy cannot honour on a backendRef
						// (unsupportedFilter says which in the status): its
						// share of the traffic gets 500, never the backend
						// without the filter.
						b.Invalid = true
					}
				}
				act.Backends = append(act.Backends, b)
			}
			matches := rule.Matches
			if len(matches) == 0 {
				matches = []gatewayv1.HTTPRouteMatch{{}}
			}
			for mi, m := range matches {
				cm, err := compileMatch(m)
				if err != nil {
					errs = append(errs, fmt.Errorf("HTTPRoute %s rule %d match %d: %w", rkey, ri, mi, err))
					continue
				}
				rank := map[gatewayv1.PathMatchType]int{gatewayv1.PathMatchExact: 0, gatewayv1.PathMatchRegularExpression: 1, gatewayv1.PathMatchPathPrefix: 2}[cm.pathType]
				t.entries = append(t.entries, &entry{hosts: at.Hostnames, match: cm, act: act, key: sortKey{
					pathRank: rank, pathLen: len(cm.path), method: cm.method != "", headers: len(cm.headers), queries: len(cm.queries),
					created: rt.CreationTimestamp.UnixNano(), route: rkey.String(), rule: ri, idx: mi}})
			}
		}
	}
	slices.SortStableFunc(t.entries, func(a, b *entry) int { return a.key.compare(b.key) })
	return t, errs
}

func compileMatch(m gatewayv1.HTTPRouteMatch) (compiledMatch, error) {
	cm := compiledMatch{pathType: gatewayv1.PathMatchPathPrefix, path: "/"}
	if m.Path != nil {
		cm.pathType = deref(m.Path.Type, gatewayv1.PathMatchPathPrefix)
		v := deref(m.Path.Value, "/")
		switch cm.pathType {
		case gatewayv1.PathMatchExact:
			cm.path = v
		case gatewayv1.PathMatchPathPrefix:
			cm.path = strings.TrimSuffix(v, "/")
			if cm.path == "" {
				cm.path = "/"
			}
		case gatewayv1.PathMatchRegularExpression:
			re, err := regexp.Compile("^(?:" + v + ")$")
			if err != nil {
				return cm, fmt.Errorf("path regular expression %q: %w", v, err)
			}
			cm.path, cm.pathRE = v, re
		default:
			return cm, fmt.Errorf("path match type %q is not supported", cm.pathType)
		}
	}
	if m.Method != nil {
		cm.method = string(*m.Method)
	}
	for _, h := range m.Headers {
		vm := valueMatch{name: http.CanonicalHeaderKey(string(h.Name)), exact: h.Value}
		if deref(h.Type, gatewayv1.HeaderMatchExact) == gatewayv1.HeaderMatchRegularExpression {
			re, err := regexp.Compile(h.Value)
			if err != nil {
				return cm, fmt.Errorf("header %s regular expression %q: %w", h.Name, h.Value, err)
			}
			vm.re = re
		}
		cm.headers = append(cm.headers, vm)
	}
	for _, q := range m.QueryParams {
		vm := valueMatch{name: string(q.Name), exact: q.Value}
		if deref(q.Type, gatewayv1.QueryParamMatchExact) == gatewayv1.QueryParamMatchRegularExpression {
			re, err := regexp.Compile(q.Value)
			if err != nil {
				return cm, fmt.Errorf("query parameter %s regular expression %q: %w", q.Name, q.Value, err)
			}
			vm.re = re
		}
		cm.queries = append(cm.queries, vm)
	}
	return cm, nil
}

func (cm *compiledMatch) matches(r Request) bool {
	switch cm.pathType {
	case gatewayv1.PathMatchExact:
		if r.Path != cm.path {
			return false
		}
	case gatewayv1.PathMatchRegularExpression:
		if !cm.pathRE.MatchString(r.Path) {
			return false
		}
	default:
		if cm.path != "/" && !(strings.HasPrefix(r.Path, cm.path) && (len(r.Path) == len(cm.path) || r.Path[len(cm.path)] == '/')) {
			return false
		}
	}
	if cm.method != "" && r.Method != cm.method {
		return false
	}
	for _, h := range cm.headers {
		if !h.matches(r.Header.Values(h.name)) {
			return false
		}
	}
	for _, q := range cm.queries {
		if !q.matches(r.Query[q.name]) {
			return false
		}
	}
	return true
}

// hostScore ranks how specifically hosts names host: -1 not at all, 0 any
// host, 1+len for a wildcard, a large value for an exact name.
func hostScore(hosts []string, host string) int {
	if hosts == nil {
		return 0
	}
	best := -1
	for _, h := range hosts {
		switch {
		case h == host:
			return 1 << 20
		case strings.HasPrefix(h, "*.") && strings.HasSuffix(host, h[1:]) && len(host) > len(h)-1:
			best = max(best, 1+len(h))
		}
	}
	return best
}

// Route returns the action for a request; nil means no rule matches (404).
func (t *Table) Route(r Request) *Action {
	var best *entry
	bestScore := -1
	for _, e := range t.entries {
		s := hostScore(e.hosts, r.Host)
		if s <= bestScore || !e.match.matches(r) {
			continue
		}
		// Entries are in precedence order within a hostname score, so the
		// first match at a higher score wins over everything before it.
		best, bestScore = e, s
	}
	if best == nil {
		return nil
	}
	return best.act
}

// ModifyPath applies a path modifier (of a URLRewrite or RequestRedirect
// filter) to a request's path: ReplaceFullPath replaces it whole;
// ReplacePrefixMatch replaces the rule's matched prefix (whole path
// elements), a trailing slash of the replacement ignored, and an empty
// result is "/" (the table in HTTPPathModifier's doc).
func (a *Action) ModifyPath(path string, m *gatewayv1.HTTPPathModifier) string {
	if m == nil {
		return path
	}
	switch m.Type {
	case gatewayv1.FullPathHTTPPathModifier:
		return deref(m.ReplaceFullPath, "/")
	case gatewayv1.PrefixMatchHTTPPathModifier:
		rest := strings.TrimPrefix(path, a.Prefix)
		out := strings.TrimSuffix(deref(m.ReplacePrefixMatch, ""), "/") + rest
		if !strings.HasPrefix(out, "/") {
			out = "/" + out
		}
		return out
	}
	return path
}

// ModifyHeaders applies a header filter to h: set, then add, then remove,
// as the filter's doc orders them.
func ModifyHeaders(h http.Header, m *gatewayv1.HTTPHeaderFilter) {
	if m == nil {
		return
	}
	for _, v := range m.Set {
		h.Set(string(v.Name), v.Value)
	}
	for _, v := range m.Add {
		h.Add(string(v.Name), v.Value)
	}
	for _, name := range m.Remove {
		h.Del(name)
	}
}
