package images

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/testutil"
)

// Every test container runs as pod "web-0" at this time, with this request ID.
var testTime = time.Date(2026, 12, 2, 15, 40, 1, 0, time.UTC)

const testRequestID = "0123456789abcdef0123456789abcdef"

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// running is a built-in image started on 127.0.0.1 by a test.
type running struct {
	stdout, stderr lockedBuffer
	cancel         context.CancelFunc
	done           chan error

	mu    sync.Mutex
	addrs map[string][]net.Addr

	once    sync.Once
	err     error
	checked bool // the test looked at the result itself
}

func start(t *testing.T, image string, args []string, env map[string]string) *running {
	t.Helper()
	return startAt(t, image, args, env, func() time.Time { return testTime })
}

func startAt(t *testing.T, image string, args []string, env map[string]string, now func() time.Time) *running {
	t.Helper()
	return startWith(t, image, args, env, func(c *container) { c.now = now })
}

// fired is an after func whose waits are over at once: by default a test's
// serve-hostname stops right after cancel, without its minute of grace.
func fired(time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	ch <- testTime
	return ch
}

// startWith starts image like start, after configure adjusts the container.
func startWith(t *testing.T, image string, args []string, env map[string]string, configure func(*container)) *running {
	t.Helper()
	b, ok := lookup(parseRef(image))
	if !ok {
		t.Fatalf("%q is not a built-in image", image)
	}
	r := &running{done: make(chan error, 1), addrs: map[string][]net.Addr{}}
	c := newContainer(b.name, env, "127.0.0.1", &r.stdout, &r.stderr)
	c.hostname = func() (string, error) { return "web-0", nil }
	c.now = func() time.Time { return testTime }
	c.after = fired
	c.requestID = func() string { return testRequestID }
	c.onListen = func(network string, addr net.Addr) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.addrs[network] = append(r.addrs[network], addr)
	}
	ready := make(chan struct{})
	c.ready = func() { close(ready) }
	if configure != nil {
		configure(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- c.run(ctx, b, args) }()
	select {
	case <-ready:
	case err := <-r.done:
		cancel()
		t.Fatalf("%s %q stopped before it was ready: %v", image, args, err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatalf("%s %q not ready after 10s", image, args)
	}
	t.Cleanup(func() {
		if err := r.stop(); err != nil && !r.checked {
			t.Errorf("%s %q: Run returned %v after cancel, want nil", image, args, err)
		}
	})
	return r
}

// result waits for Run to return by itself.
func (r *running) result() error {
	r.once.Do(func() {
		select {
		case r.err = <-r.done:
		case <-time.After(20 * time.Second):
			r.err = errors.New("run did not return within 20s")
		}
	})
	r.checked = true
	return r.err
}

// stop cancels the run and waits for it to return.
func (r *running) stop() error {
	r.cancel()
	r.once.Do(func() {
		select {
		case r.err = <-r.done:
		case <-time.After(20 * time.Second):
			r.err = errors.New("run did not return within 20s of cancel")
		}
	})
	return r.err
}

// addr is the last address bound for network ("tcp" or "udp").
func (r *running) addr(t *testing.T, network string) string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.addrs[network]
	if len(a) == 0 {
		t.Fatalf("no %s socket bound", network)
	}
	return a[len(a)-1].String()
}

type response struct {
	status int
	header http.Header
	body   string
	close  bool   // the server asked to close the connection
	client string // the client's end of the connection
}

// do sends one request like curl would (User-Agent curl/8.5.0, Accept */*).
func do(t *testing.T, method, url string, header map[string]string) response {
	t.Helper()
	var client string
	ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) { client = info.Conn.LocalAddr().String() },
	})
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("User-Agent", "curl/8.5.0")
	req.Header.Set("Accept", "*/*")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(body), close: resp.Close, client: client}
}

// ask sends one datagram and returns the reply and the client's address.
func ask(t *testing.T, addr string, msgs ...string) (string, string) {
	t.Helper()
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, m := range msgs {
		if _, err := conn.Write([]byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 2048)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("reading UDP reply to %q from %s: %v", msgs, addr, err)
	}
	return string(buf[:n]), conn.LocalAddr().String()
}

// waitTimeout bounds every testutil.Eventually of these tests.
const waitTimeout = 5 * time.Second

// contains is an Eventually condition: b's text contains s.
func contains(b fmt.Stringer, s string) func() error {
	return func() error {
		if !strings.Contains(b.String(), s) {
			return fmt.Errorf("no %q in %q", s, b.String())
		}
		return nil
	}
}

