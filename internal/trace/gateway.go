package trace

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Gateway is what happens to a connection to a Gateway's address and a
// listener's port. The kernel's part ends at the data port: the Gateway's
// LoadBalancer Service is announced and DNATed like any other (the Paths),
// to a node's InternalIP and data port, where that node's Gateway data
// plane, a user-space proxy, accepts the connection. Which route, rule and
// backend then serve a request is decided per request (per connection for
// TLS passthrough) from what the client sends; the trace lists the
// candidates and their ready endpoints, not one of them.
type Gateway struct {
	Name    string `json:"name"` // NAMESPACE/NAME
	Class   string `json:"class"`
	Address string `json:"address"`
	// Listeners are the Gateway's listeners on the traced port (HTTP
	// listeners share a port and differ by hostname).
	Listeners []GatewayListener `json:"listeners"`
	// Service is the Service carrying the address, NAMESPACE/NAME:PORT.
	Service string `json:"service,omitempty"`
	// Announcers are the nodes answering ARP for the address.
	Announcers []string `json:"announcers,omitempty"`
	// DataPlanes are the nodes whose data plane the Service's endpoints
	// name, with the data port: where the DNAT sends the connection.
	DataPlanes []DataPlane `json:"dataPlanes"`
	// Routes are the routes attached to those listeners, by their spec,
	// with what status says of them.
	Routes []GatewayRoute `json:"routes"`
}

// GatewayListener is one listener.
type GatewayListener struct {
	Name     string `json:"name"`
	Protocol string `json:"protocol"`
	Port     int32  `json:"port"`
	Hostname string `json:"hostname,omitempty"`
}

// DataPlane is one node's data port for the traced port.
type DataPlane struct {
	Node string `json:"node,omitempty"`
	Addr string `json:"addr"` // InternalIP:dataPort
}

// GatewayRoute is a route attached to the traced listeners.
type GatewayRoute struct {
	Kind      string   `json:"kind"` // HTTPRoute, GRPCRoute, TLSRoute
	Name      string   `json:"name"` // NAMESPACE/NAME
	Hostnames []string `json:"hostnames,omitempty"`
	// Listener is the parentRef's sectionName ("" for every listener).
	Listener string `json:"listener,omitempty"`
	// Accepted is the status of the route's Accepted condition for this
	// Gateway ("" without status); Reason its reason when not True.
	Accepted     string        `json:"accepted,omitempty"`
	ResolvedRefs string        `json:"resolvedRefs,omitempty"`
	Reason       string        `json:"reason,omitempty"`
	Rules        []GatewayRule `json:"rules"`
}

// GatewayRule is one rule: its matches summarised and its backends.
type GatewayRule struct {
	Index    int              `json:"index"`
	Name     string           `json:"name,omitempty"`
	Matches  []string         `json:"matches,omitempty"`
	Backends []GatewayBackend `json:"backends"`
}

// GatewayBackend is a backendRef with the ready endpoints of its Service.
type GatewayBackend struct {
	Service   string            `json:"service"` // NAMESPACE/NAME:PORT
	Weight    int32             `json:"weight"`
	Endpoints []GatewayEndpoint `json:"endpoints"`
	// Why says why there are no endpoints to list (not a Service, no
	// such Service or port).
	Why string `json:"why,omitempty"`
}

// GatewayEndpoint is one ready endpoint of a backend.
type GatewayEndpoint struct {
	Addr string `json:"addr"` // IP:targetPort
	Pod  *Pod   `json:"pod,omitempty"`
}

// gatewayObjects are the objects a Gateway hop is computed from.
type gatewayObjects struct {
	gateways []gatewayv1.Gateway
	http     []gatewayv1.HTTPRoute
	grpc     []gatewayv1.GRPCRoute
	tls      []gatewayv1.TLSRoute
	services []corev1.Service
	slices   []discoveryv1.EndpointSlice
	nodes    []corev1.Node
}

