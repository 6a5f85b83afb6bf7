package gateway

import (
	"crypto/tls"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// The status rules of the Gateway API for the Gateways of minikit's class:
// pure functions of a World, so the control plane (which writes them) and the
// data plane (which serves what they accept) agree, and tests are tables.

// ControllerName is the GatewayClass controllerName minikit's controller
// answers for; ClassName is the GatewayClass the cluster is installed with.
const (
	ControllerName gatewayv1.GatewayController = "minikit.io/gateway-controller"
	ClassName                                  = "minikit"
)

const (
	groupGateway = gatewayv1.GroupName
	kindGateway  = "Gateway"
	kindHTTP     = "HTTPRoute"
	kindService  = "Service"
)

// World is the snapshot of the API the rules read. Gateways holds only the
// Gateways of classes this controller owns.
type World struct {
	Gateways   []*gatewayv1.Gateway
	HTTPRoutes []*gatewayv1.HTTPRoute
	GRPCRoutes []*gatewayv1.GRPCRoute
	TLSRoutes  []*gatewayv1.TLSRoute
	TCPRoutes  []*gatewayv1.TCPRoute
	UDPRoutes  []*gatewayv1.UDPRoute
	Grants     []*gatewayv1.ReferenceGrant
	Services   map[types.NamespacedName]*corev1.Service
	// Secrets holds the Secrets HTTPS listeners' certificateRefs may name.
	Secrets map[types.NamespacedName]*corev1.Secret
	// Namespaces maps a namespace's name to its labels (allowedRoutes selectors).
	Namespaces map[string]map[string]string
}

// ListenerKey names one listener of one Gateway.
type ListenerKey struct {
	Gateway  types.NamespacedName
	Listener gatewayv1.SectionName
}

// Attachment is a route attached to a listener, with the hostnames it serves
// there (the intersection of the listener's and the route's; nil is any).
// A GRPCRoute is there as the HTTPRoute that routes the same (grpcAsHTTP).
type Attachment struct {
	Route     *gatewayv1.HTTPRoute
	Hostnames []string
}

// Result is what the rules decide.
type Result struct {
	// Listeners is each Gateway's status.listeners (conditions without times).
	Listeners map[types.NamespacedName][]gatewayv1.ListenerStatus
	// Gateways is each Gateway's Accepted condition (Programmed depends on
	// its address, which the control plane adds).
	Accepted map[types.NamespacedName]metav1.Condition
	// Parents is each HTTPRoute's status.parents for this controller's parents.
	Parents map[types.NamespacedName][]gatewayv1.RouteParentStatus
	// GRPCParents is the same for each GRPCRoute.
	GRPCParents map[types.NamespacedName][]gatewayv1.RouteParentStatus
	// TLSParents is the same for each TLSRoute.
	TLSParents map[types.NamespacedName][]gatewayv1.RouteParentStatus
	// TCPParents and UDPParents are the same for each TCPRoute and UDPRoute.
	TCPParents map[types.NamespacedName][]gatewayv1.RouteParentStatus
	UDPParents map[types.NamespacedName][]gatewayv1.RouteParentStatus
	// Attached lists, per valid listener, the routes attached to it: what
	// the data plane serves.
	Attached map[ListenerKey][]Attachment
	// Certificates holds each valid HTTPS listener's certificates.
	Certificates map[ListenerKey][]*tls.Certificate
}

// listenerCheck is a listener's validity as its conditions say it.
type listenerCheck struct {
	kinds    []gatewayv1.RouteGroupKind
	accepted metav1.Condition
	resolved metav1.Condition
	conflict metav1.Condition
	certs    []*tls.Certificate
}

func (c listenerCheck) valid() bool {
	return c.accepted.Status == metav1.ConditionTrue && c.resolved.Status == metav1.ConditionTrue && c.conflict.Status == metav1.ConditionFalse
}

func cond(typ string, ok bool, reason, msg string, gen int64) metav1.Condition {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	return metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen}
}

