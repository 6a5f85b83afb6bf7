package gateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// selfSigned is a PEM certificate and key for names (the first is the
// subject's common name).
func selfSigned(t *testing.T, names ...string) (crt, key []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
}

func tlsSecret(t *testing.T, ns, name string, names ...string) *corev1.Secret {
	crt, key := selfSigned(t, names...)
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key}}
}

func https(name, host string, refs ...gatewayv1.SecretObjectReference) gatewayv1.Listener {
	return listener(name, 443, gatewayv1.HTTPSProtocolType, host, func(l *gatewayv1.Listener) {
		l.TLS = &gatewayv1.ListenerTLSConfig{CertificateRefs: refs}
	})
}

func secretRef(ns, name string) gatewayv1.SecretObjectReference {
	r := gatewayv1.SecretObjectReference{Name: gatewayv1.ObjectName(name)}
	if ns != "" {
		r.Namespace = ptr(gatewayv1.Namespace(ns))
	}
	return r
}

func secretGrant(ns string, from gatewayv1.ReferenceGrantFrom, to gatewayv1.ReferenceGrantTo) *gatewayv1.ReferenceGrant {
	return &gatewayv1.ReferenceGrant{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: ns},
		Spec: gatewayv1.ReferenceGrantSpec{From: []gatewayv1.ReferenceGrantFrom{from}, To: []gatewayv1.ReferenceGrantTo{to}}}
}

