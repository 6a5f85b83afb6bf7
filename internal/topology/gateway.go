package topology

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/minikit/minikit/internal/trace"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
)

// gatewayState is what the collector reads of the Gateway API.
type gatewayState struct {
	gateways []gatewayv1.Gateway
	http     []gatewayv1.HTTPRoute
	grpc     []gatewayv1.GRPCRoute
	tls      []gatewayv1.TLSRoute
}

// absent says a list failed because the resource is not served: the
// Gateway API's CRDs are not installed (or not this kind's).
func absent(err error) bool {
	return apierrors.IsNotFound(err) || meta.IsNoMatchError(err)
}

// readGateways lists the Gateway API's objects; a kind whose CRD is not
// installed is none of it.
func readGateways(ctx context.Context, gw gwclient.Interface, labName string) (gatewayState, error) {
	var s gatewayState
	if gw == nil {
		return s, nil
	}
	v1 := gw.GatewayV1()
	gl, err := v1.Gateways("").List(ctx, metav1.ListOptions{})
	if absent(err) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("reading lab %q: listing gateways: %w", labName, err)
	}
	s.gateways = gl.Items
	hl, err := v1.HTTPRoutes("").List(ctx, metav1.ListOptions{})
	if err != nil && !absent(err) {
		return s, fmt.Errorf("reading lab %q: listing httproutes: %w", labName, err)
	}
	if err == nil {
		s.http = hl.Items
	}
	rl, err := v1.GRPCRoutes("").List(ctx, metav1.ListOptions{})
	if err != nil && !absent(err) {
		return s, fmt.Errorf("reading lab %q: listing grpcroutes: %w", labName, err)
	}
	if err == nil {
		s.grpc = rl.Items
	}
	tl, err := v1.TLSRoutes("").List(ctx, metav1.ListOptions{})
	if err != nil && !absent(err) {
		return s, fmt.Errorf("reading lab %q: listing tlsroutes: %w", labName, err)
	}
	if err == nil {
		s.tls = tl.Items
	}
	return s, nil
}

