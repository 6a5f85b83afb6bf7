package gateway

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// TCP listeners and TCPRoutes: a TCP data port reads nothing from the client.
// Each connection goes to one ready endpoint of a backend of the listener's
// route, the backend picked by weight, and the two connections are spliced
// until both sides are done (half closes passed on), as on a TLS passthrough
// port without the ClientHello.
//
// A TCPRoute goes through the rules as the HTTPRoute with its parents and
// backendRefs (tcpAsHTTP), so attachment (sectionName, port, allowedRoutes),
// ReferenceGrants (which must name TCPRoute) and ResolvedRefs are the
// HTTPRoute's. A TCP listener has no hostname and a TCPRoute no match, so
// nothing tells two routes on one listener apart: every route that attaches
// is Accepted and counts in the listener's attachedRoutes, but only the
// oldest (creationTimestamp, then "namespace/name") is served, as the
// spec's conflict rule says and the suite's TCPRouteMultipleRoutesAttachment
// checks. That is the port's Table asked for "/": its entries are in that
// order. A connection no route takes (no route, a backend that does not
// resolve, which rejects its share of connections by weight as
// TCPRouteRule's doc asks, no ready endpoint, a failed dial) is closed
// without a byte written.

const kindTCP = "TCPRoute"

// tcpAsHTTP is the HTTPRoute that routes what a TCPRoute does.
func tcpAsHTTP(t *gatewayv1.TCPRoute) *gatewayv1.HTTPRoute {
	rt := routeAsHTTP(kindTCP, t.ObjectMeta, t.Spec.CommonRouteSpec, nil)
	for _, r := range t.Spec.Rules {
		rt.Spec.Rules = append(rt.Spec.Rules, l4Rule(r.Name, r.BackendRefs))
	}
	return rt
}

// l4Rule is the HTTPRoute rule (matching everything) of a TLSRoute's,
// TCPRoute's or UDPRoute's rule: its name and backends.
func l4Rule(name *gatewayv1.SectionName, refs []gatewayv1.BackendRef) gatewayv1.HTTPRouteRule {
	hr := gatewayv1.HTTPRouteRule{Name: name}
	for _, b := range refs {
		hr.BackendRefs = append(hr.BackendRefs, gatewayv1.HTTPBackendRef{BackendRef: b})
	}
	return hr
}

// L4Endpoint is the "ip:port" of the endpoint a new TCP connection or UDP
// session on a TCP or UDP listener's data port goes to: the port's route (the
// oldest attached), a backend by weight, a ready endpoint of it; pick(n)
// chooses uniformly in [0, n).
func L4Endpoint(s *Snapshot, dataPort int32, pick func(int) int) (string, error) {
	t := s.Tables[dataPort]
	if t == nil {
		return "", fmt.Errorf("no listener is served on data port %d", dataPort)
	}
	act := t.Route(Request{Path: "/"})
	if act == nil {
		return "", fmt.Errorf("no route is attached to the listener of data port %d", dataPort)
	}
	return endpointOf(s, act, pick)
}

// endpointOf picks a backend of a matched rule by weight and one of its ready
// endpoints.
func endpointOf(s *Snapshot, act *Action, pick func(int) int) (string, error) {
	total := act.TotalWeight()
	if total == 0 {
		return "", fmt.Errorf("route %s has no backend with weight", act.Route)
	}
	b, ok := act.Pick(pick(total))
	if !ok {
		return "", fmt.Errorf("route %s: the backend picked is not valid", act.Route)
	}
	eps := s.Endpoints[b.Key()]
	if len(eps) == 0 {
		return "", fmt.Errorf("service %s port %d has no ready endpoint", b.Service, b.Port)
	}
	return eps[pick(len(eps))], nil
}

// serveTCP splices one connection of a TCP listener's data port to the
// endpoint its route picks; an error means the client was refused (the
// connection is closed without a reply).
func (l *passthroughListener) serveTCP(c net.Conn) error {
	defer c.Close()
	ep, err := L4Endpoint(l.load(), l.port, rand.IntN)
	if err != nil {
		return err
	}
	return l.spliceTo(c, ep, nil)
}

// spliceTo dials ep, writes first to it and splices c and it until both are
// done; c is the caller's to close.
func (l *passthroughListener) spliceTo(c net.Conn, ep string, first []byte) error {
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return errors.New("the data port is closed")
	}
	ctx, cancel := contextWithTimeout(dialTimeout)
	up, err := l.dial(ctx, "tcp", ep)
	cancel()
	if err != nil {
		return fmt.Errorf("dialing %s: %w", ep, err)
	}
	if !l.track(up) {
		up.Close()
		return errors.New("the data port is closed")
	}
	defer l.untrack(up)
	defer up.Close()
	if len(first) > 0 {
		if _, err := up.Write(first); err != nil {
			return fmt.Errorf("writing the client's first bytes to %s: %w", ep, err)
		}
	}
	splice(c, up)
	return nil
}
