package httpproxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/ingress/config"

	networkingv1 "k8s.io/api/networking/v1"
)

// cafe is the chapter's cafe: /tea on three endpoints, /coffee on two.
func cafe(t testing.TB) (*objects, []*backendServer, []*backendServer) {
	o := newObjects()
	tea := []*backendServer{startBackend(t, "tea-1", nil), startBackend(t, "tea-2", nil), startBackend(t, "tea-3", nil)}
	coffee := []*backendServer{startBackend(t, "coffee-1", nil), startBackend(t, "coffee-2", nil)}
	o.service("tea-svc", tea...)
	o.service("coffee-svc", coffee...)
	o.ingress("cafe-ingress", "cafe.example.com", nil, route{path: "/tea", svc: "tea-svc"}, route{path: "/coffee", svc: "coffee-svc"})
	return o, tea, coffee
}

func TestRoutesRoundRobinToEndpoints(t *testing.T) {
	o, _, _ := cafe(t)
	r := startProxy(t, o.build(t), Config{})
	seen := map[string]int{}
	for i := 0; i < 30; i++ {
		resp, body := r.get(t, "cafe.example.com", "/tea")
		if resp.StatusCode != 200 {
			t.Fatalf("/tea: %d %s", resp.StatusCode, body)
		}
		seen[field(body, "Server name")]++
	}
	if fmt.Sprint(seen) != "map[tea-1:10 tea-2:10 tea-3:10]" {
		t.Errorf("/tea spread %v, want 10 each (round robin)", seen)
	}
	for _, tc := range []struct{ host, path, want string }{
		{"cafe.example.com", "/coffee", "coffee-"},
		{"cafe.example.com", "/coffee/latte?size=big", "coffee-"},
		{"CAFE.example.com:8080", "/tea/green", "tea-"},
		{"cafe.example.com", "/teapot", "404"},
		{"cafe.example.com", "/", "404"},
		{"other.example.com", "/tea", "404"},
		{"cafe.example.com", "/tea/../coffee", "coffee-"}, // normalised before matching
	} {
		resp, body := r.get(t, tc.host, tc.path)
		got := fmt.Sprint(resp.StatusCode)
		if resp.StatusCode == 200 {
			got = field(body, "Server name")
		}
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s%s: got %s, want %s", tc.host, tc.path, got, tc.want)
		}
		if tc.want == "404" && !strings.Contains(body, "<center><h1>404 Not Found</h1></center>") {
			t.Errorf("404 body is not nginx's page: %q", body)
		}
	}
	if _, body := r.get(t, "cafe.example.com", "/coffee/latte?size=big"); field(body, "URI") != "/coffee/latte?size=big" {
		t.Errorf("URI upstream = %q, want the request URI unchanged", field(body, "URI"))
	}
}

func TestForwardedHeaders(t *testing.T) {
	o, _, _ := cafe(t)
	r := startProxy(t, o.build(t), Config{})
	req := mustReq(t, "GET", "http://cafe.example.com:30080/tea", nil)
	req.Header.Set("X-Forwarded-For", "6.6.6.6")
	req.Header.Set("X-Real-IP", "6.6.6.6")
	req.Header.Set("X-Forwarded-Proto", "https")
	req.Header.Set("X-Custom", "kept")
	req.Header.Set("Proxy", "http://evil")
	req.Header.Set("Te", "trailers")
	_, body := r.do(t, req)
	_, port, _ := net.SplitHostPort(r.http)
	want := map[string]string{
		"Host":                     "cafe.example.com:30080",
		"X-Forwarded-For":          "127.0.0.1", // replaced, not appended: use-forwarded-headers is off
		"X-Real-IP":                "127.0.0.1",
		"X-Forwarded-Host":         "cafe.example.com:30080",
		"X-Forwarded-Port":         port,
		"X-Forwarded-Proto":        "http",
		"X-Forwarded-Scheme":       "http",
		"X-Scheme":                 "http",
		"X-Original-Forwarded-For": "6.6.6.6",
		"X-Custom":                 "kept",
		"Proxy":                    "",
		"Te":                       "",
		"Proto":                    "HTTP/1.1",
	}
	for k, v := range want {
		if got := field(body, k); got != v {
			t.Errorf("upstream saw %s: %q, want %q", k, got, v)
		}
	}
	if id := field(body, "X-Request-Id"); !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(id) {
		t.Errorf("X-Request-ID = %q, want 32 hex digits", id)
	}
	req = mustReq(t, "GET", "http://cafe.example.com/tea", nil)
	req.Header.Set("X-Request-ID", "client-chosen")
	if _, body := r.do(t, req); field(body, "X-Request-Id") != "client-chosen" {
		t.Errorf("X-Request-ID = %q, want the client's", field(body, "X-Request-Id"))
	}
}

