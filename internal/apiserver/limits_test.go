package apiserver

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/apiserver/validation"
	"github.com/minikit/minikit/internal/store"
	"github.com/minikit/minikit/internal/testutil"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Hostile bodies: oversized and deeply nested, in JSON and YAML, on every verb
// that reads a body. Each gets a Kubernetes Status with a 4xx code, and the
// server goes on answering.
func TestOversizedBody(t *testing.T) {
	a := newTestAPI(t)
	a.create(configMapsPath, newConfigMap("cm", map[string]string{"k": "v"}))
	big := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"big"},"data":{"k":"` + strings.Repeat("x", maxBodyBytes) + `"}}`
	bigYAML := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n  k: " + strings.Repeat("x", maxBodyBytes) + "\n"
	for _, tc := range []struct {
		name, method, path, ct, body string
	}{
		{"create json", http.MethodPost, configMapsPath, "application/json", big},
		{"create yaml", http.MethodPost, configMapsPath, "application/yaml", bigYAML},
		{"update", http.MethodPut, configMapsPath + "/cm", "application/json", big},
		{"merge patch", http.MethodPatch, configMapsPath + "/cm", "application/merge-patch+json", big},
		{"delete options", http.MethodDelete, configMapsPath + "/cm", "application/json", big},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := a.do(tc.method, tc.path, tc.ct, tc.body)
			r.wantStatus(t, http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge, fmt.Sprintf("limit is %d bytes", maxBodyBytes))
		})
	}
	// A body of exactly the limit is read (and here rejected for what it says).
	exact := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"exact"},"data":{"k":"` +
		strings.Repeat("y", maxBodyBytes-len(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"exact"},"data":{"k":""}}`)) + `"}}`
	if len(exact) != maxBodyBytes {
		t.Fatalf("test body is %d bytes, want %d", len(exact), maxBodyBytes)
	}
	r := a.do(http.MethodPost, configMapsPath, "application/json", exact)
	r.wantStatus(t, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "Too long")
	a.get(configMapsPath+"/cm").mustCode(t, http.StatusOK, nil)
}

// A declared Content-Length over the limit is answered before the body is sent.
func TestOversizedBodyRejectedBeforeItIsSent(t *testing.T) {
	l := newLimitedAPI(t, Limits{})
	c := l.dial(t)
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", configMapsPath, 4<<20)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer to a 4 MiB Content-Length, no body sent: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	response{code: resp.StatusCode, body: body}.wantStatus(t, http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge, "limit is")
}

func TestDeeplyNestedBodies(t *testing.T) {
	a := newTestAPI(t)
	a.create(configMapsPath, newConfigMap("cm", map[string]string{"k": "v"}))
	nested := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	nestedObj := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	blockYAML := func(n int) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			b.WriteString("- ")
		}
		b.WriteString("x\n")
		return b.String()
	}
	for _, tc := range []struct {
		name, method, path, ct, body string
	}{
		{"json arrays 10k", http.MethodPost, configMapsPath, "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"n"},"data":` + nested(10000) + `}`},
		{"json arrays 1M", http.MethodPost, configMapsPath, "application/json", nested(1 << 20)},
		{"json objects 100k", http.MethodPost, configMapsPath, "application/json", nestedObj(100000)},
		{"json in metadata", http.MethodPost, configMapsPath, "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"n","labels":` + nestedObj(10000) + `}}`},
		{"yaml flow 1M", http.MethodPost, configMapsPath, "application/yaml", nested(1 << 20)},
		{"yaml block 1M", http.MethodPost, configMapsPath, "application/yaml", blockYAML(1 << 20)},
		{"yaml 10k in data", http.MethodPost, configMapsPath, "application/yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: n}\ndata: " + nested(10000) + "\n"},
		{"update", http.MethodPut, configMapsPath + "/cm", "application/json", nestedObj(100000)},
		{"merge patch", http.MethodPatch, configMapsPath + "/cm", "application/merge-patch+json", `{"data":` + nestedObj(100000) + `}`},
		{"strategic patch", http.MethodPatch, configMapsPath + "/cm", "application/strategic-merge-patch+json", `{"data":` + nestedObj(100000) + `}`},
		{"json patch", http.MethodPatch, configMapsPath + "/cm", "application/json-patch+json", `[{"op":"add","path":"/data/x","value":` + nested(100000) + `}]`},
		{"delete options", http.MethodDelete, configMapsPath + "/cm", "application/json", nestedObj(100000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := a.do(tc.method, tc.path, tc.ct, tc.body)
			if r.code < 400 || r.code >= 500 {
				t.Fatalf("got HTTP %d, want a 4xx: %.300s", r.code, r.body)
			}
			st := r.status(t)
			if int(st.Code) != r.code || st.Status != metav1.StatusFailure || st.Message == "" {
				t.Errorf("Status %+v does not describe HTTP %d", st, r.code)
			}
		})
	}
	a.get(configMapsPath+"/cm").mustCode(t, http.StatusOK, nil)
}

// limitedAPI is an API server with explicit limits behind a real listener on
// 127.0.0.1, served by the http.Server HTTPServer returns, as cluster serves it.
type limitedAPI struct {
	srv  *Server
	addr string
}

func newLimitedAPI(t *testing.T, lim Limits) *limitedAPI {
	t.Helper()
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Store: st, Validation: validation.DefaultConfig(), Version: "test", Limits: lim,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	hs := srv.HTTPServer()
	done := make(chan struct{})
	go func() { defer close(done); hs.Serve(ln) }()
	t.Cleanup(func() {
		st.Close()
		hs.Close()
		<-done
	})
	return &limitedAPI{srv: srv, addr: ln.Addr().String()}
}

func (l *limitedAPI) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", l.addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedBy reads c until the server closes it, failing the test if that does
// not happen by the deadline. It returns what was read.
func closedBy(t *testing.T, c net.Conn, deadline time.Duration, what string) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(deadline))
	got, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the server did not close the connection within %v (read %d bytes)", what, deadline, len(got))
	}
	return got // io.EOF (nil here) or a reset: closed either way
}