// lines is an Eventually condition: b's text has at least n lines.
func lines(b fmt.Stringer, n int) func() error {
	return func() error {
		if got := strings.Count(b.String(), "\n"); got < n {
			return fmt.Errorf("%d lines, want %d: %q", got, n, b.String())
		}
		return nil
	}
}

var (
	welcome  = func(pod string) string { return fmt.Sprintf(nginxWelcomePage, pod) }
	notFound = "<html>\r\n<head><title>404 Not Found</title></head>\r\n<body>\r\n" +
		"<center><h1>404 Not Found</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
	notAllowed = strings.ReplaceAll(notFound, "404 Not Found", "405 Not Allowed")
)

// In want bodies, $SERVER is the image's TCP address and $CLIENT the client's end
// of the connection.
func TestHTTP(t *testing.T) {
	port0 := map[string]string{"MINIKIT_PORT": "0"}
	netexec := []string{"netexec", "--http-port=0", "--udp-port=0"}
	tests := []struct {
		name       string
		image      string
		args       []string
		env        map[string]string
		method     string
		path       string
		header     map[string]string
		wantStatus int
		wantHeader map[string]string
		wantClose  bool
		wantBody   string
	}{
		{name: "serve_hostname", image: "registry.k8s.io/serve_hostname", args: []string{"-port=0"},
			path: "/", wantBody: "web-0"},
		{name: "serve_hostname any path", image: "gcr.io/google_containers/serve_hostname:v1.4", args: []string{"-port", "0"},
			path: "/some/where", wantBody: "web-0"},
		{name: "serve_hostname -close", image: "minikit/serve-hostname", args: []string{"-port=0", "-close"},
			path: "/", wantClose: true, wantBody: "web-0"},
		{name: "agnhost serve-hostname", image: "registry.k8s.io/e2e-test-images/agnhost:2.39", args: []string{"serve-hostname", "--port=0"},
			path: "/", wantBody: "web-0"},

		{name: "netexec /hostname", image: "registry.k8s.io/e2e-test-images/agnhost:2.39", args: netexec,
			path: "/hostname", wantBody: "web-0"},
		{name: "netexec /hostName", image: "registry.k8s.io/e2e-test-images/agnhost:2.39", args: netexec,
			path: "/hostName", wantBody: "web-0"},
		{name: "netexec /clientip", image: "registry.k8s.io/e2e-test-images/agnhost:2.39", args: netexec,
			path: "/clientip", wantBody: "$CLIENT"},
		{name: "netexec /echo", image: "registry.k8s.io/e2e-test-images/agnhost:2.39", args: netexec,
			path: "/echo?msg=hello%20world", wantBody: "hello world"},
		{name: "netexec /echo with code", image: "registry.k8s.io/e2e-test-images/agnhost:2.39", args: netexec,
			path: "/echo?msg=gone&code=404", wantStatus: 404, wantBody: "gone"},
		{name: "netexec /echo bad code", image: "registry.k8s.io/e2e-test-images/agnhost:2.39", args: netexec,
			path: "/echo?code=abc", wantBody: "argument 'code' must be an integer or empty, got \"abc\"\n"},
		{name: "netexec /", image: "registry.k8s.io/e2e-test-images/agnhost:2.39", args: netexec,
			path: "/", wantBody: "NOW: 2026-12-02 15:40:01 +0000 UTC"},
		{name: "netexec /healthz", image: "registry.k8s.io/e2e-test-images/agnhost:2.39", args: netexec,
			path: "/healthz", wantBody: ""},
		{name: "netexec /healthz without UDP", image: "registry.k8s.io/e2e-test-images/agnhost:2.39",
			args: []string{"netexec", "--http-port=0", "--udp-port=-1"}, path: "/healthz", wantStatus: 412, wantBody: ""},
		{name: "netexec /redirect", image: "registry.k8s.io/e2e-test-images/agnhost:2.39", args: netexec,
			path: "/redirect?location=/echo%3Fmsg%3Dfoobar&code=307", wantStatus: 307,
			wantHeader: map[string]string{"Location": "/echo?msg=foobar"}, wantBody: "<a href=\"/echo?msg=foobar\">Temporary Redirect</a>.\n\n"},
		{name: "netexec /shell", image: "registry.k8s.io/e2e-test-images/agnhost:2.39", args: netexec,
			path: "/shell?cmd=echo%20hello", wantBody: `{"output":"hello\n"}`},
		{name: "netexec /shell shellCommand wins", image: "registry.k8s.io/e2e-test-images/agnhost:2.39", args: netexec,
			path: "/shell?shellCommand=echo%20a&cmd=echo%20b", wantBody: `{"output":"a\n"}`},
		{name: "netexec /shell failing", image: "registry.k8s.io/e2e-test-images/agnhost:2.39", args: netexec,
			path: "/shell?cmd=exit%203", wantBody: `{"error":"exit status 3"}`},
		{name: "netexec /upload", image: "registry.k8s.io/e2e-test-images/agnhost:2.39", args: netexec,
			path: "/upload", wantStatus: 501, wantBody: "/upload is not implemented by minikit's built-in agnhost\n"},
		{name: "netexec /dial without request", image: "registry.k8s.io/e2e-test-images/agnhost:2.39", args: netexec,
			path: "/dial?host=127.0.0.1&port=1", wantStatus: 400, wantBody: "request parameter not specified. <nil>\n"},
		{name: "netexec /dial bad protocol", image: "registry.k8s.io/e2e-test-images/agnhost:2.39", args: netexec,
			path: "/dial?host=127.0.0.1&port=1&request=x&protocol=tcp", wantStatus: 400, wantBody: "unsupported protocol. tcp\n"},
		{name: "netexec /dial sctp", image: "registry.k8s.io/e2e-test-images/agnhost:2.39", args: netexec,
			path: "/dial?host=127.0.0.1&port=1&request=x&protocol=sctp", wantStatus: 501, wantBody: "sctp is not supported by minikit\n"},
		{name: "netexec --http-override", image: "registry.k8s.io/e2e-test-images/agnhost:2.39",
			args: []string{"netexec", "--http-port=0", "--udp-port=-1", "--http-override=/echo?msg=over"},
			path: "/anything", wantBody: "over"},
		{name: "agnhost liveness", image: "registry.k8s.io/e2e-test-images/agnhost:2.40", args: []string{"liveness"}, env: port0,
			path: "/healthz", wantBody: "ok"},
		{name: "agnhost liveness /redirect", image: "registry.k8s.io/e2e-test-images/agnhost:2.40", args: []string{"liveness"}, env: port0,
			path: "/redirect?loc=%2Fhealthz", wantStatus: 302, wantHeader: map[string]string{"Location": "/healthz"}, wantBody: "<a href=\"/healthz\">Found</a>.\n\n"},

		{name: "nginx /", image: "nginx:1.14.2", env: port0, path: "/",
			wantHeader: map[string]string{"Server": "nginx", "Content-Type": "text/html"}, wantBody: welcome("web-0")},
		{name: "nginx /index.html", image: "nginx", env: port0, path: "/index.html", wantBody: welcome("web-0")},
		{name: "nginx names the downward-API pod", image: "nginx", env: map[string]string{"MINIKIT_PORT": "0", "MY_POD_NAME": "web-7"},
			path: "/", wantBody: welcome("web-7")},
		{name: "nginx 404", image: "nginx", env: port0, path: "/missing", wantStatus: 404,
			wantHeader: map[string]string{"Server": "nginx", "Content-Type": "text/html"}, wantBody: notFound},
		{name: "nginx POST to a page", image: "nginx", env: port0, method: "POST", path: "/", wantStatus: 405, wantBody: notAllowed},
		{name: "nginx POST to nothing", image: "nginx", env: port0, method: "POST", path: "/missing", wantStatus: 404, wantBody: notFound},
		{name: "nginx DELETE", image: "nginx", env: port0, method: "DELETE", path: "/missing", wantStatus: 405, wantBody: notAllowed},
		{name: "nginx HEAD", image: "nginx", env: port0, method: "HEAD", path: "/", wantBody: ""},
		{name: "nginx-unprivileged", image: "nginxinc/nginx-unprivileged", env: port0, path: "/", wantBody: welcome("web-0")},

		{name: "nginxdemos plain text", image: "nginxdemos/hello:plain-text", env: port0, path: "/coffee?size=large",
			wantHeader: map[string]string{"Server": "nginx", "Content-Type": "text/plain", "Cache-Control": "no-cache",
				"Expires": "Wed, 02 Dec 2026 15:40:00 GMT"},
			wantBody: "Server address: $SERVER\nServer name: web-0\nDate: 02/Dec/2026:15:40:01 +0000\nURI: /coffee?size=large\n" +
				"Request ID: " + testRequestID + "\n"},
		{name: "nginxdemos nonroot plain text answers POST", image: "nginxdemos/nginx-hello:plain-text", env: port0,
			method: "POST", path: "/tea",
			wantBody: "Server address: $SERVER\nServer name: web-0\nDate: 02/Dec/2026:15:40:01 +0000\nURI: /tea\n" +
				"Request ID: " + testRequestID + "\n"},
		{name: "nginxdemos html", image: "nginxdemos/hello", env: port0, path: "/coffee",
			wantHeader: map[string]string{"Content-Type": "text/html"},
			wantBody: "<!DOCTYPE html>\n<html>\n<head>\n<title>Hello World</title>\n</head>\n<body>\n<div class=\"info\">\n" +
				"<p><span>Server&nbsp;name:</span> <span>web-0</span></p>\n" +
				"<p><span>Server&nbsp;address:</span> <span>$SERVER</span></p>\n" +
				"<p class=\"smaller\"><span>URI:</span> <span>/coffee</span></p>\n" +
				"<p class=\"smaller\"><span>Date:</span> <span>02/Dec/2026:15:40:01 +0000</span></p>\n" +
				"<p class=\"smaller\"><span>Client&nbsp;IP:</span> <span>$CLIENT</span></p>\n" +
				"</div>\n<div id=\"footer\">Request ID: " + testRequestID + "</div>\n</body>\n</html>\n"},
		{name: "nginxdemos nonroot html has no client row", image: "nginxdemos/nginx-hello", env: port0, path: "/",
			wantBody: "<!DOCTYPE html>\n<html>\n<head>\n<title>Hello World</title>\n</head>\n<body>\n<div class=\"info\">\n" +
				"<p><span>Server&nbsp;name:</span> <span>web-0</span></p>\n" +
				"<p><span>Server&nbsp;address:</span> <span>$SERVER</span></p>\n" +
				"<p class=\"smaller\"><span>URI:</span> <span>/</span></p>\n" +
				"<p class=\"smaller\"><span>Date:</span> <span>02/Dec/2026:15:40:01 +0000</span></p>\n" +
				"</div>\n<div id=\"footer\">Request ID: " + testRequestID + "</div>\n</body>\n</html>\n"},
		{name: "nginxdemos html refuses POST", image: "nginxdemos/hello", env: port0, method: "POST", path: "/",
			wantStatus: 405, wantBody: notAllowed},

		{name: "minikit/echo text", image: "minikit/echo", args: []string{"--port=0"},
			env:        map[string]string{"MINIKIT_NODE_NAME": "node-1", "MINIKIT_POD_NAMESPACE": "default"},
			path:       "/path?q=1",
			header:     map[string]string{"X-Test": "a"},
			wantHeader: map[string]string{"Content-Type": "text/plain; charset=utf-8"},
			wantBody: "client_address=$CLIENT\npod=web-0\nnode=node-1\nnamespace=default\nserver_address=$SERVER\n\n" +
				"GET /path?q=1 HTTP/1.1\nHost: $SERVER\nAccept: */*\nUser-Agent: curl/8.5.0\nX-Test: a\n"},
		{name: "minikit/echo port from env", image: "minikit/echo", env: map[string]string{"PORT": "0", "POD_NAME": "echo-1"},
			method: "DELETE", path: "/",
			wantBody: "client_address=$CLIENT\npod=echo-1\nnode=\nnamespace=\nserver_address=$SERVER\n\n" +
				"DELETE / HTTP/1.1\nHost: $SERVER\nAccept: */*\nUser-Agent: curl/8.5.0\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := start(t, tt.image, tt.args, tt.env)
			server := r.addr(t, "tcp")
			method := tt.method
			if method == "" {
				method = http.MethodGet
			}
			got := do(t, method, "http://"+server+tt.path, tt.header)
			wantStatus := tt.wantStatus
			if wantStatus == 0 {
				wantStatus = http.StatusOK
			}
			if got.status != wantStatus {
				t.Errorf("status = %d, want %d", got.status, wantStatus)
			}
			for k, v := range tt.wantHeader {
				if got.header.Get(k) != v {
					t.Errorf("header %s = %q, want %q", k, got.header.Get(k), v)
				}
			}
			if got.close != tt.wantClose {
				t.Errorf("connection close = %v, want %v", got.close, tt.wantClose)
			}
			want := strings.NewReplacer("$SERVER", server, "$CLIENT", got.client).Replace(tt.wantBody)
			if got.body != want {
				t.Errorf("body:\n%s\nwant:\n%s", got.body, want)
			}
		})
	}
}