// gatewayNotServed says a list failed because the Gateway API's CRDs are
// not installed.
func gatewayNotServed(err error) bool {
	return apierrors.IsNotFound(err) || meta.IsNoMatchError(err)
}

// gateway reads the Gateway API's objects and, when TO is a Gateway's
// address and a listener's port, says what the Gateway does with it.
func (r *run) gateway(ctx context.Context, res *Result) error {
	if r.o.Gateway == nil || res.To.Kind != "loadbalancer IP" {
		return nil
	}
	var o gatewayObjects
	v1 := r.o.Gateway.GatewayV1()
	gl, err := v1.Gateways("").List(ctx, metav1.ListOptions{})
	if gatewayNotServed(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing gateways: %w", err)
	}
	o.gateways = gl.Items
	if gatewayFor(o.gateways, res.To.Addr) == nil {
		return nil
	}
	if l, err := v1.HTTPRoutes("").List(ctx, metav1.ListOptions{}); err == nil {
		o.http = l.Items
	} else if !gatewayNotServed(err) {
		return fmt.Errorf("listing httproutes: %w", err)
	}
	if l, err := v1.GRPCRoutes("").List(ctx, metav1.ListOptions{}); err == nil {
		o.grpc = l.Items
	} else if !gatewayNotServed(err) {
		return fmt.Errorf("listing grpcroutes: %w", err)
	}
	if l, err := v1.TLSRoutes("").List(ctx, metav1.ListOptions{}); err == nil {
		o.tls = l.Items
	} else if !gatewayNotServed(err) {
		return fmt.Errorf("listing tlsroutes: %w", err)
	}
	sl, err := r.c.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing services: %w", err)
	}
	o.services = sl.Items
	el, err := r.c.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing endpointslices: %w", err)
	}
	o.slices = el.Items
	o.nodes = r.nodes
	g := gatewayHop(res.To, o)
	if g == nil {
		return nil
	}
	if n, err := r.announcer(ctx, res.To); err == nil && n != "" {
		g.Announcers = []string{n}
	}
	res.Gateway = g
	return nil
}

// gatewayFor is the Gateway whose status.addresses hold to's address and
// that has a listener on its port.
func gatewayFor(gws []gatewayv1.Gateway, to netip.AddrPort) *gatewayv1.Gateway {
	for i := range gws {
		g := &gws[i]
		if !slices.ContainsFunc(g.Status.Addresses, func(a gatewayv1.GatewayStatusAddress) bool { return a.Value == to.Addr().String() }) {
			continue
		}
		if slices.ContainsFunc(g.Spec.Listeners, func(l gatewayv1.Listener) bool { return int(l.Port) == int(to.Port()) }) {
			return g
		}
	}
	return nil
}