// checkListeners validates a Gateway's listeners. HTTP, HTTPS (tls.mode
// Terminate), TLS (tls.mode Passthrough), TCP and UDP are served; other
// protocols are UnsupportedProtocol, as the spec asks of an implementation
// that lacks them.
func checkListeners(w World, gw *gatewayv1.Gateway) []listenerCheck {
	gen := gw.Generation
	out := make([]listenerCheck, len(gw.Spec.Listeners))
	for i, l := range gw.Spec.Listeners {
		c := &out[i]
		c.conflict = cond(string(gatewayv1.ListenerConditionConflicted), false, string(gatewayv1.ListenerReasonNoConflicts), "", gen)
		c.resolved = cond(string(gatewayv1.ListenerConditionResolvedRefs), true, string(gatewayv1.ListenerReasonResolvedRefs), "", gen)
		if !slices.Contains([]gatewayv1.ProtocolType{gatewayv1.HTTPProtocolType, gatewayv1.HTTPSProtocolType, gatewayv1.TLSProtocolType,
			gatewayv1.TCPProtocolType, gatewayv1.UDPProtocolType}, l.Protocol) {
			c.accepted = cond(string(gatewayv1.ListenerConditionAccepted), false, string(gatewayv1.ListenerReasonUnsupportedProtocol),
				fmt.Sprintf("protocol %q is not supported (yet) by %s", l.Protocol, ControllerName), gen)
			continue
		}
		c.accepted = cond(string(gatewayv1.ListenerConditionAccepted), true, string(gatewayv1.ListenerReasonAccepted), "", gen)
		// HTTP and HTTPS listeners take HTTPRoutes and GRPCRoutes (gRPC
		// over h2c on HTTP listeners); TLS listeners take TLSRoutes, TCP
		// listeners TCPRoutes and UDP listeners UDPRoutes.
		served := []gatewayv1.RouteGroupKind{{Group: ptr(gatewayv1.Group(groupGateway)), Kind: kindHTTP},
			{Group: ptr(gatewayv1.Group(groupGateway)), Kind: kindGRPC}}
		switch l.Protocol {
		case gatewayv1.HTTPSProtocolType:
			if l.TLS != nil && deref(l.TLS.Mode, gatewayv1.TLSModeTerminate) != gatewayv1.TLSModeTerminate {
				c.accepted = cond(string(gatewayv1.ListenerConditionAccepted), false, string(gatewayv1.ListenerReasonUnsupportedValue),
					fmt.Sprintf("listener %q: tls.mode: %q is not valid on an HTTPS listener (Terminate is)", l.Name, *l.TLS.Mode), gen)
			} else {
				c.certs, c.resolved = resolveCertificates(w, gw, l)
			}
		case gatewayv1.TLSProtocolType:
			// Passthrough only: the data port reads the ClientHello's
			// server name and splices the connection to a backend that
			// terminates TLS itself. certificateRefs are ignored there, as
			// the spec says of that mode. Terminate (TLSRouteModeTerminate,
			// extended) is not built.
			served = []gatewayv1.RouteGroupKind{{Group: ptr(gatewayv1.Group(groupGateway)), Kind: kindTLS}}
			if mode := tlsMode(l); mode != gatewayv1.TLSModePassthrough {
				c.accepted = cond(string(gatewayv1.ListenerConditionAccepted), false, string(gatewayv1.ListenerReasonUnsupportedValue),
					fmt.Sprintf("listener %q: tls.mode: %q is not supported on a TLS listener by %s (Passthrough is)", l.Name, mode, ControllerName), gen)
				continue // no route kind is supported on it (supportedKinds empty)
			}
		case gatewayv1.TCPProtocolType:
			served = []gatewayv1.RouteGroupKind{{Group: ptr(gatewayv1.Group(groupGateway)), Kind: kindTCP}}
		case gatewayv1.UDPProtocolType:
			served = []gatewayv1.RouteGroupKind{{Group: ptr(gatewayv1.Group(groupGateway)), Kind: kindUDP}}
		}
		if l.AllowedRoutes == nil || len(l.AllowedRoutes.Kinds) == 0 {
			c.kinds = served
		} else {
			var bad []string
			for _, k := range l.AllowedRoutes.Kinds {
				if i := slices.IndexFunc(served, func(sk gatewayv1.RouteGroupKind) bool { return sk.Kind == k.Kind }); i >= 0 && deref(k.Group, groupGateway) == groupGateway {
					c.kinds = append(c.kinds, served[i])
				} else {
					bad = append(bad, string(deref(k.Group, ""))+"/"+string(k.Kind))
				}
			}
			if len(bad) > 0 {
				c.resolved = cond(string(gatewayv1.ListenerConditionResolvedRefs), false, string(gatewayv1.ListenerReasonInvalidRouteKinds),
					fmt.Sprintf("route kinds not supported on an %s listener: %s", l.Protocol, strings.Join(bad, ", ")), gen)
			}
		}
	}
	// Two listeners on one port with the same hostname: both conflict (the
	// spec lets an implementation pick; refusing both keeps either from
	// shadowing the other by the order of the list).
	// Listeners of different protocols on one port conflict too: one data
	// port either terminates TLS or it does not, and a TCP listener shares
	// its port with no other (the spec's rule). A UDP listener and one over
	// TCP on the same port are distinct: the Service has a port of each
	// protocol, and each its own data port.
	for i, a := range gw.Spec.Listeners {
		for j, b := range gw.Spec.Listeners {
			switch {
			case i == j || a.Port != b.Port || (a.Protocol == gatewayv1.UDPProtocolType) != (b.Protocol == gatewayv1.UDPProtocolType):
			case a.Protocol != b.Protocol:
				out[i].conflict = cond(string(gatewayv1.ListenerConditionConflicted), true, string(gatewayv1.ListenerReasonProtocolConflict),
					fmt.Sprintf("listener %q uses port %d with protocol %s", b.Name, b.Port, b.Protocol), gen)
			case deref(a.Hostname, "") == deref(b.Hostname, "") && out[i].conflict.Status != metav1.ConditionTrue:
				out[i].conflict = cond(string(gatewayv1.ListenerConditionConflicted), true, string(gatewayv1.ListenerReasonHostnameConflict),
					fmt.Sprintf("listener %q has the same port and hostname", b.Name), gen)
			}
		}
	}
	return out
}