func TestEchoJSON(t *testing.T) {
	r := start(t, "minikit/echo", []string{"--port=0"},
		map[string]string{"MINIKIT_NODE_NAME": "node-1", "MINIKIT_POD_NAMESPACE": "shop"})
	server := r.addr(t, "tcp")
	for name, req := range map[string]struct {
		path   string
		header map[string]string
	}{
		"Accept header": {"/cart", map[string]string{"Accept": "application/json"}},
		"format query":  {"/cart?format=json", nil},
	} {
		t.Run(name, func(t *testing.T) {
			got := do(t, http.MethodGet, "http://"+server+req.path, req.header)
			accept := "*/*"
			if req.header != nil {
				accept = "application/json"
			}
			ip, _, _ := net.SplitHostPort(got.client)
			want := fmt.Sprintf(`{
  "client_address": %q,
  "client_ip": %q,
  "pod": "web-0",
  "node": "node-1",
  "namespace": "shop",
  "server_address": %q,
  "method": "GET",
  "uri": %q,
  "host": %q,
  "headers": {
    "Accept": %q,
    "User-Agent": "curl/8.5.0"
  }
}
`, got.client, ip, server, req.path, server, accept)
			if got.header.Get("Content-Type") != "application/json" {
				t.Errorf("Content-Type = %q", got.header.Get("Content-Type"))
			}
			if got.body != want {
				t.Errorf("body:\n%s\nwant:\n%s", got.body, want)
			}
		})
	}
}