// gatewayHop computes the Gateway part of a trace to TO from the objects;
// nil when TO is no Gateway's listener.
func gatewayHop(to Target, o gatewayObjects) *Gateway {
	gw := gatewayFor(o.gateways, to.Addr)
	if gw == nil {
		return nil
	}
	g := &Gateway{Name: gw.Namespace + "/" + gw.Name, Class: string(gw.Spec.GatewayClassName), Address: to.Addr.String(), Service: to.Service,
		DataPlanes: []DataPlane{}, Routes: []GatewayRoute{}}
	onPort := map[string]bool{}
	kinds := map[string]bool{}
	for _, l := range gw.Spec.Listeners {
		if int(l.Port) != int(to.Addr.Port()) {
			continue
		}
		gl := GatewayListener{Name: string(l.Name), Protocol: string(l.Protocol), Port: int32(l.Port)}
		if l.Hostname != nil {
			gl.Hostname = string(*l.Hostname)
		}
		g.Listeners = append(g.Listeners, gl)
		onPort[gl.Name] = true
		switch l.Protocol {
		case gatewayv1.HTTPProtocolType, gatewayv1.HTTPSProtocolType:
			kinds["HTTPRoute"], kinds["GRPCRoute"] = true, true
		case gatewayv1.TLSProtocolType:
			kinds["TLSRoute"] = true
		}
	}
	g.DataPlanes = dataPlanes(to, o)
	add := func(kind string, om metav1.ObjectMeta, spec gatewayv1.CommonRouteSpec, hosts []gatewayv1.Hostname, st gatewayv1.RouteStatus, rules []GatewayRule) {
		if !kinds[kind] {
			return
		}
		for _, p := range spec.ParentRefs {
			if !refersTo(p, gw, om.Namespace) {
				continue
			}
			if p.SectionName != nil && !onPort[string(*p.SectionName)] {
				continue
			}
			if p.Port != nil && int(*p.Port) != int(to.Addr.Port()) {
				continue
			}
			gr := GatewayRoute{Kind: kind, Name: om.Namespace + "/" + om.Name, Rules: rules}
			if p.SectionName != nil {
				gr.Listener = string(*p.SectionName)
			}
			for _, h := range hosts {
				gr.Hostnames = append(gr.Hostnames, string(h))
			}
			for _, ps := range st.Parents {
				if ps.ParentRef.Name != p.Name || ptrString(ps.ParentRef.Namespace) != ptrString(p.Namespace) || ptrString(ps.ParentRef.SectionName) != ptrString(p.SectionName) {
					continue
				}
				var ar, rr string
				gr.Accepted, ar = Condition(ps.Conditions, string(gatewayv1.RouteConditionAccepted))
				gr.ResolvedRefs, rr = Condition(ps.Conditions, string(gatewayv1.RouteConditionResolvedRefs))
				switch {
				case gr.Accepted != "" && gr.Accepted != "True":
					gr.Reason = ar
				case gr.ResolvedRefs != "" && gr.ResolvedRefs != "True":
					gr.Reason = rr
				}
			}
			g.Routes = append(g.Routes, gr)
		}
	}
	for _, rt := range o.http {
		var rules []GatewayRule
		for i, rule := range rt.Spec.Rules {
			gr := GatewayRule{Index: i, Name: ptrString(rule.Name), Backends: []GatewayBackend{}}
			for _, m := range rule.Matches {
				gr.Matches = append(gr.Matches, HTTPMatch(m))
			}
			for _, b := range rule.BackendRefs {
				gr.Backends = append(gr.Backends, backendOf(rt.Namespace, b.BackendRef, o))
			}
			rules = append(rules, gr)
		}
		add("HTTPRoute", rt.ObjectMeta, rt.Spec.CommonRouteSpec, rt.Spec.Hostnames, rt.Status.RouteStatus, rules)
	}
	for _, rt := range o.grpc {
		var rules []GatewayRule
		for i, rule := range rt.Spec.Rules {
			gr := GatewayRule{Index: i, Name: ptrString(rule.Name), Backends: []GatewayBackend{}}
			for _, m := range rule.Matches {
				gr.Matches = append(gr.Matches, GRPCMatch(m))
			}
			for _, b := range rule.BackendRefs {
				gr.Backends = append(gr.Backends, backendOf(rt.Namespace, b.BackendRef, o))
			}
			rules = append(rules, gr)
		}
		add("GRPCRoute", rt.ObjectMeta, rt.Spec.CommonRouteSpec, rt.Spec.Hostnames, rt.Status.RouteStatus, rules)
	}
	for _, rt := range o.tls {
		var rules []GatewayRule
		for i, rule := range rt.Spec.Rules {
			gr := GatewayRule{Index: i, Name: ptrString(rule.Name), Backends: []GatewayBackend{}}
			for _, b := range rule.BackendRefs {
				gr.Backends = append(gr.Backends, backendOf(rt.Namespace, b, o))
			}
			rules = append(rules, gr)
		}
		add("TLSRoute", rt.ObjectMeta, rt.Spec.CommonRouteSpec, rt.Spec.Hostnames, rt.Status.RouteStatus, rules)
	}
	slices.SortStableFunc(g.Routes, func(a, b GatewayRoute) int { return strings.Compare(a.Kind+" "+a.Name, b.Kind+" "+b.Name) })
	return g
}

