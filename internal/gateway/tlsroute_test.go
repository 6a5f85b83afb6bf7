package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// clientHello is the first flight crypto/tls's client sends for serverName
// ("" sends no server_name extension): one handshake record.
func clientHello(t *testing.T, serverName string) []byte {
	t.Helper()
	c, s := net.Pipe()
	t.Cleanup(func() { c.Close(); s.Close() })
	go tls.Client(c, &tls.Config{ServerName: serverName, InsecureSkipVerify: true}).Handshake()
	var hdr [5]byte
	if _, err := io.ReadFull(s, hdr[:]); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint16(hdr[3:]))
	if _, err := io.ReadFull(s, body); err != nil {
		t.Fatal(err)
	}
	return append(hdr[:], body...)
}

// fragment re-splits a one-record handshake into records of at most n bytes.
func fragment(record []byte, n int) []byte {
	var out []byte
	for body := record[5:]; len(body) > 0; {
		k := min(n, len(body))
		out = append(out, record[0], record[1], record[2], byte(k>>8), byte(k))
		out = append(out, body[:k]...)
		body = body[k:]
	}
	return out
}

func TestReadClientHello(t *testing.T) {
	hello := clientHello(t, "abc.example.com")
	anonymous, byIP := clientHello(t, ""), clientHello(t, "192.0.2.1")
	tail := []byte("application data after the hello")
	for _, tc := range []struct {
		name    string
		in      io.Reader
		raw     []byte // what must be read (and replayed) on success; nil: hello
		sni     string
		wantErr string
	}{
		{name: "one record", in: bytes.NewReader(hello), sni: "abc.example.com"},
		{name: "one byte per read", in: iotest.OneByteReader(bytes.NewReader(hello)), sni: "abc.example.com"},
		{name: "fragmented over records of 7 bytes", in: bytes.NewReader(fragment(hello, 7)), raw: fragment(hello, 7), sni: "abc.example.com"},
		{name: "no server name", in: bytes.NewReader(anonymous), raw: anonymous, sni: ""},
		{name: "an IP is sent as no server name", in: bytes.NewReader(byIP), raw: byIP, sni: ""},
		{name: "stops at the end of the hello", in: bytes.NewReader(append(bytes.Clone(hello), tail...)), sni: "abc.example.com"},
		{name: "short: the connection ends inside the record", in: bytes.NewReader(hello[:len(hello)-10]), wantErr: "unexpected EOF"},
		{name: "short: a record header cut", in: bytes.NewReader(hello[:3]), wantErr: "unexpected EOF"},
		{name: "short: fragmented and cut between records", in: bytes.NewReader(fragment(hello, 40)[:45]), wantErr: "EOF"},
		{name: "empty connection", in: bytes.NewReader(nil), wantErr: "EOF"},
		{name: "plain HTTP", in: strings.NewReader("GET / HTTP/1.1\r\nHost: abc.example.com\r\n\r\n"), wantErr: "not a handshake"},
		{name: "a handshake that is not a ClientHello", in: bytes.NewReader([]byte{22, 3, 1, 0, 4, 2, 0, 0, 0}), wantErr: "not a ClientHello"},
		{name: "a ClientHello whose fields overrun it", in: bytes.NewReader([]byte{22, 3, 1, 0, 6, 1, 0, 0, 2, 3, 3}), wantErr: "truncated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, sni, err := ReadClientHello(tc.in)
			want := tc.raw
			if want == nil {
				want = hello
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || sni != tc.sni {
				t.Fatalf("server name %q, err %v; want %q", sni, err, tc.sni)
			}
			if !bytes.Equal(raw, want) {
				t.Errorf("read %d bytes, want exactly the %d of the hello's records", len(raw), len(want))
			}
		})
	}
}

func passthrough(name, host string, mode gatewayv1.TLSModeType, mod ...func(*gatewayv1.Listener)) gatewayv1.Listener {
	return listener(name, 443, gatewayv1.TLSProtocolType, host, append([]func(*gatewayv1.Listener){func(l *gatewayv1.Listener) {
		l.TLS = &gatewayv1.ListenerTLSConfig{Mode: &mode}
	}}, mod...)...)
}