func TestUpstreamKeepAlive(t *testing.T) {
	o := newObjects()
	b := startBackend(t, "one", nil)
	o.service("svc", b)
	o.ingress("ing", "h.example", nil, route{path: "/", svc: "svc"})
	r := startProxy(t, o.build(t), Config{})
	var wg sync.WaitGroup
	var fails atomic.Int64
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				resp, err := r.httpClient.Get("http://h.example/x")
				if err != nil {
					fails.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	if fails.Load() > 0 {
		t.Fatalf("%d requests failed", fails.Load())
	}
	// Go's Transport default (2 idle per host) would open one connection per
	// request above 2 concurrent; the pool keeps them.
	if n := b.conns.Load(); n > 8 {
		t.Errorf("400 requests from 8 clients used %d upstream connections, want at most 8", n)
	}
}

func TestNoEndpointsMissingServiceAndDeadEndpoints(t *testing.T) {
	o := newObjects()
	live := startBackend(t, "live", nil)
	o.service("empty")
	o.service("dead", deadAddr(t))
	o.service("half", deadAddr(t), live)
	o.ingress("ing", "h.example", nil,
		route{path: "/empty", svc: "empty"}, route{path: "/missing", svc: "nope"},
		route{path: "/dead", svc: "dead"}, route{path: "/half", svc: "half"})
	r := startProxy(t, o.build(t), Config{})
	for _, tc := range []struct {
		path string
		want int
		page string
	}{
		{"/empty", 503, "503 Service Temporarily Unavailable"},
		{"/missing", 503, "503 Service Temporarily Unavailable"},
		{"/dead", 502, "502 Bad Gateway"},
	} {
		resp, body := r.get(t, "h.example", tc.path)
		if resp.StatusCode != tc.want || !strings.Contains(body, tc.page) {
			t.Errorf("%s: %d %q, want %d with nginx's page", tc.path, resp.StatusCode, body, tc.want)
		}
	}
	for i := 0; i < 10; i++ {
		if resp, body := r.get(t, "h.example", "/half"); resp.StatusCode != 200 {
			t.Fatalf("/half with one dead endpoint: %d %s; want the next endpoint tried", resp.StatusCode, body)
		}
	}
}

// tlsObjects is the cafe with a TLS section and a certificate Secret.
func tlsObjects(t testing.TB, annotations map[string]string) (*objects, *tls.Certificate) {
	o, _, _ := cafe(t)
	o.in.Ingresses[0].Annotations = annotations
	certPEM, keyPEM := selfSigned(t, "cafe.example.com")
	o.in.Secrets = append(o.in.Secrets, tlsSecret("cafe-secret", certPEM, keyPEM))
	o.in.Ingresses[0].Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"cafe.example.com"}, SecretName: "cafe-secret"}}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return o, &pair
}