func ptrString[T ~string](p *T) string {
	if p == nil {
		return ""
	}
	return string(*p)
}

// Condition is the status and reason of the condition of type t in cs
// ("" when there is none).
func Condition(cs []metav1.Condition, t string) (string, string) {
	for _, c := range cs {
		if c.Type == t {
			return string(c.Status), c.Reason
		}
	}
	return "", ""
}

// refersTo says the parentRef p (of a route in namespace ns) names gw.
func refersTo(p gatewayv1.ParentReference, gw *gatewayv1.Gateway, ns string) bool {
	if (p.Group != nil && *p.Group != gatewayv1.GroupName) || (p.Kind != nil && *p.Kind != "Gateway") {
		return false
	}
	if p.Namespace != nil {
		ns = string(*p.Namespace)
	}
	return ns == gw.Namespace && string(p.Name) == gw.Name
}

// dataPlanes are the endpoints of the Gateway's Service for the traced
// port: node InternalIPs and data ports.
func dataPlanes(to Target, o gatewayObjects) []DataPlane {
	out := []DataPlane{}
	nsName, _, _ := strings.Cut(to.Service, ":")
	ns, name, _ := strings.Cut(nsName, "/")
	var svcPort *corev1.ServicePort
	for i := range o.services {
		s := &o.services[i]
		if s.Namespace != ns || s.Name != name {
			continue
		}
		for j := range s.Spec.Ports {
			if int(s.Spec.Ports[j].Port) == int(to.Addr.Port()) {
				svcPort = &s.Spec.Ports[j]
			}
		}
	}
	if svcPort == nil {
		return out
	}
	for _, ep := range readyEndpoints(o, ns, name, svcPort) {
		dp := DataPlane{Addr: ep.Addr}
		if a, err := netip.ParseAddrPort(ep.Addr); err == nil {
			for i := range o.nodes {
				if slices.Contains(internalIPs(&o.nodes[i]), a.Addr().String()) {
					dp.Node = o.nodes[i].Name
				}
			}
		}
		out = append(out, dp)
	}
	return out
}

// readyEndpoints are the ready endpoints of the Service ns/name for its
// port sp, from its EndpointSlices: IP:targetPort and the pod.
func readyEndpoints(o gatewayObjects, ns, name string, sp *corev1.ServicePort) []GatewayEndpoint {
	out := []GatewayEndpoint{}
	seen := map[string]bool{}
	for _, s := range o.slices {
		if s.Namespace != ns || s.Labels[discoveryv1.LabelServiceName] != name {
			continue
		}
		var port int32 = -1
		for _, p := range s.Ports {
			if ptrString(p.Name) == sp.Name && p.Port != nil {
				port = *p.Port
			}
		}
		if port < 0 {
			continue
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				ip, err := netip.ParseAddr(a)
				if err != nil {
					continue
				}
				ge := GatewayEndpoint{Addr: netip.AddrPortFrom(ip, uint16(port)).String()}
				if seen[ge.Addr] {
					continue
				}
				seen[ge.Addr] = true
				if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
					ge.Pod = &Pod{Namespace: e.TargetRef.Namespace, Name: e.TargetRef.Name, Node: ptrString(e.NodeName)}
				}
				out = append(out, ge)
			}
		}
	}
	slices.SortFunc(out, func(a, b GatewayEndpoint) int { return strings.Compare(a.Addr, b.Addr) })
	return out
}