// An HTTPS listener's ResolvedRefs for each way its certificateRef can be
// good or bad, and what the Gateway, Programmed and the data plane make of it.
func TestHTTPSListenerConditions(t *testing.T) {
	good := tlsSecret(t, "infra", "cert", "*.example.test")
	other := tlsSecret(t, "web", "cert", "*.example.test")
	opaque := good.DeepCopy()
	opaque.Name, opaque.Type = "opaque", corev1.SecretTypeOpaque
	malformed := good.DeepCopy()
	malformed.Name = "malformed"
	malformed.Data = map[string][]byte{corev1.TLSCertKey: []byte("Hello world\n"), corev1.TLSPrivateKeyKey: []byte("Hello world\n")}
	mismatched := good.DeepCopy()
	mismatched.Name = "mismatched"
	mismatched.Data[corev1.TLSPrivateKeyKey] = tlsSecret(t, "infra", "x", "x.test").Data[corev1.TLSPrivateKeyKey]
	secrets := map[types.NamespacedName]*corev1.Secret{}
	for _, s := range []*corev1.Secret{good, other, opaque, malformed, mismatched} {
		secrets[types.NamespacedName{Namespace: s.Namespace, Name: s.Name}] = s
	}
	fromGW := gatewayv1.ReferenceGrantFrom{Group: groupGateway, Kind: kindGateway, Namespace: "infra"}
	toSecret := gatewayv1.ReferenceGrantTo{Group: "", Kind: kindSecret}
	toCert := gatewayv1.ReferenceGrantTo{Group: "", Kind: kindSecret, Name: ptr(gatewayv1.ObjectName("cert"))}
	wrongRef := secretRef("", "cert")
	wrongRef.Group = ptr(gatewayv1.Group("wrong.group.test"))
	wrongKind := secretRef("", "cert")
	wrongKind.Kind = ptr(gatewayv1.Kind("WrongKind"))
	passthrough := https("https", "", secretRef("", "cert"))
	passthrough.TLS.Mode = ptr(gatewayv1.TLSModePassthrough)
	for _, tc := range []struct {
		name     string
		listener gatewayv1.Listener
		grants   []*gatewayv1.ReferenceGrant
		accepted string // "True" or the reason of False
		resolved string // "True" or the reason of False
	}{
		{"a Secret in the Gateway's namespace", https("https", "", secretRef("", "cert")), nil, "True", "True"},
		{"the namespace spelled out", https("https", "", secretRef("infra", "cert")), nil, "True", "True"},
		{"a missing Secret", https("https", "", secretRef("", "nonexistent")), nil, "True", "InvalidCertificateRef"},
		{"a malformed pair", https("https", "", secretRef("", "malformed")), nil, "True", "InvalidCertificateRef"},
		{"a key of another certificate", https("https", "", secretRef("", "mismatched")), nil, "True", "InvalidCertificateRef"},
		{"a Secret not of type kubernetes.io/tls", https("https", "", secretRef("", "opaque")), nil, "True", "InvalidCertificateRef"},
		{"another group", https("https", "", wrongRef), nil, "True", "InvalidCertificateRef"},
		{"another kind", https("https", "", wrongKind), nil, "True", "InvalidCertificateRef"},
		{"no certificateRefs", https("https", ""), nil, "True", "InvalidCertificateRef"},
		{"tls.mode Passthrough", passthrough, nil, "UnsupportedValue", "True"},
		{"another namespace, no ReferenceGrant", https("https", "", secretRef("web", "cert")), nil, "True", "RefNotPermitted"},
		{"a ReferenceGrant for every Secret", https("https", "", secretRef("web", "cert")),
			[]*gatewayv1.ReferenceGrant{secretGrant("web", fromGW, toSecret)}, "True", "True"},
		{"a ReferenceGrant for this Secret", https("https", "", secretRef("web", "cert")),
			[]*gatewayv1.ReferenceGrant{secretGrant("web", fromGW, toCert)}, "True", "True"},
		{"a ReferenceGrant in another namespace", https("https", "", secretRef("web", "cert")),
			[]*gatewayv1.ReferenceGrant{secretGrant("app", fromGW, toCert)}, "True", "RefNotPermitted"},
		{"a ReferenceGrant from HTTPRoutes", https("https", "", secretRef("web", "cert")),
			[]*gatewayv1.ReferenceGrant{secretGrant("web", gatewayv1.ReferenceGrantFrom{Group: groupGateway, Kind: kindHTTP, Namespace: "infra"}, toCert)},
			"True", "RefNotPermitted"},
		{"a ReferenceGrant from another namespace", https("https", "", secretRef("web", "cert")),
			[]*gatewayv1.ReferenceGrant{secretGrant("web", gatewayv1.ReferenceGrantFrom{Group: groupGateway, Kind: kindGateway, Namespace: "app"}, toCert)},
			"True", "RefNotPermitted"},
		{"a ReferenceGrant to Services", https("https", "", secretRef("web", "cert")),
			[]*gatewayv1.ReferenceGrant{secretGrant("web", fromGW, gatewayv1.ReferenceGrantTo{Kind: kindService})}, "True", "RefNotPermitted"},
		{"a ReferenceGrant to another Secret", https("https", "", secretRef("web", "cert")),
			[]*gatewayv1.ReferenceGrant{secretGrant("web", fromGW, gatewayv1.ReferenceGrantTo{Kind: kindSecret, Name: ptr(gatewayv1.ObjectName("other"))})},
			"True", "RefNotPermitted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Beside the HTTPS listener, a valid HTTP one: the Gateway stays
			// Accepted (ListenersNotValid when the HTTPS one is not) and
			// the data plane keeps it.
			g := gw("g", listener("http", 80, gatewayv1.HTTPProtocolType, ""), tc.listener)
			rt := route("infra", nil, []parent{{name: "g"}})
			r := Compute(World{Gateways: []*gatewayv1.Gateway{g}, HTTPRoutes: []*gatewayv1.HTTPRoute{rt}, Grants: tc.grants, Secrets: secrets,
				Namespaces: namespaces})
			key := types.NamespacedName{Namespace: "infra", Name: "g"}
			l := r.Listeners[key][1]
			state := func(typ string) string {
				c := findCond(l.Conditions, typ)
				if c == nil {
					t.Fatalf("no %s condition", typ)
				}
				if c.Status == metav1.ConditionTrue {
					return "True"
				}
				return c.Reason
			}
			if got := state("Accepted"); got != tc.accepted {
				t.Errorf("Accepted = %s, want %s", got, tc.accepted)
			}
			if got := state("ResolvedRefs"); got != tc.resolved {
				t.Errorf("ResolvedRefs = %s, want %s (%s)", got, tc.resolved, findCond(l.Conditions, "ResolvedRefs").Message)
			}
			valid := tc.accepted == "True" && tc.resolved == "True"
			want := map[bool]string{true: "True", false: "Invalid"}[valid]
			if got := state("Programmed"); got != want {
				t.Errorf("Programmed = %s, want %s", got, want)
			}
			wantGW := map[bool]string{true: "Accepted", false: "ListenersNotValid"}[valid]
			if a := r.Accepted[key]; a.Status != metav1.ConditionTrue || a.Reason != wantGW {
				t.Errorf("Gateway Accepted = %s/%s, want True/%s", a.Status, a.Reason, wantGW)
			}
			if !valid {
				if c := findCond(l.Conditions, "ResolvedRefs"); c.Status == metav1.ConditionFalse && !strings.Contains(c.Message, "tls.certificateRefs") {
					t.Errorf("ResolvedRefs message %q does not name the field", c.Message)
				}
			}
			// The route counts on both listeners whatever their validity (a
			// Passthrough HTTPS listener still allows HTTPRoutes); only valid
			// listeners are served, and only they have certificates.
			if l.AttachedRoutes != 1 || r.Listeners[key][0].AttachedRoutes != 1 {
				t.Errorf("attachedRoutes = %d and %d, want 1 and 1", r.Listeners[key][0].AttachedRoutes, l.AttachedRoutes)
			}
			https := ListenerKey{key, tc.listener.Name}
			if served := len(r.Attached[https]) == 1; served != valid {
				t.Errorf("HTTPS listener served = %v, want %v", served, valid)
			}
			if len(r.Attached[ListenerKey{key, "http"}]) != 1 {
				t.Errorf("the HTTP listener is not served")
			}
			if hasCert := len(r.Certificates[https]) == 1; hasCert != valid {
				t.Errorf("certificates %v, want them only when valid", r.Certificates[https])
			}
		})
	}
}

