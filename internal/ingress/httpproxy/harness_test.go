package httpproxy

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/testutil"

	"github.com/minikit/minikit/internal/ingress/config"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// backendServer is a pod stand-in on 127.0.0.1: it answers with its name and
// what it received, and counts the connections it accepted.
type backendServer struct {
	name    string
	addr    string
	srv     *http.Server
	conns   atomic.Int64
	lastReq atomic.Pointer[http.Request]
}

func startBackend(t testing.TB, name string, h http.HandlerFunc) *backendServer {
	t.Helper()
	return startBackendWith(t, name, h, nil)
}

func startBackendWith(t testing.TB, name string, h http.HandlerFunc, configure func(*http.Server)) *backendServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backendServer{name: name, addr: ln.Addr().String()}
	if h == nil {
		h = b.echo
	}
	b.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.lastReq.Store(r)
		h(w, r)
	}), ConnState: func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			b.conns.Add(1)
		}
	}, ErrorLog: nil}
	if configure != nil {
		configure(b.srv)
	}
	go b.srv.Serve(ln)
	t.Cleanup(func() { b.srv.Close() })
	return b
}

// echo answers like nginxdemos/hello's plain text, plus the headers it got.
func (b *backendServer) echo(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("X-Backend", b.name)
	fmt.Fprintf(w, "Server name: %s\nURI: %s\nMethod: %s\nProto: %s\nBody-Length: %d\n", b.name, r.RequestURI, r.Method, r.Proto, len(body))
	for _, k := range []string{"Host", "X-Forwarded-For", "X-Real-IP", "X-Forwarded-Host", "X-Forwarded-Port", "X-Forwarded-Proto",
		"X-Forwarded-Scheme", "X-Scheme", "X-Request-Id", "X-Original-Forwarded-For", "Proxy", "Connection", "X-Custom", "Te", "Upgrade"} {
		v := r.Header.Get(k)
		if k == "Host" {
			v = r.Host
		}
		fmt.Fprintf(w, "%s: %s\n", k, v)
	}
}

// field reads "Key: value" from an echo body.
func field(body, key string) string {
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, key+": "); ok {
			return v
		}
	}
	return ""
}

// objects builds the API objects of a cluster whose Services are backed by
// backendServers (one EndpointSlice each, as their ports differ).
type objects struct {
	in config.Input
}

func newObjects() *objects {
	o := &objects{}
	o.in.Class = config.DefaultClass
	o.in.IngressClasses = []*networkingv1.IngressClass{{
		ObjectMeta: metav1.ObjectMeta{Name: "nginx", Annotations: map[string]string{networkingv1.AnnotationIsDefaultIngressClass: "true"}},
		Spec:       networkingv1.IngressClassSpec{Controller: "k8s.io/ingress-nginx"},
	}}
	return o
}

func ptr[T any](v T) *T { return &v }

func (o *objects) service(name string, bs ...*backendServer) {
	o.in.Services = append(o.in.Services, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	})
	for i, b := range bs {
		host, port, _ := net.SplitHostPort(b.addr)
		p, _ := strconv.Atoi(port)
		o.in.EndpointSlices = append(o.in.EndpointSlices, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("%s-%d", name, i), Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(p))}},
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}}},
		})
	}
}

// deadAddr is a loopback address where nothing listens.
func deadAddr(t testing.TB) *backendServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return &backendServer{name: "dead", addr: addr}
}

type route struct {
	path string
	typ  networkingv1.PathType
	svc  string
}

func (o *objects) ingress(name, host string, annotations map[string]string, routes ...route) *networkingv1.Ingress {
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Annotations: annotations,
		CreationTimestamp: metav1.NewTime(time.Unix(1_700_000_000+int64(len(o.in.Ingresses)), 0))}}
	rule := networkingv1.IngressRule{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{}}}
	for _, r := range routes {
		typ := r.typ
		if typ == "" {
			typ = networkingv1.PathTypePrefix
		}
		rule.HTTP.Paths = append(rule.HTTP.Paths, networkingv1.HTTPIngressPath{Path: r.path, PathType: ptr(typ),
			Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{Name: r.svc, Port: networkingv1.ServiceBackendPort{Number: 80}}}})
	}
	ing.Spec.Rules = []networkingv1.IngressRule{rule}
	o.in.Ingresses = append(o.in.Ingresses, ing)
	return ing
}

func (o *objects) build(t testing.TB) *config.Config {
	c := config.Build(o.in)
	for _, p := range c.Problems {
		t.Logf("config problem: %s", p)
	}
	return c
}

// running is a proxy listening on loopback for HTTP and HTTPS.
type running struct {
	p          *Proxy
	http, tls  string // addresses
	httpClient *http.Client
}

func startProxy(t testing.TB, cfg *config.Config, opts Config) *running {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testutil.Logger(t)
	}
	opts.HSTS = true
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	p.Update(cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln)
	go p.ServeTLS(tln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.Shutdown(ctx)
	})
	r := &running{p: p, http: ln.Addr().String(), tls: tln.Addr().String()}
	r.httpClient = &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, r.http)
			}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return r
}

// get requests http://host/path through the proxy's plain listener.
func (r *running) get(t testing.TB, host, path string) (*http.Response, string) {
	t.Helper()
	return r.do(t, mustReq(t, "GET", "http://"+host+path, nil))
}

func (r *running) do(t testing.TB, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := r.httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading %s: %v", req.URL, err)
	}
	return resp, string(b)
}

func mustReq(t testing.TB, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// tlsClient makes HTTPS requests to the proxy's TLS listener with SNI serverName.
func (r *running) tlsClient(serverName string, h2 bool) *http.Client {
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, ServerName: serverName},
		ForceAttemptHTTP2: h2,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, r.tls)
		},
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// raw sends bytes on a new plain connection and returns everything read until
// the proxy closes it or timeout passes.
func (r *running) raw(t testing.TB, data string, timeout time.Duration) string {
	t.Helper()
	c, err := net.Dial("tcp", r.http)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, data); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(timeout))
	b, _ := io.ReadAll(c)
	return string(b)
}

// readResponses parses n responses from a raw connection.
func readResponses(t testing.TB, rd *bufio.Reader, n int, method string) []*http.Response {
	t.Helper()
	var out []*http.Response
	for i := 0; i < n; i++ {
		resp, err := http.ReadResponse(rd, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(strings.NewReader(string(b)))
		out = append(out, resp)
	}
	return out
}

var _ sync.Mutex

// selfSigned makes a certificate and key for name.
func selfSigned(t testing.TB, name string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func tlsSecret(name string, certPEM, keyPEM []byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}}
}