func TestSSLRedirect(t *testing.T) {
	o, _ := tlsObjects(t, nil)
	r := startProxy(t, o.build(t), Config{})
	resp, body := r.get(t, "cafe.example.com:30080", "/tea?cup=1")
	if resp.StatusCode != 308 || resp.Header.Get("Location") != "https://cafe.example.com/tea?cup=1" {
		t.Fatalf("http /tea: %d Location %q, want 308 to https://cafe.example.com/tea?cup=1", resp.StatusCode, resp.Header.Get("Location"))
	}
	if !strings.Contains(body, "308 Permanent Redirect") {
		t.Errorf("redirect body %q", body)
	}
	// Unmatched paths of a TLS host redirect too (the root location is the host's).
	if resp, _ := r.get(t, "cafe.example.com", "/"); resp.StatusCode != 308 {
		t.Errorf("http / of a TLS host: %d, want 308", resp.StatusCode)
	}
	// Hosts without TLS are not redirected.
	if resp, _ := r.get(t, "other.example.com", "/tea"); resp.StatusCode != 404 {
		t.Errorf("http other host: %d, want 404", resp.StatusCode)
	}

	t.Run("ssl-redirect false", func(t *testing.T) {
		o, _ := tlsObjects(t, map[string]string{config.AnnotationSSLRedirect: "false"})
		r := startProxy(t, o.build(t), Config{})
		if resp, body := r.get(t, "cafe.example.com", "/tea"); resp.StatusCode != 200 {
			t.Fatalf("http /tea with ssl-redirect false: %d %s", resp.StatusCode, body)
		}
	})
	t.Run("https port other than 443", func(t *testing.T) {
		o, _ := tlsObjects(t, nil)
		r := startProxy(t, o.build(t), Config{HTTPSPort: 8443})
		if resp, _ := r.get(t, "cafe.example.com", "/tea"); resp.Header.Get("Location") != "https://cafe.example.com:8443/tea" {
			t.Fatalf("Location %q", resp.Header.Get("Location"))
		}
	})
	t.Run("force-ssl-redirect without tls", func(t *testing.T) {
		o, _, _ := cafe(t)
		o.in.Ingresses[0].Annotations = map[string]string{config.AnnotationForceSSL: "true"}
		r := startProxy(t, o.build(t), Config{})
		if resp, _ := r.get(t, "cafe.example.com", "/tea"); resp.StatusCode != 308 {
			t.Fatalf("force-ssl-redirect: %d", resp.StatusCode)
		}
	})
}

func TestTLSWithSNI(t *testing.T) {
	o, pair := tlsObjects(t, nil)
	r := startProxy(t, o.build(t), Config{})
	c := r.tlsClient("cafe.example.com", false)
	resp, err := c.Get("https://cafe.example.com/tea")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(field(string(body), "Server name"), "tea-") {
		t.Fatalf("https /tea: %d %s", resp.StatusCode, body)
	}
	if got := resp.TLS.PeerCertificates[0].Raw; !bytes.Equal(got, pair.Certificate[0]) {
		t.Errorf("served certificate is not the Secret's")
	}
	if field(string(body), "X-Forwarded-Proto") != "https" {
		t.Errorf("X-Forwarded-Proto = %q", field(string(body), "X-Forwarded-Proto"))
	}
	if h := resp.Header.Get("Strict-Transport-Security"); h != "max-age=31536000; includeSubDomains" {
		t.Errorf("HSTS = %q", h)
	}
	// An unknown name gets the fake certificate (and the catch-all's 404).
	resp, err = r.tlsClient("unknown.example", false).Get("https://unknown.example/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if cn := resp.TLS.PeerCertificates[0].Subject.CommonName; cn != FakeCertificateName || resp.StatusCode != 404 {
		t.Errorf("unknown SNI: certificate %q, status %d", cn, resp.StatusCode)
	}

	t.Run("certificate rotation without reload", func(t *testing.T) {
		certPEM, keyPEM := selfSigned(t, "cafe.example.com")
		o.in.Secrets[0] = tlsSecret("cafe-secret", certPEM, keyPEM)
		r.p.Update(o.build(t))
		c := r.tlsClient("cafe.example.com", false)
		resp, err := c.Get("https://cafe.example.com/tea")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		newPair, _ := tls.X509KeyPair(certPEM, keyPEM)
		if !bytes.Equal(resp.TLS.PeerCertificates[0].Raw, newPair.Certificate[0]) {
			t.Errorf("new handshake still gets the old certificate")
		}
	})
}