// In want replies, $CLIENT is the client's address.
func TestUDP(t *testing.T) {
	netexec := []string{"netexec", "--http-port=0", "--udp-port=0"}
	tests := []struct {
		name  string
		image string
		args  []string
		send  []string
		want  string
	}{
		{"serve_hostname", "registry.k8s.io/serve_hostname", []string{"-port=0", "-http=false", "-udp"}, []string{"x"}, "web-0"},
		{"agnhost serve-hostname", "registry.k8s.io/e2e-test-images/agnhost:2.39",
			[]string{"serve-hostname", "--port=0", "--http=false", "--udp"}, []string{""}, "web-0"},
		{"netexec hostname", "registry.k8s.io/e2e-test-images/agnhost:2.39", netexec, []string{"hostname"}, "web-0"},
		{"netexec hostname loosely", "registry.k8s.io/e2e-test-images/agnhost:2.39", netexec, []string{"  HostName\n"}, "web-0"},
		// The real netexec lower-cases the datagram before echoing it.
		{"netexec echo", "registry.k8s.io/e2e-test-images/agnhost:2.39", netexec, []string{"echo Hello World"}, "hello world"},
		{"netexec clientip", "registry.k8s.io/e2e-test-images/agnhost:2.39", netexec, []string{"clientip"}, "$CLIENT"},
		// An unknown command gets no reply: the first reply is the hostname's.
		{"netexec ignores unknown commands", "registry.k8s.io/e2e-test-images/agnhost:2.39", netexec,
			[]string{"bogus", "hostname"}, "web-0"},
		{"minikit/echo", "minikit/echo", []string{"--port=0"}, []string{"hi"}, "client_address=$CLIENT pod=web-0\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := start(t, tt.image, tt.args, nil)
			got, client := ask(t, r.addr(t, "udp"), tt.send...)
			if want := strings.ReplaceAll(tt.want, "$CLIENT", client); got != want {
				t.Errorf("reply to %q = %q, want %q", tt.send, got, want)
			}
		})
	}
}