// backendOf is a backendRef of a route in namespace ns with its Service's
// ready endpoints.
func backendOf(ns string, b gatewayv1.BackendRef, o gatewayObjects) GatewayBackend {
	if b.Namespace != nil {
		ns = string(*b.Namespace)
	}
	out := GatewayBackend{Service: ns + "/" + string(b.Name), Weight: 1, Endpoints: []GatewayEndpoint{}}
	if b.Weight != nil {
		out.Weight = *b.Weight
	}
	if b.Port != nil {
		out.Service += ":" + strconv.Itoa(int(*b.Port))
	}
	if (b.Group != nil && *b.Group != "") || (b.Kind != nil && *b.Kind != "Service") {
		out.Why = "not a Service: the data plane answers 500 for requests to it"
		return out
	}
	var sp *corev1.ServicePort
	found := false
	for i := range o.services {
		s := &o.services[i]
		if s.Namespace != ns || s.Name != string(b.Name) {
			continue
		}
		found = true
		for j := range s.Spec.Ports {
			if b.Port != nil && int(s.Spec.Ports[j].Port) == int(*b.Port) {
				sp = &s.Spec.Ports[j]
			}
		}
	}
	switch {
	case !found:
		out.Why = "no such Service"
	case sp == nil:
		out.Why = "the Service has no such port"
	default:
		out.Endpoints = readyEndpoints(o, ns, string(b.Name), sp)
		if len(out.Endpoints) == 0 {
			out.Why = "no ready endpoints"
		}
	}
	return out
}

// HTTPMatch summarises an HTTPRoute match as an Ingress rule's path is
// shown, with what else it requires: "/api" (a prefix), "=/exact",
// "~^/re", then headers, query parameters and method.
func HTTPMatch(m gatewayv1.HTTPRouteMatch) string {
	path := "/"
	if m.Path != nil {
		if m.Path.Value != nil {
			path = *m.Path.Value
		}
		if m.Path.Type != nil {
			switch *m.Path.Type {
			case gatewayv1.PathMatchExact:
				path = "=" + path
			case gatewayv1.PathMatchRegularExpression:
				path = "~" + path
			}
		}
	}
	parts := []string{path}
	for _, h := range m.Headers {
		parts = append(parts, "header "+string(h.Name)+matchOp(h.Type != nil && *h.Type == gatewayv1.HeaderMatchRegularExpression)+h.Value)
	}
	for _, q := range m.QueryParams {
		parts = append(parts, "query "+string(q.Name)+matchOp(q.Type != nil && *q.Type == gatewayv1.QueryParamMatchRegularExpression)+q.Value)
	}
	if m.Method != nil {
		parts = append(parts, "method "+string(*m.Method))
	}
	return strings.Join(parts, ", ")
}

func matchOp(re bool) string {
	if re {
		return "~"
	}
	return "="
}

// GRPCMatch summarises a GRPCRoute match: "SERVICE/METHOD" (either "*"
// when not matched; "~" before a regular expression), then headers.
func GRPCMatch(m gatewayv1.GRPCRouteMatch) string {
	svc, method := "*", "*"
	re := false
	if m.Method != nil {
		if m.Method.Service != nil {
			svc = *m.Method.Service
		}
		if m.Method.Method != nil {
			method = *m.Method.Method
		}
		re = m.Method.Type != nil && *m.Method.Type == gatewayv1.GRPCMethodMatchRegularExpression
	}
	parts := []string{svc + "/" + method}
	if re {
		parts[0] = "~" + parts[0]
	}
	for _, h := range m.Headers {
		parts = append(parts, "header "+string(h.Name)+matchOp(h.Type != nil && *h.Type == gatewayv1.GRPCHeaderMatchRegularExpression)+h.Value)
	}
	return strings.Join(parts, ", ")
}

// servedAt says dst (a path's destination) is one of the Gateway's data
// ports; false for no Gateway.
func (g *Gateway) servedAt(dst string) bool {
	return g != nil && slices.ContainsFunc(g.DataPlanes, func(d DataPlane) bool { return d.Addr == dst })
}