// Compute applies the rules to a World.
func Compute(w World) Result {
	r := Result{
		Listeners: map[types.NamespacedName][]gatewayv1.ListenerStatus{},
		Accepted:  map[types.NamespacedName]metav1.Condition{},
		Parents:   map[types.NamespacedName][]gatewayv1.RouteParentStatus{},

		GRPCParents: map[types.NamespacedName][]gatewayv1.RouteParentStatus{},
		TLSParents:  map[types.NamespacedName][]gatewayv1.RouteParentStatus{},
		TCPParents:  map[types.NamespacedName][]gatewayv1.RouteParentStatus{},
		UDPParents:  map[types.NamespacedName][]gatewayv1.RouteParentStatus{},
		Attached:    map[ListenerKey][]Attachment{},

		Certificates: map[ListenerKey][]*tls.Certificate{},
	}
	gws := map[types.NamespacedName]*gatewayv1.Gateway{}
	checks := map[types.NamespacedName][]listenerCheck{}
	for _, gw := range w.Gateways {
		key := types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}
		gws[key] = gw
		cs := checkListeners(w, gw)
		checks[key] = cs
		for i, c := range cs {
			if c.valid() && c.certs != nil {
				r.Certificates[ListenerKey{key, gw.Spec.Listeners[i].Name}] = c.certs
			}
		}
		valid := 0
		for _, c := range cs {
			if c.valid() {
				valid++
			}
		}
		switch {
		case valid == len(cs):
			r.Accepted[key] = cond(string(gatewayv1.GatewayConditionAccepted), true, string(gatewayv1.GatewayReasonAccepted), "", gw.Generation)
		case valid > 0:
			r.Accepted[key] = cond(string(gatewayv1.GatewayConditionAccepted), true, string(gatewayv1.GatewayReasonListenersNotValid),
				fmt.Sprintf("%d of %d listeners are not valid", len(cs)-valid, len(cs)), gw.Generation)
		default:
			r.Accepted[key] = cond(string(gatewayv1.GatewayConditionAccepted), false, string(gatewayv1.GatewayReasonListenersNotValid),
				"no listener is valid", gw.Generation)
		}
	}
	attached := map[ListenerKey]int32{}
	routes := slices.Clone(w.HTTPRoutes)
	for _, g := range w.GRPCRoutes {
		routes = append(routes, grpcAsHTTP(g))
	}
	for _, t := range w.TLSRoutes {
		routes = append(routes, tlsAsHTTP(t))
	}
	for _, t := range w.TCPRoutes {
		routes = append(routes, tcpAsHTTP(t))
	}
	for _, u := range w.UDPRoutes {
		routes = append(routes, udpAsHTTP(u))
	}
	for _, rt := range routes {
		rkey := types.NamespacedName{Namespace: rt.Namespace, Name: rt.Name}
		parents := r.Parents
		switch routeKind(rt) {
		case kindGRPC:
			parents = r.GRPCParents
		case kindTLS:
			parents = r.TLSParents
		case kindTCP:
			parents = r.TCPParents
		case kindUDP:
			parents = r.UDPParents
		}
		resolved := resolveRefs(w, rt)
		for _, pr := range rt.Spec.ParentRefs {
			if deref(pr.Group, groupGateway) != groupGateway || deref(pr.Kind, kindGateway) != kindGateway {
				continue // not a parent this controller could own
			}
			gkey := types.NamespacedName{Namespace: string(deref(pr.Namespace, gatewayv1.Namespace(rt.Namespace))), Name: string(pr.Name)}
			gw, ok := gws[gkey]
			if !ok {
				continue // another controller's Gateway, or none: not ours to report
			}
			ps := gatewayv1.RouteParentStatus{ParentRef: explicitParent(pr), ControllerName: ControllerName}
			acc := attach(w, gw, checks[gkey], rt, pr, func(i int, hosts []string) {
				k := ListenerKey{gkey, gw.Spec.Listeners[i].Name}
				attached[k]++
				if checks[gkey][i].valid() {
					r.Attached[k] = append(r.Attached[k], Attachment{Route: rt, Hostnames: hosts})
				}
			})
			if msg := unsupportedFilter(rt); msg != "" && acc.Status == metav1.ConditionTrue {
				acc = cond(string(gatewayv1.RouteConditionAccepted), false, string(gatewayv1.RouteReasonUnsupportedValue), msg, 0)
			}
			acc.ObservedGeneration = rt.Generation
			res := resolved
			res.ObservedGeneration = rt.Generation
			ps.Conditions = []metav1.Condition{acc, res}
			parents[rkey] = append(parents[rkey], ps)
		}
	}
	for key, gw := range gws {
		ls := make([]gatewayv1.ListenerStatus, len(gw.Spec.Listeners))
		for i, l := range gw.Spec.Listeners {
			c := checks[key][i]
			prog := cond(string(gatewayv1.ListenerConditionProgrammed), c.valid(), string(gatewayv1.ListenerReasonProgrammed), "", gw.Generation)
			if !c.valid() {
				prog.Reason = string(gatewayv1.ListenerReasonInvalid)
			}
			ls[i] = gatewayv1.ListenerStatus{Name: l.Name, SupportedKinds: c.kinds, AttachedRoutes: attached[ListenerKey{key, l.Name}],
				Conditions: []metav1.Condition{c.accepted, c.resolved, c.conflict, prog}}
		}
		r.Listeners[key] = ls
	}
	return r
}