func tlsRoute(name string, age int, hosts []string, parents []string, backends ...string) *gatewayv1.TLSRoute {
	rt := &gatewayv1.TLSRoute{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "infra", Generation: 5,
		CreationTimestamp: metav1.Unix(int64(1000-age), 0)}}
	for _, h := range hosts {
		rt.Spec.Hostnames = append(rt.Spec.Hostnames, gatewayv1.Hostname(h))
	}
	for _, p := range parents {
		gwName, section, _ := strings.Cut(p, "/")
		pr := gatewayv1.ParentReference{Name: gatewayv1.ObjectName(gwName)}
		if section != "" {
			pr.SectionName = ptr(gatewayv1.SectionName(section))
		}
		rt.Spec.ParentRefs = append(rt.Spec.ParentRefs, pr)
	}
	var rule gatewayv1.TLSRouteRule
	for _, b := range backends {
		ns, svc, ok := strings.Cut(b, "/")
		ref := gatewayv1.BackendRef{BackendObjectReference: gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(svc), Port: ptr(gatewayv1.PortNumber(8443))}}
		if !ok {
			ref.Name = gatewayv1.ObjectName(ns)
		} else {
			ref.Namespace = ptr(gatewayv1.Namespace(ns))
		}
		rule.BackendRefs = append(rule.BackendRefs, ref)
	}
	rt.Spec.Rules = []gatewayv1.TLSRouteRule{rule}
	return rt
}

// TLS listeners and TLSRoutes through the status rules, as the GATEWAY-TLS
// profile's tests check them.
func TestTLSListenerAndRouteStatus(t *testing.T) {
	gws := []*gatewayv1.Gateway{
		gw("pass", passthrough("tls", "*.example.com", gatewayv1.TLSModePassthrough)),
		gw("term", passthrough("tls-terminate", "terminate.example.com", gatewayv1.TLSModeTerminate)),
		gw("kinds", passthrough("tls", "", gatewayv1.TLSModePassthrough, kinds("TCPRoute", "TLSRoute"))),
		gw("http", listener("http", 80, gatewayv1.HTTPProtocolType, "")),
	}
	w := World{Gateways: gws, Namespaces: namespaces,
		TLSRoutes: []*gatewayv1.TLSRoute{
			tlsRoute("ok", 0, []string{"abc.example.com"}, []string{"pass"}, "tcp-backend"),
			tlsRoute("elsewhere", 0, []string{"abc.example.org"}, []string{"pass"}, "tcp-backend"),
			tlsRoute("on-http", 0, []string{"abc.example.com"}, []string{"http"}, "tcp-backend"),
			tlsRoute("no-section", 0, []string{"abc.example.com"}, []string{"pass/nope"}, "tcp-backend"),
			tlsRoute("missing", 0, []string{"abc.example.com"}, []string{"pass"}, "nothing"),
			tlsRoute("cross", 0, []string{"abc.example.com"}, []string{"pass"}, "web/tls-backend"),
		},
		Grants:   []*gatewayv1.ReferenceGrant{grant("web", "infra", "")}, // names HTTPRoute, not TLSRoute
		Services: services("infra/tcp-backend", "web/tls-backend"),
	}
	res := Compute(w)
	key := func(n string) types.NamespacedName { return types.NamespacedName{Namespace: "infra", Name: n} }

	ls := res.Listeners[key("pass")][0]
	if len(ls.SupportedKinds) != 1 || ls.SupportedKinds[0].Kind != kindTLS || ls.AttachedRoutes != 3 {
		t.Errorf("pass/tls: supportedKinds %v, attachedRoutes %d; want [TLSRoute] and 3 (ok, missing, cross)", ls.SupportedKinds, ls.AttachedRoutes)
	}
	for _, typ := range []string{"Accepted", "ResolvedRefs", "Programmed"} {
		if c := findCond(ls.Conditions, typ); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("pass/tls: %s %+v, want True", typ, c)
		}
	}
	if c := findCond(res.Listeners[key("term")][0].Conditions, "Accepted"); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "UnsupportedValue" {
		t.Errorf("term/tls-terminate: Accepted %+v, want False UnsupportedValue", c)
	}
	if k := res.Listeners[key("term")][0].SupportedKinds; len(k) != 0 {
		t.Errorf("term/tls-terminate: supportedKinds %v, want none", k)
	}
	kl := res.Listeners[key("kinds")][0]
	if c := findCond(kl.Conditions, "ResolvedRefs"); c == nil || c.Reason != "InvalidRouteKinds" || len(kl.SupportedKinds) != 1 || kl.SupportedKinds[0].Kind != kindTLS {
		t.Errorf("kinds/tls: ResolvedRefs %+v, supportedKinds %v; want InvalidRouteKinds and [TLSRoute]", c, kl.SupportedKinds)
	}
	for _, tc := range []struct{ route, accepted, resolved string }{
		{"ok", "Accepted", "ResolvedRefs"},
		{"elsewhere", "NoMatchingListenerHostname", "ResolvedRefs"},
		{"on-http", "NotAllowedByListeners", "ResolvedRefs"},
		{"no-section", "NoMatchingParent", "ResolvedRefs"},
		{"missing", "Accepted", "BackendNotFound"},
		{"cross", "Accepted", "RefNotPermitted"},
	} {
		ps := res.TLSParents[key(tc.route)]
		if len(ps) != 1 {
			t.Errorf("%s: parents %+v, want one", tc.route, ps)
			continue
		}
		if c := findCond(ps[0].Conditions, "Accepted"); c == nil || c.Reason != tc.accepted || c.ObservedGeneration != 5 {
			t.Errorf("%s: Accepted %+v, want reason %s at generation 5", tc.route, c, tc.accepted)
		}
		if c := findCond(ps[0].Conditions, "ResolvedRefs"); c == nil || c.Reason != tc.resolved {
			t.Errorf("%s: ResolvedRefs %+v, want reason %s", tc.route, c, tc.resolved)
		}
		if ps[0].ParentRef.Kind == nil || *ps[0].ParentRef.Kind != kindGateway {
			t.Errorf("%s: parentRef %+v, want kind Gateway spelled out", tc.route, ps[0].ParentRef)
		}
	}
	if len(res.Parents) != 0 || len(res.GRPCParents) != 0 {
		t.Errorf("TLSRoutes' status went to HTTPRoutes %v or GRPCRoutes %v", res.Parents, res.GRPCParents)
	}
	// A grant that names TLSRoute lets the cross-namespace backend resolve.
	w.Grants[0].Spec.From[0].Kind = kindTLS
	if c := findCond(Compute(w).TLSParents[key("cross")][0].Conditions, "ResolvedRefs"); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("cross with a TLSRoute grant: ResolvedRefs %+v, want True", c)
	}
}