// Slowloris: a client sending its headers one byte per second is cut off once
// ReadHeaderTimeout passes, long before its headers are complete.
func TestSlowlorisHeadersAreCutOff(t *testing.T) {
	l := newLimitedAPI(t, Limits{ReadHeaderTimeout: 2 * time.Second})
	c := l.dial(t)
	head := "GET " + configMapsPath + " HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slowloris\r\nX-Padding: " + strings.Repeat("a", 64) + "\r\n\r\n"
	stop := make(chan struct{})
	sent := make(chan int, 1)
	go func() {
		n := 0
		defer func() { sent <- n }()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for ; n < len(head); n++ {
			if _, err := c.Write([]byte{head[n]}); err != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	got := closedBy(t, c, 60*time.Second, "slow headers")
	close(stop)
	n := <-sent
	if n >= len(head) {
		t.Fatalf("the whole %d-byte head was sent before the server gave up", len(head))
	}
	if bytes.Contains(got, []byte("ConfigMapList")) {
		t.Errorf("the server answered an incomplete request: %q", got)
	}
	t.Logf("closed after %d of %d header bytes", n, len(head))
}

// A body trickled in too slowly gets a 408 Status, then the connection closes.
func TestSlowBodyGetsTimeout(t *testing.T) {
	l := newLimitedAPI(t, Limits{BodyTimeout: time.Second})
	c := l.dial(t)
	body := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"slow"}}`
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", configMapsPath, len(body), body[:10])
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for i := 10; i < len(body)-1; i++ { // never the last byte
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := c.Write([]byte{body[i]}); err != nil {
				return
			}
		}
	}()
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to a slow body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	response{code: resp.StatusCode, body: b}.wantStatus(t, http.StatusRequestTimeout, metav1.StatusReasonTimeout, "request body was not received within 1s")
	closedBy(t, c, 30*time.Second, "after a body timeout")
	if _, err := l.srv.get(lookup("", "v1", "configmaps"), "default", "slow"); err == nil {
		t.Errorf("the half-sent object was created")
	}
}

// A fast body is not affected by the body deadline, and neither is the watch
// that follows it on the same connection (net/http's background read must not
// see the deadline).
func TestBodyDeadlineIsLiftedAfterTheBody(t *testing.T) {
	l := newLimitedAPI(t, Limits{BodyTimeout: 500 * time.Millisecond})
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	base := "http://" + l.addr
	resp, err := client.Post(base+configMapsPath, "application/json", strings.NewReader(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %s", resp.Status)
	}
	resp, err = client.Get(base + configMapsPath + "?watch=1&resourceVersion=" + fmt.Sprint(l.srv.store.Rev()))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Past the body deadline, an event still arrives on the open watch.
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	testutil.Eventually(t, waitTimeout, "the watch to be served", watchesServed(l.srv, 1))
	deadlinePassed := time.Now().Add(time.Second)
	for time.Now().Before(deadlinePassed) {
		time.Sleep(100 * time.Millisecond) // let the lifted deadline's moment pass
	}
	if _, err := l.srv.Create(lookup("", "v1", "configmaps"), "default", newConfigMap("b", nil)); err != nil {
		t.Fatal(err)
	}
	select {
	case line, ok := <-lines:
		if !ok || !strings.Contains(line, `"ADDED"`) || !strings.Contains(line, `"b"`) {
			t.Fatalf("watch after a body: got %q (open %v), want the ADDED event", line, ok)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no event on the watch")
	}
}

// A watch client that never reads is dropped once a write has waited for
// StreamWriteTimeout: the handler returns and the connection closes.
func TestWatchClientThatNeverReadsIsDropped(t *testing.T) {
	l := newLimitedAPI(t, Limits{StreamWriteTimeout: time.Second})
	c := l.dial(t)
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetReadBuffer(4096)
	}
	fmt.Fprintf(c, "GET %s?watch=1 HTTP/1.1\r\nHost: x\r\n\r\n", configMapsPath)
	testutil.Eventually(t, waitTimeout, "the watch to be served", watchesServed(l.srv, 1))
	cms := lookup("", "v1", "configmaps")
	payload := strings.Repeat("z", 512<<10)
	// Each update is a 512 KiB event; a few dozen fill any socket buffers. Stop
	// as soon as the server gives up on the client.
	for i := 0; i < 200 && l.srv.watches.Load() > 0; i++ {
		if _, err := l.srv.Create(cms, "default", newConfigMap(fmt.Sprintf("cm-%d", i), map[string]string{"k": payload})); err != nil {
			t.Fatal(err)
		}
		if i%8 == 7 {
			time.Sleep(100 * time.Millisecond) // give the writer a moment to block; a pace, not a wait for an event
		}
	}
	testutil.Eventually(t, waitTimeout, "the server to drop the watch of a client that does not read", watchesServed(l.srv, 0))
	closedBy(t, c, 60*time.Second, "a watch nobody reads")
}

// An idle watch is not a stalled client: over HTTP/2 (where a passed write
// deadline resets the stream even when nothing is being written) and HTTP/1
// alike, a watch quiet for longer than StreamWriteTimeout still gets the
// next event.
func TestIdleWatchOutlivesTheStreamWriteTimeout(t *testing.T) {
	for _, h2 := range []bool{true, false} {
		t.Run(fmt.Sprintf("http2=%v", h2), func(t *testing.T) {
			st, err := store.OpenBolt(filepath.Join(t.TempDir(), "db"), 0)
			if err != nil {
				t.Fatal(err)
			}
			srv, err := New(Config{Store: st, Validation: validation.DefaultConfig(), Version: "test",
				Limits: Limits{StreamWriteTimeout: 300 * time.Millisecond}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			ts := httptest.NewUnstartedServer(nil)
			ts.Config = srv.HTTPServer()
			ts.EnableHTTP2 = h2
			ts.StartTLS()
			t.Cleanup(func() { st.Close(); ts.CloseClientConnections(); ts.Close() })
			client := ts.Client()
			resp, err := client.Get(ts.URL + configMapsPath + "?watch=1")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if want := map[bool]int{true: 2, false: 1}[h2]; resp.ProtoMajor != want {
				t.Fatalf("watch served over HTTP/%d, want %d", resp.ProtoMajor, want)
			}
			lines := make(chan string)
			go func() {
				defer close(lines)
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					lines <- sc.Text()
				}
			}()
			testutil.Eventually(t, waitTimeout, "the watch to be served", watchesServed(srv, 1))
			for end := time.Now().Add(time.Second); time.Now().Before(end); {
				time.Sleep(100 * time.Millisecond) // stay idle past the write timeout
			}
			if _, err := srv.Create(lookup("", "v1", "configmaps"), "default", newConfigMap("late", nil)); err != nil {
				t.Fatal(err)
			}
			select {
			case line, ok := <-lines:
				if !ok || !strings.Contains(line, `"late"`) {
					t.Fatalf("idle watch: got %q (open %v), want the ADDED event", line, ok)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("no event on the idle watch")
			}
		})
	}
}

// Headers over MaxHeaderBytes get 431; a TLS client that never finishes its
// handshake is cut off after ReadHeaderTimeout, as a slow plain one is.
func TestOversizedHeadersAndStalledHandshake(t *testing.T) {
	l := newLimitedAPI(t, Limits{MaxHeaderBytes: 16 << 10})
	c := l.dial(t)
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", configMapsPath, strings.Repeat("a", 64<<10))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to 64 KiB of headers: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("64 KiB of headers: %s, want 431", resp.Status)
	}

	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Store: st, Validation: validation.DefaultConfig(), Version: "test",
		Limits: Limits{ReadHeaderTimeout: time.Second}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(nil)
	ts.Config = srv.HTTPServer()
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake timeout is expected
	ts.StartTLS()
	t.Cleanup(func() { st.Close(); ts.CloseClientConnections(); ts.Close() })
	raw, err := net.DialTimeout("tcp", ts.Listener.Addr().String(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.Write([]byte{0x16, 0x03, 0x01}) // the start of a ClientHello, and then nothing
	closedBy(t, raw, 60*time.Second, "a stalled TLS handshake")
}

// watchesServed is an Eventually condition: srv serves exactly n watches.
func watchesServed(srv *Server, n int64) func() error {
	return func() error {
		if got := srv.watches.Load(); got != n {
			return fmt.Errorf("%d watches served, want %d", got, n)
		}
		return nil
	}
}