// explicitParent is a parentRef with its group and kind spelled out, as the
// suite compares them.
func explicitParent(pr gatewayv1.ParentReference) gatewayv1.ParentReference {
	out := *pr.DeepCopy()
	out.Group = ptr(gatewayv1.Group(groupGateway))
	out.Kind = ptr(gatewayv1.Kind(kindGateway))
	return out
}

// attach decides a route's Accepted condition on one parent and reports each
// listener (by index) it attaches to. Attachment is the listener's
// allowedRoutes (kinds, namespaces) and hostname against the parentRef and
// the route, not the listener's validity: the spec counts a route attached
// to a listener whose certificate does not resolve in that listener's
// attachedRoutes, while the data plane serves only valid listeners.
func attach(w World, gw *gatewayv1.Gateway, checks []listenerCheck, rt *gatewayv1.HTTPRoute, pr gatewayv1.ParentReference,
	onAttach func(int, []string)) metav1.Condition {
	accepted := func(ok bool, reason gatewayv1.RouteConditionReason, msg string) metav1.Condition {
		return cond(string(gatewayv1.RouteConditionAccepted), ok, string(reason), msg, 0)
	}
	var candidates []int
	for i, l := range gw.Spec.Listeners {
		if pr.SectionName != nil && *pr.SectionName != l.Name {
			continue
		}
		if pr.Port != nil && *pr.Port != l.Port {
			continue
		}
		candidates = append(candidates, i)
	}
	if len(candidates) == 0 {
		return accepted(false, gatewayv1.RouteReasonNoMatchingParent, "no listener of the Gateway matches the parentRef's sectionName and port")
	}
	var allowed []int
	for _, i := range candidates {
		c := checks[i]
		if !slices.ContainsFunc(c.kinds, func(k gatewayv1.RouteGroupKind) bool { return string(k.Kind) == routeKind(rt) }) {
			continue
		}
		if namespaceAllowed(w, gw, gw.Spec.Listeners[i].AllowedRoutes, rt.Namespace) {
			allowed = append(allowed, i)
		}
	}
	if len(allowed) == 0 {
		return accepted(false, gatewayv1.RouteReasonNotAllowedByListeners, "no listener of the Gateway allows this route (kind or namespace)")
	}
	n := 0
	for _, i := range allowed {
		l := gw.Spec.Listeners[i]
		hosts, ok := IntersectHostnames(l.Hostname, rt.Spec.Hostnames)
		if !ok {
			continue
		}
		n++
		onAttach(i, hosts)
	}
	if n == 0 {
		return accepted(false, gatewayv1.RouteReasonNoMatchingListenerHostname, "no hostname of the route matches a listener's hostname")
	}
	return accepted(true, gatewayv1.RouteReasonAccepted, "")
}