func TestHTTP2(t *testing.T) {
	o, _ := tlsObjects(t, nil)
	r := startProxy(t, o.build(t), Config{})
	c := r.tlsClient("cafe.example.com", true)
	for i := 0; i < 5; i++ {
		resp, err := c.Post("https://cafe.example.com/coffee?x=1", "text/plain", strings.NewReader("milk"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("client spoke %s, want HTTP/2", resp.Proto)
		}
		if resp.StatusCode != 200 || !strings.HasPrefix(field(string(body), "Server name"), "coffee-") ||
			field(string(body), "Body-Length") != "4" || field(string(body), "URI") != "/coffee?x=1" {
			t.Fatalf("h2 POST /coffee: %d %s", resp.StatusCode, body)
		}
		if field(string(body), "X-Forwarded-Proto") != "https" || field(string(body), "Host") != "cafe.example.com" {
			t.Errorf("h2 forwarded headers: %s", body)
		}
	}
	resp, err := c.Get("https://cafe.example.com/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("h2 /: %d", resp.StatusCode)
	}
}

func TestWebSocketUpgrade(t *testing.T) {
	o := newObjects()
	ws := startBackend(t, "ws", func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") || !strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade") {
			http.Error(w, "not an upgrade: "+r.Header.Get("Connection"), 400)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: x\r\n\r\n")
		brw.Flush()
		// Echo lines back upper-cased until EOF.
		for {
			l, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			brw.WriteString(strings.ToUpper(l))
			brw.Flush()
		}
	})
	o.service("ws", ws)
	o.ingress("ing", "ws.example", nil, route{path: "/chat", svc: "ws"})
	r := startProxy(t, o.build(t), Config{})
	c, err := net.Dial("tcp", r.http)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /chat HTTP/1.1\r\nHost: ws.example\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: x\r\nSec-WebSocket-Version: 13\r\n\r\nhello\n")
	c.SetDeadline(time.Now().Add(5 * time.Second))
	rd := bufio.NewReader(c)
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 101 || resp.Header.Get("Upgrade") != "websocket" {
		t.Fatalf("upgrade answer %d %v", resp.StatusCode, resp.Header)
	}
	for _, msg := range []string{"hello", "second frame"} {
		if msg != "hello" {
			io.WriteString(c, msg+"\n")
		}
		l, err := rd.ReadString('\n')
		if err != nil || l != strings.ToUpper(msg)+"\n" {
			t.Fatalf("echo of %q: %q, %v", msg, l, err)
		}
	}
}