func TestServeHostnameTCP(t *testing.T) {
	r := start(t, "registry.k8s.io/serve_hostname", []string{"-port=0", "-http=false", "-tcp"}, nil)
	conn, err := net.Dial("tcp", r.addr(t, "tcp"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(conn)
	if err != nil || string(got) != "web-0" {
		t.Errorf("read %q, %v; want %q and EOF", got, err, "web-0")
	}
	testutil.Eventually(t, waitTimeout, "the request log line", contains(&r.stderr, "TCP request from "+conn.LocalAddr().String()))
}

// A client that sends first and reads late (`echo hostName | nc -w 2 …`)
// still reads the answer and then a FIN: the image reads what was sent
// before it closes, so its kernel never answers with a RST.
func TestServeHostnameTCPClientSendsFirst(t *testing.T) {
	r := start(t, "registry.k8s.io/e2e-test-images/agnhost:2.66.1", []string{"serve-hostname", "--port=0", "--http=false", "--tcp"}, nil)
	conn, err := net.Dial("tcp", r.addr(t, "tcp"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("hostName\n")); err != nil {
		t.Fatal(err)
	}
	// The answer and the server's FIN arrive before this client reads.
	testutil.Eventually(t, waitTimeout, "the request log line", contains(&r.stderr, "TCP request from "+conn.LocalAddr().String()))
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(conn)
	if err != nil || string(got) != "web-0" {
		t.Errorf("read %q, %v; want %q and EOF (a FIN, not a reset)", got, err, "web-0")
	}
}

func TestEchoSharesOnePortNumber(t *testing.T) {
	r := start(t, "minikit/echo", []string{"--port=0"}, nil)
	_, tcpPort, _ := net.SplitHostPort(r.addr(t, "tcp"))
	_, udpPort, _ := net.SplitHostPort(r.addr(t, "udp"))
	if tcpPort != udpPort {
		t.Errorf("TCP port %s, UDP port %s; want the same number", tcpPort, udpPort)
	}
}

func TestNetexecDial(t *testing.T) {
	r := start(t, "registry.k8s.io/e2e-test-images/agnhost:2.39", []string{"netexec", "--http-port=0", "--udp-port=0"}, nil)
	server := r.addr(t, "tcp")
	_, httpPort, _ := net.SplitHostPort(server)
	_, udpPort, _ := net.SplitHostPort(r.addr(t, "udp"))
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, closedPort, _ := net.SplitHostPort(closed.Addr().String())
	closed.Close()

	tests := []struct {
		query string
		want  string
	}{
		{"request=hostname&protocol=http&host=127.0.0.1&port=" + httpPort + "&tries=2", `{"responses":["web-0","web-0"]}`},
		{"request=hostname&host=127.0.0.1&port=" + httpPort, `{"responses":["web-0"]}`},
		{"request=hostname&protocol=udp&host=127.0.0.1&port=" + udpPort, `{"responses":["web-0"]}`},
		{"request=echo%20hi&protocol=udp&host=127.0.0.1&port=" + udpPort, `{"responses":["hi"]}`},
		{"request=hostname&protocol=http&host=127.0.0.1&port=" + closedPort,
			`{"errors":["Get \"http://127.0.0.1:` + closedPort + `/hostname\": dial tcp 127.0.0.1:` + closedPort + `: connect: connection refused"]}`},
	}
	for _, tt := range tests {
		got := do(t, http.MethodGet, "http://"+server+"/dial?"+tt.query, nil)
		if got.status != http.StatusOK || got.body != tt.want {
			t.Errorf("/dial?%s = %d %s, want 200 %s", tt.query, got.status, got.body, tt.want)
		}
	}
}

func TestNetexecExit(t *testing.T) {
	netexec := []string{"netexec", "--http-port=0", "--udp-port=-1"}
	t.Run("with a timeout the client gets its answer", func(t *testing.T) {
		r := start(t, "registry.k8s.io/e2e-test-images/agnhost:2.39", netexec, nil)
		got := do(t, http.MethodGet, "http://"+r.addr(t, "tcp")+"/exit?code=3&timeout=2s", nil)
		if got.status != http.StatusOK || got.body != "" {
			t.Errorf("/exit = %d %q, want 200 and no body", got.status, got.body)
		}
		var exit *ExitError
		if err := r.result(); !errors.As(err, &exit) || exit.Code != 3 {
			t.Errorf("Run returned %v, want exit code 3", err)
		}
	})
	for path, code := range map[string]int{"/exit?code=4": 4, "/shutdown": 0} {
		t.Run(path+" drops the connection", func(t *testing.T) {
			r := start(t, "registry.k8s.io/e2e-test-images/agnhost:2.39", netexec, nil)
			resp, err := http.Get("http://" + r.addr(t, "tcp") + path)
			if err == nil {
				resp.Body.Close()
				t.Errorf("%s answered %s, want the connection dropped", path, resp.Status)
			}
			var exit *ExitError
			if err := r.result(); !errors.As(err, &exit) || exit.Code != code {
				t.Errorf("Run returned %v, want exit code %d", err, code)
			}
		})
	}
}

// Cancelling the run lets a request in flight finish before the server stops.
func TestGracefulShutdown(t *testing.T) {
	r := start(t, "registry.k8s.io/e2e-test-images/agnhost:2.39", []string{"netexec", "--http-port=0", "--udp-port=-1"}, nil)
	url := "http://" + r.addr(t, "tcp") + "/exit?code=9&wait=300ms&timeout=5s"
	got := make(chan int, 1)
	go func() {
		resp, err := http.Get(url)
		if err != nil {
			got <- 0
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	testutil.Eventually(t, waitTimeout, "the request to be in flight", contains(&r.stderr, "Will begin shutdown"))
	if err := r.stop(); err != nil {
		t.Errorf("Run returned %v after cancel, want nil", err)
	}
	select {
	case status := <-got:
		if status != http.StatusOK {
			t.Errorf("in-flight request got status %d, want 200", status)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("in-flight request did not finish")
	}
}

func TestStopsOnCancel(t *testing.T) {
	tests := []struct {
		image string
		args  []string
		env   map[string]string
	}{
		{"registry.k8s.io/serve_hostname", []string{"-port=0"}, nil},
		{"registry.k8s.io/serve_hostname", []string{"-port=0", "-http=false", "-tcp", "-udp"}, nil},
		{"registry.k8s.io/e2e-test-images/agnhost", []string{"netexec", "--http-port=0", "--udp-port=0"}, nil},
		{"registry.k8s.io/e2e-test-images/agnhost", []string{"pause"}, nil},
		{"registry.k8s.io/pause:3.10", nil, nil},
		{"nginx", nil, map[string]string{"MINIKIT_PORT": "0"}},
		{"nginxdemos/hello:plain-text", nil, map[string]string{"MINIKIT_PORT": "0"}},
		{"minikit/echo", []string{"--port=0"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.image+strings.Join(tt.args, " "), func(t *testing.T) {
			r := start(t, tt.image, tt.args, tt.env)
			if err := r.stop(); err != nil {
				t.Fatalf("Run returned %v after cancel, want nil", err)
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			for _, a := range r.addrs["tcp"] {
				if conn, err := net.Dial("tcp", a.String()); err == nil {
					conn.Close()
					t.Errorf("%s still accepts connections after stop", a)
				}
			}
		})
	}
}

func TestLivenessFailsAfterTenSeconds(t *testing.T) {
	var offset atomic.Int64
	now := func() time.Time { return testTime.Add(time.Duration(offset.Load())) }
	r := startAt(t, "registry.k8s.io/e2e-test-images/agnhost:2.40", []string{"liveness"}, map[string]string{"MINIKIT_PORT": "0"}, now)
	base := "http://" + r.addr(t, "tcp")
	steps := []struct {
		at         time.Duration
		path       string
		wantStatus int
		wantBody   string
	}{
		{0, "/started", 200, "0s"},
		{10 * time.Second, "/healthz", 200, "ok"},
		{11 * time.Second, "/healthz", 500, "error: 11"},
		{11 * time.Second, "/started", 200, "11s"},
	}
	for _, s := range steps {
		offset.Store(int64(s.at))
		got := do(t, http.MethodGet, base+s.path, nil)
		if got.status != s.wantStatus || got.body != s.wantBody {
			t.Errorf("at %s %s = %d %q, want %d %q", s.at, s.path, got.status, got.body, s.wantStatus, s.wantBody)
		}
	}
}

func TestNginxAccessLog(t *testing.T) {
	r := start(t, "nginx", nil, map[string]string{"MINIKIT_PORT": "0"})
	base := "http://" + r.addr(t, "tcp")
	do(t, http.MethodGet, base+"/", nil)
	do(t, http.MethodHead, base+"/", nil)
	do(t, http.MethodGet, base+"/missing?x=1", map[string]string{"Referer": "http://shop/", "X-Forwarded-For": "10.0.0.9"})
	want := "/docker-entrypoint.sh: Configuration complete; ready for start up\n" +
		fmt.Sprintf(`127.0.0.1 - - [02/Dec/2026:15:40:01 +0000] "GET / HTTP/1.1" 200 %d "-" "curl/8.5.0" "-"`+"\n", len(welcome("web-0"))) +
		`127.0.0.1 - - [02/Dec/2026:15:40:01 +0000] "HEAD / HTTP/1.1" 200 0 "-" "curl/8.5.0" "-"` + "\n" +
		`127.0.0.1 - - [02/Dec/2026:15:40:01 +0000] "GET /missing?x=1 HTTP/1.1" 404 146 "http://shop/" "curl/8.5.0" "10.0.0.9"` + "\n"
	testutil.Eventually(t, waitTimeout, "three access log lines", lines(&r.stdout, 4))
	if got := r.stdout.String(); got != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", got, want)
	}
}

func TestAgnhostPauseSaysPaused(t *testing.T) {
	r := start(t, "registry.k8s.io/e2e-test-images/agnhost:2.39", []string{"pause"}, nil)
	if got, want := r.stdout.String(), "Paused\nSignals registered\n"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
}

// Images that cannot start return an error at once and never report ready.
func TestRunErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_, busyPort, _ := net.SplitHostPort(busy.Addr().String())

	tests := []struct {
		name  string
		image string
		args  []string
		env   map[string]string
		want  string
	}{
		{"serve_hostname HTTP and UDP", "registry.k8s.io/serve_hostname", []string{"-udp"}, nil,
			"running image registry.k8s.io/serve_hostname: can't serve TCP/UDP mode and HTTP mode at the same time"},
		{"serve_hostname bad port", "registry.k8s.io/serve_hostname", []string{"-port=70000"}, nil, "--port 70000 is not a valid port"},
		{"serve_hostname positional args", "registry.k8s.io/serve_hostname", []string{"-port=0", "extra"}, nil,
			`parsing serve-hostname arguments: unexpected ["extra"]`},
		{"agnhost fake-gitserver", "registry.k8s.io/e2e-test-images/agnhost", []string{"fake-gitserver"}, nil,
			`agnhost subcommand "fake-gitserver" is not implemented by minikit`},
		{"porter bad port", "registry.k8s.io/e2e-test-images/agnhost", []string{"porter"}, map[string]string{"SERVE_PORT_x": "foo"},
			"parsing the port of SERVE_PORT_x"},
		{"netexec unknown flag", "registry.k8s.io/e2e-test-images/agnhost", []string{"netexec", "--bogus"}, nil,
			`parsing netexec arguments ["--bogus"]: unknown flag: --bogus`},
		{"netexec positional argument", "registry.k8s.io/e2e-test-images/agnhost", []string{"netexec", "extra"}, nil,
			"netexec: accepts at most 0 arg(s), received 1"},
		{"connect without destination", "registry.k8s.io/e2e-test-images/agnhost", []string{"connect", "--timeout=1s"}, nil,
			"connect: accepts 1 arg(s), received 0"},
		{"test-webserver bad port", "registry.k8s.io/e2e-test-images/agnhost", []string{"test-webserver", "--port=-2"}, nil,
			"--port -2 is not a valid port"},
		{"netexec bad UDP address", "registry.k8s.io/e2e-test-images/agnhost",
			[]string{"netexec", "--http-port=0", "--udp-port=0", "--udp-listen-addresses=nope"}, nil, "parseAddress: invalid address nope"},
		{"nginx bad MINIKIT_PORT", "nginx", nil, map[string]string{"MINIKIT_PORT": "x"}, `parsing MINIKIT_PORT="x"`},
		{"nginx port in use", "nginx", nil, map[string]string{"MINIKIT_PORT": busyPort}, "address already in use"},
		{"echo bad PORT", "minikit/echo", nil, map[string]string{"PORT": "abc"}, `parsing PORT="abc"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _ := lookup(parseRef(tt.image))
			var stderr lockedBuffer
			c := newContainer(b.name, tt.env, "127.0.0.1", io.Discard, &stderr)
			c.ready = func() { t.Error("ready called for an image that failed to start") }
			err := c.run(t.Context(), b, tt.args)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// Run is the entry point of `minikit __image-run`.
func TestRun(t *testing.T) {
	t.Run("pause until cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		ready := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, "registry.k8s.io/pause:3.10", nil, map[string]string{}, "127.0.0.1", func() { close(ready) }, nil)
		}()
		select {
		case <-ready:
		case <-time.After(5 * time.Second):
			t.Fatal("not ready")
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
	t.Run("unknown image", func(t *testing.T) {
		err := Run(t.Context(), "foo/bar", nil, nil, "127.0.0.1", nil, nil)
		want := `image "foo/bar" is not a built-in image of minikit; built-in images: ` + strings.Join(Names(), ", ")
		if err == nil || err.Error() != want {
			t.Errorf("Run error = %v, want %s", err, want)
		}
	})
}

func TestAgnhostPorter(t *testing.T) {
	const agnhost = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
	t.Run("http", func(t *testing.T) {
		r := start(t, agnhost, []string{"porter"}, map[string]string{"SERVE_PORT_0": `<a href="/rewriteme">test</a>`})
		if got := do(t, "GET", "http://"+r.addr(t, "tcp")+"/any/path", nil); got.status != 200 || got.body != `<a href="/rewriteme">test</a>` {
			t.Errorf("got %d %q", got.status, got.body)
		}
	})
	t.Run("json", func(t *testing.T) {
		r := start(t, agnhost, []string{"porter", "--json-response"}, map[string]string{"SERVE_PORT_0": "foo"})
		for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
			got := do(t, m, "http://"+r.addr(t, "tcp")+"/some/path/with/"+m, nil)
			if want := `{"Method":"` + m + `","Body":"foo"}`; got.status != 200 || got.body != want ||
				got.header.Get("Content-Type") != "application/json" {
				t.Errorf("%s: got %d %q, want %q", m, got.status, got.body, want)
			}
		}
	})
	t.Run("tls", func(t *testing.T) {
		r := start(t, agnhost, []string{"porter"}, map[string]string{"SERVE_TLS_PORT_0": "tls qux"})
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		resp, err := c.Get("https://" + r.addr(t, "tcp") + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if string(b) != "tls qux" || resp.TLS == nil {
			t.Errorf("got %q over TLS %v", b, resp.TLS != nil)
		}
	})
	t.Run("udp", func(t *testing.T) {
		r := start(t, agnhost, []string{"porter"}, map[string]string{"SERVE_UDP_PORT_0": "udp foo"})
		if got, _ := ask(t, r.addr(t, "udp"), "x"); got != "udp foo" {
			t.Errorf("reply %q", got)
		}
	})
}