func namespaceAllowed(w World, gw *gatewayv1.Gateway, ar *gatewayv1.AllowedRoutes, ns string) bool {
	from := gatewayv1.NamespacesFromSame
	if ar != nil && ar.Namespaces != nil && ar.Namespaces.From != nil {
		from = *ar.Namespaces.From
	}
	switch from {
	case gatewayv1.NamespacesFromAll:
		return true
	case gatewayv1.NamespacesFromSame:
		return ns == gw.Namespace
	case gatewayv1.NamespacesFromSelector:
		if ar.Namespaces.Selector == nil {
			return false
		}
		sel, err := metav1.LabelSelectorAsSelector(ar.Namespaces.Selector)
		if err != nil {
			return false
		}
		lbls, ok := w.Namespaces[ns]
		return ok && sel.Matches(labels.Set(lbls))
	}
	return false
}

// IntersectHostnames is the set of hostnames a route serves on a listener:
// nil (any) when neither restricts, the listener's when only it does, the
// route's that match it otherwise (a wildcard matches one or more leading
// labels, never the bare suffix). ok is false when they do not meet.
func IntersectHostnames(listener *gatewayv1.Hostname, route []gatewayv1.Hostname) ([]string, bool) {
	if listener == nil || *listener == "" {
		if len(route) == 0 {
			return nil, true
		}
		out := make([]string, len(route))
		for i, h := range route {
			out[i] = string(h)
		}
		return out, true
	}
	lh := string(*listener)
	if len(route) == 0 {
		return []string{lh}, true
	}
	var out []string
	for _, h := range route {
		rh := string(h)
		switch {
		case rh == lh:
			out = append(out, rh)
		case wildcardMatches(lh, rh):
			out = append(out, rh) // the route's is the narrower
		case wildcardMatches(rh, lh):
			out = append(out, lh)
		}
	}
	return out, len(out) > 0
}