// HTTP and HTTPS listeners on one port conflict: one data port terminates
// TLS or does not.
func TestProtocolConflict(t *testing.T) {
	s := tlsSecret(t, "infra", "cert", "x.test")
	g := gw("g", listener("http", 443, gatewayv1.HTTPProtocolType, "a.test"), https("https", "b.test", secretRef("", "cert")))
	r := Compute(World{Gateways: []*gatewayv1.Gateway{g}, Secrets: map[types.NamespacedName]*corev1.Secret{{Namespace: "infra", Name: "cert"}: s}})
	for _, l := range r.Listeners[types.NamespacedName{Namespace: "infra", Name: "g"}] {
		if c := findCond(l.Conditions, "Conflicted"); c.Status != metav1.ConditionTrue || c.Reason != "ProtocolConflict" {
			t.Errorf("listener %s Conflicted = %s/%s, want True/ProtocolConflict", l.Name, c.Status, c.Reason)
		}
	}
}

func TestPickCertificate(t *testing.T) {
	exact, wild, deep, any := &tls.Certificate{}, &tls.Certificate{}, &tls.Certificate{}, &tls.Certificate{}
	named := map[*tls.Certificate]string{exact: "exact", wild: "wildcard", deep: "longer wildcard", any: "no hostname", nil: "none"}
	all := []ServerCert{{Hostname: "*.example.test", Certs: []*tls.Certificate{wild}}, {Hostname: "", Certs: []*tls.Certificate{any}},
		{Hostname: "www.example.test", Certs: []*tls.Certificate{exact}}, {Hostname: "*.api.example.test", Certs: []*tls.Certificate{deep}}}
	hostnamesOnly := []ServerCert{all[0], all[2]}
	for _, tc := range []struct {
		certs []ServerCert
		sni   string
		want  *tls.Certificate
	}{
		{all, "www.example.test", exact},
		{all, "WWW.Example.Test", exact},
		{all, "shop.example.test", wild},
		{all, "a.b.example.test", wild}, // a wildcard covers one or more labels
		{all, "v1.api.example.test", deep},
		{all, "example.test", any}, // never the bare suffix
		{all, "other.test", any},
		{all, "", any},
		{hostnamesOnly, "other.test", nil},
		{hostnamesOnly, "", nil},
		{[]ServerCert{{Hostname: "www.example.test"}}, "www.example.test", nil}, // the listener is not valid: no certificate
	} {
		got := PickCertificate(tc.certs, &tls.ClientHelloInfo{ServerName: tc.sni})
		if got != tc.want {
			t.Errorf("SNI %q: got %s, want %s", tc.sni, named[got], named[tc.want])
		}
	}
}