// gateways turns the Gateways into the model, sorted by ID.
func gateways(s gatewayState) []Gateway {
	out := []Gateway{}
	for _, g := range s.gateways {
		m := Gateway{ID: "gw:" + g.Namespace + "/" + g.Name, Namespace: g.Namespace, Name: g.Name, Class: string(g.Spec.GatewayClassName), Listeners: []GatewayListener{}}
		for _, a := range g.Status.Addresses {
			m.Addresses = append(m.Addresses, a.Value)
		}
		m.Programmed, _ = trace.Condition(g.Status.Conditions, string(gatewayv1.GatewayConditionProgrammed))
		attached := map[string]int32{}
		for _, ls := range g.Status.Listeners {
			attached[string(ls.Name)] = ls.AttachedRoutes
		}
		for _, l := range g.Spec.Listeners {
			gl := GatewayListener{Name: string(l.Name), Protocol: string(l.Protocol), Port: int32(l.Port), AttachedRoutes: attached[string(l.Name)]}
			if l.Hostname != nil {
				gl.Hostname = string(*l.Hostname)
			}
			m.Listeners = append(m.Listeners, gl)
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// gatewayRoutes turns the routes into the model, sorted by ID.
func gatewayRoutes(s gatewayState) []GatewayRoute {
	out := []GatewayRoute{}
	for _, r := range s.http {
		m := newRoute("HTTPRoute", r.ObjectMeta, r.Spec.CommonRouteSpec, r.Spec.Hostnames, r.Status.RouteStatus)
		for _, rule := range r.Spec.Rules {
			rr := RouteRule{Name: sectionName(rule.Name), Backends: []RouteBackend{}}
			for _, mt := range rule.Matches {
				rr.Matches = append(rr.Matches, trace.HTTPMatch(mt))
			}
			for _, b := range rule.BackendRefs {
				rr.Backends = append(rr.Backends, backend(r.Namespace, b.BackendRef))
			}
			m.Rules = append(m.Rules, rr)
		}
		out = append(out, m)
	}
	for _, r := range s.grpc {
		m := newRoute("GRPCRoute", r.ObjectMeta, r.Spec.CommonRouteSpec, r.Spec.Hostnames, r.Status.RouteStatus)
		for _, rule := range r.Spec.Rules {
			rr := RouteRule{Name: sectionName(rule.Name), Backends: []RouteBackend{}}
			for _, mt := range rule.Matches {
				rr.Matches = append(rr.Matches, trace.GRPCMatch(mt))
			}
			for _, b := range rule.BackendRefs {
				rr.Backends = append(rr.Backends, backend(r.Namespace, b.BackendRef))
			}
			m.Rules = append(m.Rules, rr)
		}
		out = append(out, m)
	}
	for _, r := range s.tls {
		m := newRoute("TLSRoute", r.ObjectMeta, r.Spec.CommonRouteSpec, r.Spec.Hostnames, r.Status.RouteStatus)
		for _, rule := range r.Spec.Rules {
			rr := RouteRule{Name: sectionName(rule.Name), Backends: []RouteBackend{}}
			for _, b := range rule.BackendRefs {
				rr.Backends = append(rr.Backends, backend(r.Namespace, b))
			}
			m.Rules = append(m.Rules, rr)
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func sectionName(n *gatewayv1.SectionName) string {
	if n == nil {
		return ""
	}
	return string(*n)
}

func newRoute(kind string, om metav1.ObjectMeta, spec gatewayv1.CommonRouteSpec, hosts []gatewayv1.Hostname, st gatewayv1.RouteStatus) GatewayRoute {
	m := GatewayRoute{ID: strings.ToLower(kind) + ":" + om.Namespace + "/" + om.Name, Kind: kind, Namespace: om.Namespace, Name: om.Name,
		Parents: []RouteParent{}, Rules: []RouteRule{}}
	for _, h := range hosts {
		m.Hostnames = append(m.Hostnames, string(h))
	}
	for _, p := range spec.ParentRefs {
		if (p.Group != nil && *p.Group != gatewayv1.GroupName) || (p.Kind != nil && *p.Kind != "Gateway") {
			continue // a parent that is no Gateway: none of minikit's
		}
		ns := om.Namespace
		if p.Namespace != nil {
			ns = string(*p.Namespace)
		}
		rp := RouteParent{Gateway: "gw:" + ns + "/" + string(p.Name), SectionName: sectionName(p.SectionName)}
		if p.Port != nil {
			rp.Port = int32(*p.Port)
		}
		for _, ps := range st.Parents {
			if !sameParent(ps.ParentRef, p, om.Namespace) {
				continue
			}
			var ar, rr string
			rp.Accepted, ar = trace.Condition(ps.Conditions, string(gatewayv1.RouteConditionAccepted))
			rp.ResolvedRefs, rr = trace.Condition(ps.Conditions, string(gatewayv1.RouteConditionResolvedRefs))
			switch {
			case rp.Accepted != "" && rp.Accepted != "True":
				rp.Reason = ar
			case rp.ResolvedRefs != "" && rp.ResolvedRefs != "True":
				rp.Reason = rr
			}
		}
		m.Parents = append(m.Parents, rp)
	}
	return m
}

// sameParent says a status.parents entry is about the parentRef p.
func sameParent(a, p gatewayv1.ParentReference, routeNS string) bool {
	ns := func(n *gatewayv1.Namespace) string {
		if n == nil {
			return routeNS
		}
		return string(*n)
	}
	port := func(p *gatewayv1.PortNumber) int32 {
		if p == nil {
			return 0
		}
		return int32(*p)
	}
	return a.Name == p.Name && ns(a.Namespace) == ns(p.Namespace) && sectionName(a.SectionName) == sectionName(p.SectionName) && port(a.Port) == port(p.Port)
}

func backend(routeNS string, b gatewayv1.BackendRef) RouteBackend {
	ns := routeNS
	if b.Namespace != nil {
		ns = string(*b.Namespace)
	}
	out := RouteBackend{Service: "svc:" + ns + "/" + string(b.Name), Weight: 1}
	if b.Port != nil {
		out.Port = int32(*b.Port)
	}
	if b.Weight != nil {
		out.Weight = *b.Weight
	}
	group, kind := "", "Service"
	if b.Group != nil {
		group = string(*b.Group)
	}
	if b.Kind != nil {
		kind = string(*b.Kind)
	}
	if group != "" || kind != "Service" {
		out.Kind = strings.TrimPrefix(group+"/"+kind, "/")
		out.Service = strings.ToLower(kind) + ":" + ns + "/" + string(b.Name)
	}
	return out
}

// gatewayLines are a Gateway's lines in the side column and the dot and
// Mermaid legends: the Gateway, its listeners, and every route attached
// to it with its rules.
func gatewayLines(g Gateway, routes []GatewayRoute) []string {
	head := g.Namespace + "/" + g.Name + " (Gateway " + g.Class + ")"
	if len(g.Addresses) > 0 {
		head += " " + strings.Join(g.Addresses, " ")
	}
	if g.Programmed != "" && g.Programmed != "True" {
		head += " not Programmed"
	}
	out := []string{head}
	for _, l := range g.Listeners {
		t := fmt.Sprintf("  listener %s %s/%d", l.Name, l.Protocol, l.Port)
		if l.Hostname != "" {
			t += " " + l.Hostname
		}
		out = append(out, t+fmt.Sprintf(" (%d routes)", l.AttachedRoutes))
	}
	for _, r := range routes {
		for _, p := range r.Parents {
			if p.Gateway != g.ID {
				continue
			}
			out = append(out, routeLines(r, p)...)
		}
	}
	return out
}

// routeLines are a route's lines under the Gateway of parent p.
func routeLines(r GatewayRoute, p RouteParent) []string {
	t := "  " + r.Kind + " " + r.Namespace + "/" + r.Name
	if p.SectionName != "" {
		t += " on " + p.SectionName
	}
	if p.Port != 0 {
		t += " port " + strconv.Itoa(int(p.Port))
	}
	if len(r.Hostnames) > 0 {
		t += " " + strings.Join(r.Hostnames, ",")
	}
	switch {
	case p.Accepted == "":
		t += " (no status)"
	case p.Accepted != "True":
		t += " (not Accepted: " + p.Reason + ")"
	case p.ResolvedRefs != "" && p.ResolvedRefs != "True":
		t += " (refs unresolved: " + p.Reason + ")"
	}
	out := []string{t}
	for _, rule := range r.Rules {
		m := strings.Join(rule.Matches, " | ")
		if m == "" && r.Kind != "TLSRoute" {
			m = "/"
		}
		var bs []string
		for _, b := range rule.Backends {
			s := strings.TrimPrefix(b.Service, "svc:")
			if b.Port != 0 {
				s += ":" + strconv.Itoa(int(b.Port))
			}
			if len(rule.Backends) > 1 || b.Weight != 1 {
				s += fmt.Sprintf(" w%d", b.Weight)
			}
			bs = append(bs, s)
		}
		if len(bs) == 0 {
			bs = []string{"(no backends)"}
		}
		line := "    "
		if m != "" {
			line += m + " "
		}
		out = append(out, line+"→ "+strings.Join(bs, ", "))
	}
	return out
}