// tree writes the Gateway part of a trace.
func (g *Gateway) tree(w io.Writer) {
	fmt.Fprintf(w, "gateway %s (class %s) at %s\n", g.Name, g.Class, g.Address)
	for _, l := range g.Listeners {
		h := ""
		if l.Hostname != "" {
			h = " hostname " + l.Hostname
		}
		fmt.Fprintf(w, "  listener %s %s/%d%s\n", l.Name, l.Protocol, l.Port, h)
	}
	ann := "(no nodeAssigned Event names the node)"
	if len(g.Announcers) > 0 {
		ann = "by node " + strings.Join(g.Announcers, ", ")
	}
	fmt.Fprintf(w, "  address announced %s (ARP, the LoadBalancer stub); the rules above are kube-proxy's for its Service %s\n", ann, g.Service)
	var dps []string
	for _, d := range g.DataPlanes {
		if d.Node != "" {
			dps = append(dps, d.Node+" ("+d.Addr+")")
		} else {
			dps = append(dps, d.Addr)
		}
	}
	if len(dps) == 0 {
		fmt.Fprintf(w, "  data plane: the Service has no ready endpoints: no node's Gateway data plane serves this port\n")
	} else {
		fmt.Fprintf(w, "  delivered to the Gateway data plane (user space, not a kernel rule) of the node each path above ends at: %s; no kernel rule decides past its data port\n", strings.Join(dps, ", "))
	}
	decides := "each request's Host header, path, method, headers and query pick the route and rule"
	if len(g.Listeners) > 0 && g.Listeners[0].Protocol == string(gatewayv1.TLSProtocolType) {
		decides = "each connection's TLS server name (SNI) picks the route"
	}
	fmt.Fprintf(w, "  candidate routes (%s, the weights one backend; the proxy connects to it from its node):\n", decides)
	if len(g.Routes) == 0 {
		fmt.Fprintf(w, "    none: no route is attached to these listeners, the data plane answers 404 (HTTP) or closes the connection (TLS)\n")
	}
	for _, rt := range g.Routes {
		st := "Accepted"
		switch {
		case rt.Accepted == "":
			st = "no status yet"
		case rt.Accepted != "True":
			st = "not Accepted (" + rt.Reason + "): not served"
		case rt.ResolvedRefs != "" && rt.ResolvedRefs != "True":
			st = "Accepted, refs unresolved (" + rt.Reason + ")"
		}
		hosts := "any host"
		if len(rt.Hostnames) > 0 {
			hosts = strings.Join(rt.Hostnames, ", ")
		}
		on := ""
		if rt.Listener != "" {
			on = " on listener " + rt.Listener
		}
		fmt.Fprintf(w, "    %s %s%s, %s: %s\n", rt.Kind, rt.Name, on, hosts, st)
		for _, rule := range rt.Rules {
			name := "rule " + strconv.Itoa(rule.Index)
			if rule.Name != "" {
				name += " (" + rule.Name + ")"
			}
			m := strings.Join(rule.Matches, " | ")
			if m == "" && rt.Kind != "TLSRoute" {
				m = "/"
			}
			if m != "" {
				m = " " + m
			}
			fmt.Fprintf(w, "      %s%s\n", name, m)
			if len(rule.Backends) == 0 {
				fmt.Fprintf(w, "        no backends: the data plane answers 500\n")
			}
			for _, b := range rule.Backends {
				fmt.Fprintf(w, "        → %s weight %d\n", b.Service, b.Weight)
				if b.Why != "" {
					fmt.Fprintf(w, "          %s\n", b.Why)
				}
				for _, e := range b.Endpoints {
					if e.Pod != nil {
						fmt.Fprintf(w, "          %s %s\n", e.Addr, e.Pod)
					} else {
						fmt.Fprintf(w, "          %s\n", e.Addr)
					}
				}
			}
		}
	}
}