// A data port of HTTPS listeners on loopback: the ClientHello's server name
// picks the listener's certificate, the request is routed after
// termination, a certificate swapped into the snapshot is served on the
// next connection, and a name no listener covers fails the handshake.
func TestTerminateTLS(t *testing.T) {
	a := echo(t, "a")
	svcA, esA := svcWithSlice("a", a)
	rt := httpRoute("r", 0, nil, rrule{matches: []gatewayv1.HTTPRouteMatch{prefix("/")}, backends: []string{"a"}})
	rt.Spec.Rules[0].BackendRefs[0].Port = ptr(gatewayv1.PortNumber(8080))
	w := World{Services: map[types.NamespacedName]*corev1.Service{{Namespace: "default", Name: "a"}: svcA}}
	table, errs := BuildTable(w, []Attachment{{Route: rt, Hostnames: []string{"www.example.test"}}, {Route: rt, Hostnames: []string{"*.wild.test"}}})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	pair := func(names ...string) []*tls.Certificate {
		s := tlsSecret(t, "default", "c", names...)
		c, err := parseTLSSecret(s)
		if err != nil {
			t.Fatal(err)
		}
		return []*tls.Certificate{c}
	}
	snapshot := func(www []*tls.Certificate) *Snapshot {
		return &Snapshot{Tables: map[int32]*Table{20443: table}, Ports: map[int32]int32{20443: 443},
			TLS: map[int32][]ServerCert{20443: {{Hostname: "www.example.test", Certs: www}, {Hostname: "*.wild.test", Certs: pair("*.wild.test")}}},
			Endpoints: ResolveEndpoints(map[int32]*Table{20443: table}, w.Services,
				map[types.NamespacedName][]*discoveryv1.EndpointSlice{{Namespace: "default", Name: "a"}: {esA}})}
	}
	var snap atomic.Pointer[Snapshot]
	snap.Store(snapshot(pair("www.example.test")))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: Handler(20443, snap.Load, nil), ErrorLog: log.New(io.Discard, "", 0)}
	go srv.Serve(TerminateTLS(ln, 20443, snap.Load))
	t.Cleanup(func() { srv.Close() })

	get := func(sni string) (peer string, body string, err error) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{ServerName: sni, InsecureSkipVerify: true}, DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest("GET", "https://"+ln.Addr().String()+"/tea", nil)
		req.Host = sni
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			return "", "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.TLS.PeerCertificates[0].Subject.CommonName, string(b), nil
	}
	for _, tc := range []struct{ sni, cert string }{{"www.example.test", "www.example.test"}, {"tea.wild.test", "*.wild.test"}} {
		peer, body, err := get(tc.sni)
		if err != nil {
			t.Fatalf("SNI %s: %v", tc.sni, err)
		}
		if peer != tc.cert || !strings.HasPrefix(body, "a host="+tc.sni+" uri=/tea") {
			t.Errorf("SNI %s: certificate %s, reply %q; want certificate %s and backend a", tc.sni, peer, body, tc.cert)
		}
	}
	if _, _, err := get("other.test"); err == nil {
		t.Errorf("SNI other.test: handshake succeeded, want it to fail (no listener covers it)")
	}
	snap.Store(snapshot(pair("renewed.example.test")))
	if peer, _, err := get("www.example.test"); err != nil || peer != "renewed.example.test" {
		t.Errorf("after the Secret changed: certificate %q, %v; want the renewed one", peer, err)
	}
}