func TestBodies(t *testing.T) {
	o := newObjects()
	big := strings.Repeat("0123456789abcdef", 64<<10) // 1 MiB
	be := startBackend(t, "bodies", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/echo":
			w.Header().Set("X-Len", fmt.Sprint(len(body)))
			w.Write(body)
		case "/chunked":
			for i := 0; i < 3; i++ {
				fmt.Fprintf(w, "part %d\n", i)
				w.(http.Flusher).Flush()
			}
		case "/big":
			io.WriteString(w, big)
		case "/nocontent":
			w.WriteHeader(204)
		case "/notmodified":
			w.WriteHeader(304)
		case "/close":
			c, brw, _ := http.NewResponseController(w).Hijack()
			brw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end")
			brw.Flush()
			c.Close()
		}
	})
	o.service("bodies", be)
	o.ingress("ing", "b.example", map[string]string{config.AnnotationProxyBodySize: "2m"}, route{path: "/", svc: "bodies"})
	r := startProxy(t, o.build(t), Config{})

	_, body := r.do(t, mustReq(t, "POST", "http://b.example/echo", strings.NewReader("small body")))
	if body != "small body" {
		t.Errorf("small POST echoed %q", body)
	}
	resp, body := r.do(t, mustReq(t, "POST", "http://b.example/echo", strings.NewReader(big)))
	if body != big || resp.Header.Get("X-Len") != fmt.Sprint(len(big)) {
		t.Errorf("1 MiB POST echoed %d bytes", len(body))
	}
	// A body of unknown length goes chunked both ways.
	req := mustReq(t, "POST", "http://b.example/echo", io.MultiReader(strings.NewReader("chunk one,"), strings.NewReader("chunk two")))
	req.ContentLength = -1
	if _, body = r.do(t, req); body != "chunk one,chunk two" {
		t.Errorf("chunked POST echoed %q", body)
	}
	if resp, body = r.get(t, "b.example", "/chunked"); body != "part 0\npart 1\npart 2\n" || resp.TransferEncoding[0] != "chunked" {
		t.Errorf("chunked answer %q %v", body, resp.TransferEncoding)
	}
	if _, body = r.get(t, "b.example", "/big"); body != big {
		t.Errorf("1 MiB answer: %d bytes", len(body))
	}
	if resp, _ = r.get(t, "b.example", "/nocontent"); resp.StatusCode != 204 {
		t.Errorf("204: %d", resp.StatusCode)
	}
	if resp, _ = r.get(t, "b.example", "/notmodified"); resp.StatusCode != 304 {
		t.Errorf("304: %d", resp.StatusCode)
	}
	if _, body = r.get(t, "b.example", "/close"); body != "until the end" {
		t.Errorf("close-delimited answer %q", body)
	}
	if resp, body = r.do(t, mustReq(t, "HEAD", "http://b.example/big", nil)); resp.StatusCode != 200 || body != "" {
		t.Errorf("HEAD: %d %q", resp.StatusCode, body)
	}
	huge := strings.Repeat("x", 3<<20)
	if resp, _ = r.do(t, mustReq(t, "POST", "http://b.example/echo", strings.NewReader(huge))); resp.StatusCode != 413 {
		t.Errorf("3 MiB POST over a 2m proxy-body-size: %d, want 413", resp.StatusCode)
	}
	req = mustReq(t, "POST", "http://b.example/echo", strings.NewReader(huge))
	req.ContentLength = -1
	if resp, _ := r.httpClient.Do(req); resp != nil && resp.StatusCode != 413 {
		t.Errorf("3 MiB chunked POST: %d, want 413", resp.StatusCode)
	}
	// Expect: 100-continue is answered by the proxy, which then reads the body.
	c, _ := net.Dial("tcp", r.http)
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "POST /echo HTTP/1.1\r\nHost: b.example\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
	rd := bufio.NewReader(c)
	if l, _ := rd.ReadString('\n'); l != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("Expect: 100-continue answered %q", l)
	}
	rd.ReadString('\n')
	io.WriteString(c, "hello")
	if resps := readResponses(t, rd, 1, "POST"); resps[0].StatusCode != 200 {
		t.Errorf("after 100 Continue: %d", resps[0].StatusCode)
	}
}

