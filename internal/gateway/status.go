package gateway

import (
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
	Grants     []*gatewayv1.ReferenceGrant
	Services   map[types.NamespacedName]*corev1.Service
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
	// Attached lists, per valid listener, the routes attached to it.
	Attached map[ListenerKey][]Attachment
}

// listenerCheck is a listener's validity as its conditions say it.
type listenerCheck struct {
	kinds    []gatewayv1.RouteGroupKind
	accepted metav1.Condition
	resolved metav1.Condition
	conflict metav1.Condition
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

// checkListeners validates a Gateway's listeners. Only HTTP is served so far;
// other protocols are UnsupportedProtocol, as the spec asks of an
// implementation that lacks them.
func checkListeners(gw *gatewayv1.Gateway) []listenerCheck {
	gen := gw.Generation
	out := make([]listenerCheck, len(gw.Spec.Listeners))
	for i, l := range gw.Spec.Listeners {
		c := &out[i]
		c.conflict = cond(string(gatewayv1.ListenerConditionConflicted), false, string(gatewayv1.ListenerReasonNoConflicts), "", gen)
		if l.Protocol != gatewayv1.HTTPProtocolType {
			c.accepted = cond(string(gatewayv1.ListenerConditionAccepted), false, string(gatewayv1.ListenerReasonUnsupportedProtocol),
				fmt.Sprintf("protocol %q is not supported (yet) by %s", l.Protocol, ControllerName), gen)
			c.resolved = cond(string(gatewayv1.ListenerConditionResolvedRefs), true, string(gatewayv1.ListenerReasonResolvedRefs), "", gen)
			continue
		}
		c.accepted = cond(string(gatewayv1.ListenerConditionAccepted), true, string(gatewayv1.ListenerReasonAccepted), "", gen)
		c.resolved = cond(string(gatewayv1.ListenerConditionResolvedRefs), true, string(gatewayv1.ListenerReasonResolvedRefs), "", gen)
		http := gatewayv1.RouteGroupKind{Group: ptr(gatewayv1.Group(groupGateway)), Kind: kindHTTP}
		if l.AllowedRoutes == nil || len(l.AllowedRoutes.Kinds) == 0 {
			c.kinds = []gatewayv1.RouteGroupKind{http}
		} else {
			var bad []string
			for _, k := range l.AllowedRoutes.Kinds {
				if k.Kind == kindHTTP && (k.Group == nil || *k.Group == groupGateway) {
					c.kinds = append(c.kinds, http)
				} else {
					bad = append(bad, string(deref(k.Group, ""))+"/"+string(k.Kind))
				}
			}
			if len(bad) > 0 {
				c.resolved = cond(string(gatewayv1.ListenerConditionResolvedRefs), false, string(gatewayv1.ListenerReasonInvalidRouteKinds),
					"route kinds not supported on an HTTP listener: "+strings.Join(bad, ", "), gen)
			}
		}
	}
	// Two listeners on one port with the same hostname: both conflict (the
	// spec lets an implementation pick; refusing both keeps either from
	// shadowing the other by the order of the list).
	for i, a := range gw.Spec.Listeners {
		for j, b := range gw.Spec.Listeners {
			if i != j && a.Port == b.Port && deref(a.Hostname, "") == deref(b.Hostname, "") && a.Protocol == b.Protocol {
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
		Attached:  map[ListenerKey][]Attachment{},
	}
	gws := map[types.NamespacedName]*gatewayv1.Gateway{}
	checks := map[types.NamespacedName][]listenerCheck{}
	for _, gw := range w.Gateways {
		key := types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}
		gws[key] = gw
		cs := checkListeners(gw)
		checks[key] = cs
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
	for _, rt := range w.HTTPRoutes {
		rkey := types.NamespacedName{Namespace: rt.Namespace, Name: rt.Name}
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
			acc := attach(w, gw, checks[gkey], rt, pr, func(l gatewayv1.SectionName, hosts []string) {
				k := ListenerKey{gkey, l}
				attached[k]++
				r.Attached[k] = append(r.Attached[k], Attachment{Route: rt, Hostnames: hosts})
			})
			acc.ObservedGeneration = rt.Generation
			res := resolved
			res.ObservedGeneration = rt.Generation
			ps.Conditions = []metav1.Condition{acc, res}
			r.Parents[rkey] = append(r.Parents[rkey], ps)
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
// listener it attaches to.
func attach(w World, gw *gatewayv1.Gateway, checks []listenerCheck, rt *gatewayv1.HTTPRoute, pr gatewayv1.ParentReference,
	onAttach func(gatewayv1.SectionName, []string)) metav1.Condition {
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
		if !c.valid() || !slices.ContainsFunc(c.kinds, func(k gatewayv1.RouteGroupKind) bool { return k.Kind == kindHTTP }) {
			continue
		}
		if namespaceAllowed(w, gw, gw.Spec.Listeners[i].AllowedRoutes, rt.Namespace) {
			allowed = append(allowed, i)
		}
	}
	if len(allowed) == 0 {
		return accepted(false, gatewayv1.RouteReasonNotAllowedByListeners, "no listener of the Gateway allows this route (kind, namespace or listener validity)")
	}
	n := 0
	for _, i := range allowed {
		l := gw.Spec.Listeners[i]
		hosts, ok := IntersectHostnames(l.Hostname, rt.Spec.Hostnames)
		if !ok {
			continue
		}
		n++
		onAttach(l.Name, hosts)
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

// resolveRefs is a route's ResolvedRefs condition: the first backendRef that
// is of an unknown kind, crosses namespaces without a ReferenceGrant, or
// names a missing Service decides its reason.
func resolveRefs(w World, rt *gatewayv1.HTTPRoute) metav1.Condition {
	for _, rule := range rt.Spec.Rules {
		for _, br := range rule.BackendRefs {
			if err := checkBackend(w, rt.Namespace, br.BackendObjectReference); err != nil {
				return cond(string(gatewayv1.RouteConditionResolvedRefs), false, string(err.reason), err.msg, 0)
			}
		}
	}
	return cond(string(gatewayv1.RouteConditionResolvedRefs), true, string(gatewayv1.RouteReasonResolvedRefs), "", 0)
}

type refError struct {
	reason gatewayv1.RouteConditionReason
	msg    string
}

// checkBackend is nil when a backendRef resolves to a Service the route may use.
func checkBackend(w World, routeNS string, ref gatewayv1.BackendObjectReference) *refError {
	group, kind := deref(ref.Group, ""), deref(ref.Kind, kindService)
	if group != "" || kind != kindService {
		return &refError{gatewayv1.RouteReasonInvalidKind, fmt.Sprintf("backendRef %s/%s %q: only core Services are supported", group, kind, ref.Name)}
	}
	ns := string(deref(ref.Namespace, gatewayv1.Namespace(routeNS)))
	if ns != routeNS && !granted(w, routeNS, ns, string(ref.Name)) {
		return &refError{gatewayv1.RouteReasonRefNotPermitted, fmt.Sprintf("backendRef Service %s/%s: no ReferenceGrant in %q allows HTTPRoutes from %q", ns, ref.Name, ns, routeNS)}
	}
	if _, ok := w.Services[types.NamespacedName{Namespace: ns, Name: string(ref.Name)}]; !ok {
		return &refError{gatewayv1.RouteReasonBackendNotFound, fmt.Sprintf("backendRef Service %s/%s not found", ns, ref.Name)}
	}
	return nil
}

// granted reports whether a ReferenceGrant in toNS lets HTTPRoutes of fromNS
// refer to the Service name there.
func granted(w World, fromNS, toNS, name string) bool {
	for _, g := range w.Grants {
		if g.Namespace != toNS {
			continue
		}
		from := slices.ContainsFunc(g.Spec.From, func(f gatewayv1.ReferenceGrantFrom) bool {
			return f.Group == groupGateway && f.Kind == kindHTTP && string(f.Namespace) == fromNS
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