// Which backend endpoint a server name is spliced to: the exact hostname,
// then the longest wildcard, then a route without hostnames; nothing for a
// name no route covers, and for no server name unless a route takes any.
func TestPassthroughEndpoint(t *testing.T) {
	svc := func(name, ip string) (types.NamespacedName, *corev1.Service, *discoveryv1.EndpointSlice) {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "infra"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "tls", Port: 8443}}}}
		es := &discoveryv1.EndpointSlice{Ports: []discoveryv1.EndpointPort{{Name: ptr("tls"), Port: ptr(int32(9443))}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}}}}
		return types.NamespacedName{Namespace: "infra", Name: name}, s, es
	}
	w := World{Services: map[types.NamespacedName]*corev1.Service{}}
	slices := map[types.NamespacedName][]*discoveryv1.EndpointSlice{}
	for name, ip := range map[string]string{"exact": "10.0.0.1", "wide": "10.0.0.2", "narrow": "10.0.0.3", "any": "10.0.0.4", "old": "10.0.0.5", "young": "10.0.0.6"} {
		k, s, es := svc(name, ip)
		w.Services[k], slices[k] = s, []*discoveryv1.EndpointSlice{es}
	}
	at := func(rt *gatewayv1.TLSRoute, hosts ...string) Attachment {
		return Attachment{Route: tlsAsHTTP(rt), Hostnames: hosts}
	}
	table, errs := BuildTable(w, []Attachment{
		at(tlsRoute("young", 1, nil, nil, "young"), "same.example.com"),
		at(tlsRoute("wide", 0, nil, nil, "wide"), "*.example.com"),
		at(tlsRoute("any", 0, nil, nil, "any")),
		at(tlsRoute("exact", 0, nil, nil, "exact"), "abc.example.com"),
		at(tlsRoute("narrow", 0, nil, nil, "narrow"), "*.b.example.com"),
		at(tlsRoute("old", 9, nil, nil, "old"), "same.example.com"),
		at(tlsRoute("gone", 0, nil, nil, "gone"), "gone.example.org"),
	})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	tables := map[int32]*Table{20443: table}
	snap := &Snapshot{Tables: tables, Passthrough: map[int32]bool{20443: true}, Endpoints: ResolveEndpoints(tables, w.Services, slices)}
	for _, tc := range []struct{ sni, want string }{
		{"abc.example.com", "10.0.0.1:9443"},
		{"ABC.Example.COM", "10.0.0.1:9443"},
		{"other.example.com", "10.0.0.2:9443"},
		{"a.b.example.com", "10.0.0.3:9443"},
		{"deep.a.b.example.com", "10.0.0.3:9443"},
		{"same.example.com", "10.0.0.5:9443"}, // two routes for one name: the older
		{"example.com", "10.0.0.4:9443"},      // a wildcard never covers its bare suffix
		{"", "10.0.0.4:9443"},
		{"gone.example.org", ""}, // its backend does not exist
	} {
		ep, err := PassthroughEndpoint(snap, 20443, tc.sni, func(int) int { return 0 })
		if tc.want == "" {
			if err == nil {
				t.Errorf("SNI %q: endpoint %s, want refused", tc.sni, ep)
			}
			continue
		}
		if err != nil || ep != tc.want {
			t.Errorf("SNI %q: endpoint %q, %v; want %s", tc.sni, ep, err, tc.want)
		}
	}
	noAny, _ := BuildTable(w, []Attachment{at(tlsRoute("exact", 0, nil, nil, "exact"), "abc.example.com")})
	snap.Tables = map[int32]*Table{20443: noAny}
	for _, sni := range []string{"", "non.matching.com"} {
		if ep, err := PassthroughEndpoint(snap, 20443, sni, func(int) int { return 0 }); err == nil {
			t.Errorf("SNI %q with only abc.example.com routed: endpoint %s, want refused", sni, ep)
		}
	}
}