func TestStrictParsing(t *testing.T) {
	o, _, _ := cafe(t)
	r := startProxy(t, o.build(t), Config{MaxHeaderBytes: 4096})
	for _, tc := range []struct {
		name, req string
		want      string
	}{
		{"Content-Length and Transfer-Encoding", "POST /tea HTTP/1.1\r\nHost: cafe.example.com\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "400 Bad Request"},
		{"two different Content-Lengths", "POST /tea HTTP/1.1\r\nHost: cafe.example.com\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", "400 Bad Request"},
		{"space before colon", "GET /tea HTTP/1.1\r\nHost : cafe.example.com\r\n\r\n", "400 Bad Request"},
		{"obsolete folding", "GET /tea HTTP/1.1\r\nHost: cafe.example.com\r\nX-A: a\r\n b\r\n\r\n", "400 Bad Request"},
		{"HTTP/1.1 without Host", "GET /tea HTTP/1.1\r\n\r\n", "400 Bad Request"},
		{"two Hosts", "GET /tea HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "400 Bad Request"},
		{"unknown transfer coding", "POST /tea HTTP/1.1\r\nHost: cafe.example.com\r\nTransfer-Encoding: gzip\r\n\r\n", "501 Not Implemented"},
		{"HTTP/2 over plain HTTP/1 syntax", "GET /tea HTTP/3.0\r\nHost: cafe.example.com\r\n\r\n", "505 HTTP Version Not Supported"},
		{"oversized head", "GET /tea HTTP/1.1\r\nHost: cafe.example.com\r\nX-Big: " + strings.Repeat("a", 5000) + "\r\n\r\n", "400 Request Header Or Cookie Too Large"},
		{"path above root", "GET /../etc/passwd HTTP/1.1\r\nHost: cafe.example.com\r\n\r\n", "400 Bad Request"},
		{"bad chunk size", "POST /tea HTTP/1.1\r\nHost: cafe.example.com\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "400 Bad Request"},
		{"HTTP/1.0 without Host uses the catch-all", "GET /tea HTTP/1.0\r\n\r\n", "404 Not Found"},
		{"LF-only line ends", "GET /tea HTTP/1.1\nHost: cafe.example.com\nConnection: close\n\n", "Server name: tea-"},
		{"absolute-form", "GET http://cafe.example.com/coffee HTTP/1.1\r\nHost: ignored\r\nConnection: close\r\n\r\n", "Server name: coffee-"},
	} {
		got := r.raw(t, tc.req, 3*time.Second)
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s: answer %q, want it to contain %q", tc.name, firstLines(got), tc.want)
		}
	}
}

func firstLines(s string) string {
	if i := strings.Index(s, "\r\n\r\n"); i > 0 && len(s) > 300 {
		return s[:i]
	}
	return s
}

func TestKeepAlivePipeliningAndHTTP10(t *testing.T) {
	o, _, _ := cafe(t)
	r := startProxy(t, o.build(t), Config{KeepAliveRequests: 4})
	c, err := net.Dial("tcp", r.http)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	// Three pipelined requests in one write; then the fourth hits the keep-alive
	// limit and the proxy says Connection: close.
	io.WriteString(c, "GET /tea HTTP/1.1\r\nHost: cafe.example.com\r\n\r\nGET /coffee HTTP/1.1\r\nHost: cafe.example.com\r\n\r\nGET /nope HTTP/1.1\r\nHost: cafe.example.com\r\n\r\n")
	rd := bufio.NewReader(c)
	resps := readResponses(t, rd, 3, "GET")
	for i, want := range []int{200, 200, 404} {
		if resps[i].StatusCode != want {
			t.Errorf("pipelined %d: %d, want %d", i, resps[i].StatusCode, want)
		}
	}
	io.WriteString(c, "GET /tea HTTP/1.1\r\nHost: cafe.example.com\r\n\r\n")
	last := readResponses(t, rd, 1, "GET")[0]
	if !last.Close {
		t.Errorf("request over keep-alive-requests did not close the connection")
	}
	// HTTP/1.0: closed after the answer unless it asks for keep-alive.
	got := r.raw(t, "GET /tea HTTP/1.0\r\nHost: cafe.example.com\r\n\r\n", 3*time.Second)
	if !strings.HasPrefix(got, "HTTP/1.1 200") || !strings.Contains(got, "Connection: close") {
		t.Errorf("HTTP/1.0 answer: %q", firstLines(got))
	}
	c2, _ := net.Dial("tcp", r.http)
	defer c2.Close()
	c2.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c2, "GET /tea HTTP/1.0\r\nHost: cafe.example.com\r\nConnection: keep-alive\r\n\r\n")
	rd2 := bufio.NewReader(c2)
	resp := readResponses(t, rd2, 1, "GET")[0]
	if resp.Header.Get("Connection") != "keep-alive" {
		t.Errorf("HTTP/1.0 keep-alive answer has Connection %q", resp.Header.Get("Connection"))
	}
	io.WriteString(c2, "GET /coffee HTTP/1.0\r\nHost: cafe.example.com\r\n\r\n")
	if resp := readResponses(t, rd2, 1, "GET")[0]; resp.StatusCode != 200 {
		t.Errorf("second HTTP/1.0 request on the kept connection: %d", resp.StatusCode)
	}
}

func TestSlowClientsAreCut(t *testing.T) {
	o, _, _ := cafe(t)
	r := startProxy(t, o.build(t), Config{ClientHeaderTimeout: 300 * time.Millisecond, ClientBodyTimeout: 300 * time.Millisecond})
	start := time.Now()
	got := r.raw(t, "GET /tea HTTP/1.1\r\nHost: cafe.ex", 5*time.Second)
	if !strings.Contains(got, "408 Request Time-out") || time.Since(start) > 2*time.Second {
		t.Errorf("half a head: %q after %v, want 408 within the header timeout", got, time.Since(start))
	}
	start = time.Now()
	got = r.raw(t, "POST /tea HTTP/1.1\r\nHost: cafe.example.com\r\nContent-Length: 100\r\n\r\nonly this", 5*time.Second)
	if time.Since(start) > 2*time.Second {
		t.Errorf("a body that never comes held the connection for %v (%q)", time.Since(start), got)
	}
	// An idle keep-alive connection is closed silently.
	start = time.Now()
	if got := r.raw(t, "", 5*time.Second); got != "" || time.Since(start) > 2*time.Second {
		t.Errorf("idle connection: %q after %v", got, time.Since(start))
	}
}

func TestRewriteTarget(t *testing.T) {
	o := newObjects()
	b := startBackend(t, "app", nil)
	o.service("app", b)
	o.ingress("rewrite", "r.example", map[string]string{config.AnnotationRewriteTarget: "/$2"},
		route{path: "/something(/|$)(.*)", typ: networkingv1.PathTypeImplementationSpecific, svc: "app"})
	r := startProxy(t, o.build(t), Config{})
	for _, tc := range []struct{ in, want string }{
		{"/something", "/"}, {"/something/", "/"}, {"/something/new?q=1", "/new?q=1"}, {"/SOMETHING/x", "/x"},
	} {
		resp, body := r.get(t, "r.example", tc.in)
		if resp.StatusCode != 200 || field(body, "URI") != tc.want {
			t.Errorf("%s: %d, upstream URI %q, want %q", tc.in, resp.StatusCode, field(body, "URI"), tc.want)
		}
	}
	if resp, _ := r.get(t, "r.example", "/other"); resp.StatusCode != 404 {
		t.Errorf("/other: %d", resp.StatusCode)
	}
}

func TestBackendProtocolHTTPS(t *testing.T) {
	o := newObjects()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", func() *tls.Config {
		c, k := selfSigned(t, "backend.local")
		pair, _ := tls.X509KeyPair(c, k)
		return &tls.Config{Certificates: []tls.Certificate{pair}}
	}())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls=%v uri=%s", r.TLS != nil, r.RequestURI)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	o.service("secure", &backendServer{addr: ln.Addr().String()})
	o.ingress("ing", "s.example", map[string]string{config.AnnotationBackendProtocol: "HTTPS"}, route{path: "/", svc: "secure"})
	r := startProxy(t, o.build(t), Config{})
	if _, body := r.get(t, "s.example", "/x"); body != "tls=true uri=/x" {
		t.Fatalf("HTTPS backend answered %q", body)
	}
}

