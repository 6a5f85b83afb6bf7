package gateway

import (
	"net/http"
	"slices"
	"strconv"
	"strings"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// The CORS filter (HTTPCORSFilter's doc): the data plane answers a
// preflight request (OPTIONS with Origin and Access-Control-Request-Method)
// itself, 204, and adds Access-Control-Allow-Origin (and -Credentials,
// -Expose-Headers) to the backend's answers to other requests with an
// allowed Origin. A request whose Origin is not allowed gets no CORS
// header: a preflight is still 204, which the browser treats as a refusal.
//
// Where the spec lets an implementation answer "*" or echo the request,
// minikit echoes (the Origin, the requested method and headers), which is
// also what it must do with allowCredentials true: one rule for both.

// CORS is a rule's CORS filter.
type CORS struct {
	f gatewayv1.HTTPCORSFilter
}

func (c *CORS) credentials() bool { return deref(c.f.AllowCredentials, false) }

// allowed reports whether the Origin header value origin is one the filter
// allows.
func (c *CORS) allowed(origin string) bool {
	if origin == "" {
		return false
	}
	scheme, host, port, ok := splitOrigin(origin)
	if !ok {
		return false
	}
	for _, o := range c.f.AllowOrigins {
		if o == "*" {
			return true
		}
		ps, ph, pp, ok := splitOrigin(string(o))
		if !ok || ps != scheme || pp != port {
			continue
		}
		if suffix, wild := strings.CutPrefix(ph, "*"); wild {
			// "*" matches any number of labels to its left, at least one.
			if strings.HasSuffix(host, suffix) && len(host) > len(suffix) {
				return true
			}
		} else if ph == host {
			return true
		}
	}
	return false
}

// splitOrigin is an origin's lowercase scheme and host and its port, the
// scheme's default when absent.
func splitOrigin(origin string) (scheme, host, port string, ok bool) {
	scheme, rest, ok := strings.Cut(strings.ToLower(origin), "://")
	if !ok || (scheme != "http" && scheme != "https") {
		return "", "", "", false
	}
	host, port = rest, ""
	if i := strings.LastIndexByte(rest, ':'); i >= 0 && !strings.Contains(rest[i:], "]") {
		host, port = rest[:i], rest[i+1:]
	}
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	}
	return scheme, host, port, host != ""
}

func isPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && r.Header.Get("Origin") != "" && r.Header.Get("Access-Control-Request-Method") != ""
}

// preflight answers a preflight request.
func (c *CORS) preflight(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	if origin := r.Header.Get("Origin"); c.allowed(origin) {
		c.originHeaders(h, origin)
		if slices.Contains(c.f.AllowMethods, "*") {
			h.Set("Access-Control-Allow-Methods", r.Header.Get("Access-Control-Request-Method"))
		} else if len(c.f.AllowMethods) > 0 {
			ms := make([]string, len(c.f.AllowMethods))
			for i, m := range c.f.AllowMethods {
				ms[i] = string(m)
			}
			h.Set("Access-Control-Allow-Methods", strings.Join(ms, ", "))
		}
		if slices.Contains(c.f.AllowHeaders, "*") {
			if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
				h.Set("Access-Control-Allow-Headers", req)
			}
		} else if len(c.f.AllowHeaders) > 0 {
			h.Set("Access-Control-Allow-Headers", joinNames(c.f.AllowHeaders))
		}
		maxAge := c.f.MaxAge
		if maxAge == 0 {
			maxAge = 5 // the spec's default
		}
		h.Set("Access-Control-Max-Age", strconv.Itoa(int(maxAge)))
	}
	h.Add("Vary", "Origin")
	w.WriteHeader(http.StatusNoContent)
}

// response adds the CORS headers to the answer to a request (not a
// preflight) with the Origin header value origin.
func (c *CORS) response(h http.Header, origin string) {
	if !c.allowed(origin) {
		return
	}
	c.originHeaders(h, origin)
	h.Add("Vary", "Origin")
}

func (c *CORS) originHeaders(h http.Header, origin string) {
	h.Set("Access-Control-Allow-Origin", origin)
	if c.credentials() {
		h.Set("Access-Control-Allow-Credentials", "true")
	}
	expose := slices.DeleteFunc(slices.Clone(c.f.ExposeHeaders), func(n gatewayv1.HTTPHeaderName) bool {
		return n == "*" && c.credentials() // "*" is not a wildcard with credentials
	})
	if len(expose) > 0 {
		h.Set("Access-Control-Expose-Headers", joinNames(expose))
	}
}

func joinNames(ns []gatewayv1.HTTPHeaderName) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = string(n)
	}
	return strings.Join(s, ", ")
}