// wildcardMatches reports whether pattern "*.suffix" covers host (which may
// itself be a narrower wildcard).
func wildcardMatches(pattern, host string) bool {
	suffix, ok := strings.CutPrefix(pattern, "*")
	if !ok {
		return false
	}
	return strings.HasSuffix(host, suffix) && len(host) > len(suffix) && host != pattern
}

// resolveRefs is a route's ResolvedRefs condition: the first reference, in
// rule order, that does not resolve decides its reason: a filter's
// extensionRef (minikit serves no extension filters: InvalidKind), a
// RequestMirror's backendRef, a backendRef or a backendRef's own filter's,
// of an unknown kind, crossing namespaces without a ReferenceGrant, or
// naming a missing Service.
func resolveRefs(w World, rt *gatewayv1.HTTPRoute) metav1.Condition {
	for ri, rule := range rt.Spec.Rules {
		if err := checkFilterRefs(w, rt, fmt.Sprintf("spec.rules[%d].filters", ri), rule.Filters); err != nil {
			return cond(string(gatewayv1.RouteConditionResolvedRefs), false, string(err.reason), err.msg, 0)
		}
		for bi, br := range rule.BackendRefs {
			if err := checkBackend(w, routeKind(rt), rt.Namespace, br.BackendObjectReference); err != nil {
				return cond(string(gatewayv1.RouteConditionResolvedRefs), false, string(err.reason), err.msg, 0)
			}
			if err := checkFilterRefs(w, rt, fmt.Sprintf("spec.rules[%d].backendRefs[%d].filters", ri, bi), br.Filters); err != nil {
				return cond(string(gatewayv1.RouteConditionResolvedRefs), false, string(err.reason), err.msg, 0)
			}
		}
	}
	return cond(string(gatewayv1.RouteConditionResolvedRefs), true, string(gatewayv1.RouteReasonResolvedRefs), "", 0)
}

// checkFilterRefs is the first reference of a filter list (field names
// them) that does not resolve.
func checkFilterRefs(w World, rt *gatewayv1.HTTPRoute, field string, fs []gatewayv1.HTTPRouteFilter) *refError {
	for i, f := range fs {
		switch {
		case f.Type == gatewayv1.HTTPRouteFilterExtensionRef && f.ExtensionRef != nil:
			return &refError{gatewayv1.RouteReasonInvalidKind, extensionRefMessage(field, i, f.ExtensionRef)}
		case f.Type == gatewayv1.HTTPRouteFilterRequestMirror && f.RequestMirror != nil:
			if err := checkBackend(w, routeKind(rt), rt.Namespace, f.RequestMirror.BackendRef); err != nil {
				return &refError{err.reason, fmt.Sprintf("%s[%d].requestMirror.%s", field, i, err.msg)}
			}
		}
	}
	return nil
}

func extensionRefMessage(field string, i int, ref *gatewayv1.LocalObjectReference) string {
	return fmt.Sprintf("%s[%d].extensionRef: %s/%s %q: %s supports no extension filters; requests for the rule get 500",
		field, i, ref.Group, ref.Kind, ref.Name, ControllerName)
}

// Filter types the data plane honours, on a rule and on a backendRef.
var (
	ruleFilters = []gatewayv1.HTTPRouteFilterType{gatewayv1.HTTPRouteFilterRequestHeaderModifier, gatewayv1.HTTPRouteFilterResponseHeaderModifier,
		gatewayv1.HTTPRouteFilterRequestRedirect, gatewayv1.HTTPRouteFilterURLRewrite, gatewayv1.HTTPRouteFilterRequestMirror, gatewayv1.HTTPRouteFilterCORS}
	backendFilters = []gatewayv1.HTTPRouteFilterType{gatewayv1.HTTPRouteFilterRequestHeaderModifier, gatewayv1.HTTPRouteFilterResponseHeaderModifier}
)