// TestSwapUnderLoad changes the configuration continuously while clients keep
// sending requests: no request may fail.
func TestSwapUnderLoad(t *testing.T) {
	o := newObjects()
	bs := []*backendServer{startBackend(t, "a", nil), startBackend(t, "b", nil), startBackend(t, "c", nil)}
	o.service("svc", bs...)
	o.ingress("ing", "h.example", nil, route{path: "/", svc: "svc"})
	r := startProxy(t, o.build(t), Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				resp, err := r.httpClient.Get("http://h.example/")
				if err != nil {
					failed.Add(1)
					t.Logf("request failed: %v", err)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failed.Add(1)
					continue
				}
				ok.Add(1)
			}
		}()
	}
	// Endpoint sets rotate: {a,b,c}, {b,c}, {c,a}, ... and the Ingress is
	// rewritten each time, so every Update builds a new table.
	for i := 0; ctx.Err() == nil; i++ {
		o2 := newObjects()
		o2.service("svc", bs[i%3], bs[(i+1)%3])
		o2.ingress("ing", "h.example", map[string]string{"round": fmt.Sprint(i)}, route{path: "/", svc: "svc"})
		r.p.Update(config.Build(o2.in))
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	if failed.Load() > 0 || ok.Load() < 100 {
		t.Fatalf("%d ok, %d failed during configuration swaps", ok.Load(), failed.Load())
	}
}