// tlsBackend is a TLS server with a certificate for names that answers each
// connection with its name and the server name it was asked for.
func tlsBackend(t *testing.T, name string, names ...string) string {
	t.Helper()
	s := tlsSecret(t, "infra", name, names...)
	cert, err := parseTLSSecret(s)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{*cert}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := c.(*tls.Conn)
				if tc.Handshake() != nil {
					return
				}
				line, _ := bufio.NewReader(c).ReadString('\n')
				fmt.Fprintf(c, "%s sni=%s got=%s", name, tc.ConnectionState().ServerName, line)
			}()
		}
	}()
	return ln.Addr().String()
}

// The data port end to end on loopback: a client's TLS session reaches, not
// terminated, the backend its server name routes to; a name no route covers
// has its connection closed during the handshake.
func TestSplitPassthrough(t *testing.T) {
	addrs := map[string]string{"a": tlsBackend(t, "a", "abc.example.com"), "b": tlsBackend(t, "b", "*.example.com")}
	svcs := map[types.NamespacedName]*corev1.Service{}
	slices := map[types.NamespacedName][]*discoveryv1.EndpointSlice{}
	for name, addr := range addrs {
		host, port, _ := net.SplitHostPort(addr)
		var p int32
		fmt.Sscan(port, &p)
		k := types.NamespacedName{Namespace: "infra", Name: name}
		svcs[k] = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "infra"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "tls", Port: 8443}}}}
		slices[k] = []*discoveryv1.EndpointSlice{{Ports: []discoveryv1.EndpointPort{{Name: ptr("tls"), Port: &p}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}}}}}
	}
	w := World{Services: svcs}
	table, _ := BuildTable(w, []Attachment{
		{Route: tlsAsHTTP(tlsRoute("a", 0, nil, nil, "a")), Hostnames: []string{"abc.example.com"}},
		{Route: tlsAsHTTP(tlsRoute("b", 0, nil, nil, "b")), Hostnames: []string{"*.example.com"}},
	})
	tables := map[int32]*Table{20443: table}
	var snap atomic.Pointer[Snapshot]
	snap.Store(&Snapshot{Tables: tables, Passthrough: map[int32]bool{20443: true}, Endpoints: ResolveEndpoints(tables, svcs, slices)})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := SplitPassthrough(inner, 20443, snap.Load, nil, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept() // returns only when it is closed: every connection is spliced
		if err == nil {
			c.Close()
			err = errors.New("a connection was handed on from a passthrough port")
		}
		accepted <- err
	}()
	for _, tc := range []struct{ sni, want string }{{"abc.example.com", "a"}, {"other.example.com", "b"}} {
		c, err := tls.Dial("tcp", inner.Addr().String(), &tls.Config{ServerName: tc.sni, InsecureSkipVerify: true})
		if err != nil {
			t.Fatalf("SNI %s: %v", tc.sni, err)
		}
		fmt.Fprintf(c, "hello\n")
		reply, err := io.ReadAll(c)
		c.Close()
		if want := tc.want + " sni=" + tc.sni + " got=hello\n"; err != nil || string(reply) != want {
			t.Errorf("SNI %s: reply %q, %v; want %q", tc.sni, reply, err, want)
		}
	}
	_, err = tls.Dial("tcp", inner.Addr().String(), &tls.Config{ServerName: "non.matching.com", InsecureSkipVerify: true})
	if !errors.Is(err, io.EOF) {
		t.Errorf("SNI non.matching.com: handshake error %v, want EOF (the connection closed)", err)
	}
	ln.Close()
	if err := <-accepted; !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept returned %v, want the listener closed", err)
	}
}