// unsupportedFilter is the first filter of a route the data plane cannot
// honour (a type it does not implement or does not know: CORS,
// ExternalAuth, a RequestMirror on a backendRef...), as the message of the
// route's Accepted=False condition (reason UnsupportedValue, as the filter
// type's doc asks for a value the implementation does not recognise); ""
// when there is none. ExtensionRef filters are not here: they are
// references, which resolveRefs reports. The route still attaches and its
// other rules are served; the rule with such a filter answers 500
// (Action.Fault), since a filter must never be skipped.
func unsupportedFilter(rt *gatewayv1.HTTPRoute) string {
	for ri, rule := range rt.Spec.Rules {
		if msg := unsupportedIn(fmt.Sprintf("spec.rules[%d].filters", ri), rule.Filters, ruleFilters, "the rule"); msg != "" {
			return msg
		}
		for bi, br := range rule.BackendRefs {
			if msg := unsupportedIn(fmt.Sprintf("spec.rules[%d].backendRefs[%d].filters", ri, bi), br.Filters, backendFilters, "the backendRef"); msg != "" {
				return msg
			}
		}
	}
	return ""
}

func unsupportedIn(field string, fs []gatewayv1.HTTPRouteFilter, supported []gatewayv1.HTTPRouteFilterType, where string) string {
	for i, f := range fs {
		if f.Type == gatewayv1.HTTPRouteFilterExtensionRef || slices.Contains(supported, f.Type) {
			continue
		}
		return fmt.Sprintf("%s[%d].type: Unsupported value: %q: filter type not supported by %s; requests for %s get 500",
			field, i, f.Type, ControllerName, where)
	}
	return ""
}

type refError struct {
	reason gatewayv1.RouteConditionReason
	msg    string
}

// checkBackend is nil when a backendRef of a route of kind routeKind resolves
// to a Service the route may use.
func checkBackend(w World, routeKind, routeNS string, ref gatewayv1.BackendObjectReference) *refError {
	group, kind := deref(ref.Group, ""), deref(ref.Kind, kindService)
	if group != "" || kind != kindService {
		return &refError{gatewayv1.RouteReasonInvalidKind, fmt.Sprintf("backendRef %s/%s %q: only core Services are supported", group, kind, ref.Name)}
	}
	ns := string(deref(ref.Namespace, gatewayv1.Namespace(routeNS)))
	if ns != routeNS && !granted(w, routeKind, routeNS, ns, string(ref.Name)) {
		return &refError{gatewayv1.RouteReasonRefNotPermitted, fmt.Sprintf("backendRef Service %s/%s: no ReferenceGrant in %q allows %ss from %q", ns, ref.Name, ns, routeKind, routeNS)}
	}
	if _, ok := w.Services[types.NamespacedName{Namespace: ns, Name: string(ref.Name)}]; !ok {
		return &refError{gatewayv1.RouteReasonBackendNotFound, fmt.Sprintf("backendRef Service %s/%s not found", ns, ref.Name)}
	}
	return nil
}

// granted reports whether a ReferenceGrant in toNS lets routes of kind
// routeKind in fromNS refer to the Service name there.
func granted(w World, routeKind, fromNS, toNS, name string) bool {
	for _, g := range w.Grants {
		if g.Namespace != toNS {
			continue
		}
		from := slices.ContainsFunc(g.Spec.From, func(f gatewayv1.ReferenceGrantFrom) bool {
			return f.Group == groupGateway && string(f.Kind) == routeKind && string(f.Namespace) == fromNS
		})
		to := slices.ContainsFunc(g.Spec.To, func(t gatewayv1.ReferenceGrantTo) bool {
			return t.Group == "" && t.Kind == kindService && (t.Name == nil || string(*t.Name) == name)
		})
		if from && to {
			return true
		}
	}
	return false
}

func ptr[T any](v T) *T { return &v }

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