// TestStaleUpstreamConnections: a backend that drops its idle keep-alive
// connections must not make requests fail.
func TestStaleUpstreamConnections(t *testing.T) {
	o := newObjects()
	b := startBackendWith(t, "b", nil, func(s *http.Server) { s.IdleTimeout = 20 * time.Millisecond })
	o.service("svc", b)
	o.ingress("ing", "h.example", nil, route{path: "/", svc: "svc"})
	r := startProxy(t, o.build(t), Config{})
	for i := 0; i < 20; i++ {
		if resp, body := r.get(t, "h.example", "/"); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
		time.Sleep(30 * time.Millisecond)
	}
}

func TestShutdownFinishesRequestsInFlight(t *testing.T) {
	o := newObjects()
	release := make(chan struct{})
	b := startBackend(t, "slow", func(w http.ResponseWriter, r *http.Request) {
		<-release
		io.WriteString(w, "done")
	})
	o.service("svc", b)
	o.ingress("ing", "h.example", nil, route{path: "/", svc: "svc"})
	r := startProxy(t, o.build(t), Config{})
	idle, err := net.Dial("tcp", r.http)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	result := make(chan string, 1)
	go func() {
		_, body := r.get(t, "h.example", "/")
		result <- body
	}()
	time.Sleep(100 * time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- r.p.Shutdown(context.Background()) }()
	time.Sleep(100 * time.Millisecond)
	close(release)
	if got := <-result; got != "done" {
		t.Errorf("request in flight during shutdown got %q", got)
	}
	if err := <-done; err != nil {
		t.Errorf("shutdown: %v", err)
	}
	idle.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := idle.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Errorf("idle connection still open after shutdown")
	}
}

// blackhole is a loopback address whose SYNs go unanswered (a listener whose
// accept queue is full), like a pod whose network namespace is gone.
func blackhole(t *testing.T) *backendServer {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, _ := syscall.Getsockname(fd)
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// Fill the accept queue; later SYNs are dropped.
	for i := 0; i < 3; i++ {
		c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
	}
	if c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond); err == nil {
		c.Close()
		t.Skip("this kernel answers SYNs on a full accept queue")
	}
	return &backendServer{name: "blackhole", addr: addr}
}

// TestRetryFollowsTheCurrentEndpoints: a request stuck connecting to an
// endpoint that leaves the configuration (a terminating pod) gives up on it at
// once and is retried on the endpoints in force now, well before the 5s
// connect timeout.
func TestRetryFollowsTheCurrentEndpoints(t *testing.T) {
	hole := blackhole(t)
	live := startBackend(t, "live", nil)
	o := newObjects()
	o.service("svc", hole)
	o.ingress("ing", "h.example", nil, route{path: "/", svc: "svc"})
	r := startProxy(t, o.build(t), Config{})
	type result struct {
		code int
		body string
		took time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		resp, err := r.httpClient.Get("http://h.example/")
		if err != nil {
			done <- result{body: err.Error(), took: time.Since(start)}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- result{resp.StatusCode, string(b), time.Since(start)}
	}()
	time.Sleep(300 * time.Millisecond)
	o2 := newObjects()
	o2.service("svc", live)
	o2.ingress("ing", "h.example", nil, route{path: "/", svc: "svc"})
	r.p.Update(o2.build(t))
	res := <-done
	if res.code != 200 || field(res.body, "Server name") != "live" || res.took > 2*time.Second {
		t.Fatalf("request: %d %q after %v; want the live endpoint, quickly", res.code, res.body, res.took)
	}
}
