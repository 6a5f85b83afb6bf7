package apiserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/apiserver/validation"
	"github.com/minikit/minikit/internal/store"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/client-go/util/exec"
	cspf "k8s.io/cri-streaming/pkg/streaming/portforward"
	csrc "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

const (
	streamAPIToken  = "api-token"
	streamNodeToken = "node-token"
)

// viaPortHeader marks the requests the fake agent gets through its port.
const viaPortHeader = "X-Test-Via-Port"

// fakeAgent is a kubelet-like endpoint serving exec and port-forward through
// cri-streaming, as the node agent does, with an in-process "container": it
// records what the API server asked for.
type fakeAgent struct {
	echoAddr string // where port-forward connects

	mu    sync.Mutex
	paths []string
	auth  []bool
	tcp   []bool // reached through its port rather than called in process

	refuse string // if set, port-forwards are refused with this (as a pod without a sandbox is)
}

func (f *fakeAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		_, tok, ok = r.BasicAuth()
	}
	f.mu.Lock()
	f.paths = append(f.paths, r.URL.Path+"?"+r.URL.RawQuery)
	f.auth = append(f.auth, ok && tok == streamNodeToken)
	f.tcp = append(f.tcp, r.Header.Get(viaPortHeader) != "")
	f.mu.Unlock()
	if !ok || tok != streamNodeToken {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case parts[0] == "exec" && len(parts) == 4:
		if parts[3] != "app" {
			http.Error(w, fmt.Sprintf("container not found (%q)", parts[3]), http.StatusInternalServerError)
			return
		}
		opts, err := csrc.NewOptions(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		csrc.ServeExec(w, r, f, parts[2], "uid", parts[3], r.URL.Query()["command"], opts, time.Minute, 10*time.Second, csrc.SupportedStreamingProtocols)
	case parts[0] == "attach" && len(parts) == 4:
		opts, err := csrc.NewOptions(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		csrc.ServeAttach(w, r, f, parts[2], "uid", parts[3], opts, time.Minute, 10*time.Second, csrc.SupportedStreamingProtocols)
	case parts[0] == "portForward" && len(parts) == 3 && f.refusal() != "":
		http.Error(w, f.refusal(), http.StatusInternalServerError)
	case parts[0] == "portForward" && len(parts) == 3:
		opts, err := cspf.NewV4Options(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		cspf.ServePortForward(w, r, f, parts[2], "uid", opts, time.Minute, 10*time.Second, cspf.SupportedProtocols)
	default:
		http.NotFound(w, r)
	}
}

// ExecInContainer runs a tiny command language: "exit N", "cat" (stdin to
// stdout), "echo ARGS..." and "err ARGS..." (to stderr).
func (f *fakeAgent) ExecInContainer(ctx context.Context, _, _, _ string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan csrc.TerminalSize, _ time.Duration) error {
	switch cmd[0] {
	case "exit":
		n, _ := strconv.Atoi(cmd[1])
		return utilexec.CodeExitError{Err: fmt.Errorf("exit %d", n), Code: n}
	case "cat":
		_, err := io.Copy(out, in)
		return err
	case "echo":
		_, err := io.WriteString(out, strings.Join(cmd[1:], " ")+"\n")
		return err
	case "err":
		_, err := io.WriteString(errOut, strings.Join(cmd[1:], " ")+"\n")
		return err
	}
	return utilexec.CodeExitError{Err: errors.New("not found"), Code: 127}
}

// AttachContainer is a container that upper-cases its stdin.
func (f *fakeAgent) AttachContainer(ctx context.Context, _, _, _ string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan csrc.TerminalSize) error {
	b, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	_, err = out.Write(bytes.ToUpper(b))
	return err
}

func (f *fakeAgent) PortForward(ctx context.Context, _, _ string, port int32, stream io.ReadWriteCloser) error {
	c, err := net.Dial("tcp", f.echoAddr)
	if err != nil {
		return err
	}
	defer c.Close()
	go io.Copy(c, stream)
	io.Copy(stream, c)
	return nil
}

// streamEnv is an API server requiring a token, a node whose agent is a
// fakeAgent on loopback, and pod "web" (one container, on that node) and
// "two" (two containers).
type streamEnv struct {
	api   *testAPI
	agent *fakeAgent
	cfg   *rest.Config
}

func newStreamEnv(t *testing.T) *streamEnv {
	st, err := store.OpenBolt(filepath.Join(t.TempDir(), "db"), 0)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Store: st, Validation: validation.DefaultConfig(), Version: "test",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Token: streamAPIToken, NodeToken: streamNodeToken})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	a := &testAPI{t: t, store: st, srv: srv, http: hs, url: hs.URL, client: &http.Client{}}
	t.Cleanup(a.close)

	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { echo.Close() })
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	fa := &fakeAgent{echoAddr: echo.Addr().String()}
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set(viaPortHeader, "1")
		fa.ServeHTTP(w, r)
	}))
	t.Cleanup(agent.Close)
	ap := netip.MustParseAddrPort(agent.Listener.Addr().String())

	auth := "Bearer " + streamAPIToken
	n := newNode("node1")
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ap.Addr().String()}}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(ap.Port())
	a.do(http.MethodPost, "/api/v1/nodes", "application/json", n, "Authorization", auth).mustCode(t, http.StatusCreated, nil)
	a.do(http.MethodPost, "/api/v1/namespaces/default/pods", "application/json", newPod("web", "node1", nil), "Authorization", auth).mustCode(t, http.StatusCreated, nil)
	two := newPod("two", "node1", nil)
	two.Spec.Containers = append(two.Spec.Containers, corev1.Container{Name: "side", Image: "nginx:1.27"})
	a.do(http.MethodPost, "/api/v1/namespaces/default/pods", "application/json", two, "Authorization", auth).mustCode(t, http.StatusCreated, nil)
	return &streamEnv{api: a, agent: fa, cfg: &rest.Config{Host: hs.URL, BearerToken: streamAPIToken}}
}

func (e *streamEnv) execURL(pod string, q url.Values) *url.URL {
	u, _ := url.Parse(e.api.url + "/api/v1/namespaces/default/pods/" + pod + "/exec?" + q.Encode())
	return u
}

func execQuery(stdin bool, cmd ...string) url.Values {
	q := url.Values{"command": cmd, "stdout": {"true"}, "stderr": {"true"}}
	if stdin {
		q.Set("stdin", "true")
	}
	return q
}

// executors are the two clients kubectl has: SPDY (kubectl before 1.30, and
// its fallback) and WebSocket v5 (kubectl 1.30+).
func (e *streamEnv) executors(t *testing.T, u *url.URL) map[string]remotecommand.Executor {
	spdyExec, err := remotecommand.NewSPDYExecutor(e.cfg, http.MethodPost, u)
	if err != nil {
		t.Fatal(err)
	}
	wsExec, err := remotecommand.NewWebSocketExecutor(e.cfg, http.MethodGet, u.String())
	if err != nil {
		t.Fatal(err)
	}
	return map[string]remotecommand.Executor{"spdy": spdyExec, "websocket": wsExec}
}

func TestStreamExec(t *testing.T) {
	e := newStreamEnv(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		cmd     []string
		stdin   string
		stdout  string
		stderr  string
		exit    int
		wantErr string
	}{
		{name: "exit code", cmd: []string{"exit", "3"}, exit: 3},
		{name: "stdout", cmd: []string{"echo", "hello", "world"}, stdout: "hello world\n"},
		{name: "stderr", cmd: []string{"err", "oops"}, stderr: "oops\n"},
		{name: "stdin to eof", cmd: []string{"cat"}, stdin: strings.Repeat("0123456789", 10000), stdout: strings.Repeat("0123456789", 10000)},
	} {
		for proto, ex := range e.executors(t, e.execURL("web", execQuery(tc.stdin != "", tc.cmd...))) {
			t.Run(tc.name+"/"+proto, func(t *testing.T) {
				var out, errOut bytes.Buffer
				opts := remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut}
				if tc.stdin != "" {
					opts.Stdin = strings.NewReader(tc.stdin)
				}
				err := ex.StreamWithContext(ctx, opts)
				var ce exec.CodeExitError
				switch {
				case tc.exit != 0:
					if !errors.As(err, &ce) || ce.Code != tc.exit {
						t.Fatalf("got error %v (%T), want exit code %d", err, err, tc.exit)
					}
				case err != nil:
					t.Fatalf("exec: %v", err)
				}
				if out.String() != tc.stdout || errOut.String() != tc.stderr {
					t.Errorf("stdout %q (%d bytes), stderr %q; want %q (%d bytes), %q", trunc(out.String()), out.Len(), errOut.String(), trunc(tc.stdout), len(tc.stdout), tc.stderr)
				}
			})
		}
	}
	e.agent.mu.Lock()
	defer e.agent.mu.Unlock()
	for i, p := range e.agent.paths {
		if !e.agent.auth[i] {
			t.Errorf("agent request %s did not carry the node token", p)
		}
	}
	want := "/exec/default/web/app?command=exit&command=3&error=1&output=1"
	if len(e.agent.paths) == 0 || e.agent.paths[0] != want {
		t.Errorf("agent got %v first, want %s", e.agent.paths, want)
	}
}

func trunc(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

func TestStreamExecErrors(t *testing.T) {
	e := newStreamEnv(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name, pod string
		q         url.Values
		want      string
	}{
		{"no container named", "two", execQuery(false, "echo"), "a container name must be specified for pod two, choose one of: [app side]"},
		{"unknown container", "web", func() url.Values { q := execQuery(false, "echo"); q.Set("container", "nope"); return q }(), "container nope is not valid for pod web"},
		{"container not running", "two", func() url.Values { q := execQuery(false, "echo"); q.Set("container", "side"); return q }(), `container not found ("side")`},
		{"no command", "web", execQuery(false), "you must specify at least one command for the container"},
		{"missing pod", "nope", execQuery(false, "echo"), `pods "nope" not found`},
	} {
		for proto, ex := range e.executors(t, e.execURL(tc.pod, tc.q)) {
			t.Run(tc.name+"/"+proto, func(t *testing.T) {
				err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard})
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got error %v, want one containing %q", err, tc.want)
				}
			})
		}
	}

	// Without the token nothing reaches the agent.
	before := len(e.agent.paths)
	noauth := &rest.Config{Host: e.cfg.Host}
	u := e.execURL("web", execQuery(false, "echo", "hi"))
	spdyExec, _ := remotecommand.NewSPDYExecutor(noauth, http.MethodPost, u)
	wsExec, _ := remotecommand.NewWebSocketExecutor(noauth, http.MethodGet, u.String())
	for name, ex := range map[string]remotecommand.Executor{"spdy": spdyExec, "websocket": wsExec} {
		err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard})
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "unauthorized") {
			t.Errorf("%s without token: got %v, want Unauthorized", name, err)
		}
	}
	e.agent.mu.Lock()
	if len(e.agent.paths) != before {
		t.Errorf("requests without a token reached the agent: %v", e.agent.paths[before:])
	}
	e.agent.mu.Unlock()

	// A plain (non-upgrade) request is refused.
	r := e.api.do(http.MethodPost, u.RequestURI(), "", nil, "Authorization", "Bearer "+streamAPIToken)
	if r.code != http.StatusBadRequest {
		t.Errorf("non-upgrade exec: got %d %s, want 400", r.code, r.body)
	}
}

func TestStreamPortForward(t *testing.T) {
	e := newStreamEnv(t)
	u, _ := url.Parse(e.api.url + "/api/v1/namespaces/default/pods/web/portforward")
	tr, upgrader, err := spdy.RoundTripperFor(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	spdyDialer := spdy.NewDialer(upgrader, &http.Client{Transport: tr}, http.MethodPost, u)
	wsDialer, err := portforward.NewSPDYOverWebsocketDialer(u, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The agent is reached over TCP, or called in process when it runs in
	// the API server's process for the pod's node; an in-process agent of
	// another node is never called.
	otherNode := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the agent of node9 was called for %s", r.URL)
		http.Error(w, "wrong node", http.StatusInternalServerError)
	})
	for _, agent := range []struct {
		name    string
		node    string
		handler http.Handler
		tcp     bool
	}{{"over TCP", "", nil, true}, {"in process", "node1", e.agent, false}, {"in process for another node", "node9", otherNode, true}} {
		if agent.handler != nil {
			e.api.srv.SetLocalAgent(agent.node, agent.handler)
		}
		for name, dialer := range map[string]httpstream.Dialer{"spdy": spdyDialer, "websocket": wsDialer} {
			t.Run(agent.name+"/"+name, func(t *testing.T) {
				portForwardEcho(t, e, dialer, agent.tcp)
			})
		}
	}
}

// portForwardEcho forwards a local port to port 8080 of pod web through
// dialer and checks that 10 connections at once are echoed, and that the
// agent got the port-forward with the node token, through its port or not.
func portForwardEcho(t *testing.T, e *streamEnv, dialer httpstream.Dialer, tcp bool) {
	e.agent.mu.Lock()
	seen := len(e.agent.paths)
	e.agent.mu.Unlock()
	{
		{
			stop, ready := make(chan struct{}), make(chan struct{})
			pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:8080"}, stop, ready, io.Discard, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- pf.ForwardPorts() }()
			select {
			case <-ready:
			case err := <-done:
				t.Fatalf("port-forward ended: %v", err)
			case <-time.After(30 * time.Second):
				t.Fatal("port-forward not ready")
			}
			defer func() { close(stop); <-done }()
			ports, err := pf.GetPorts()
			if err != nil {
				t.Fatal(err)
			}
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local)))
			var wg sync.WaitGroup
			errs := make(chan error, 10)
			for i := range 10 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := net.Dial("tcp", addr)
					if err != nil {
						errs <- err
						return
					}
					defer c.Close()
					msg := fmt.Sprintf("connection %d says hello\n", i)
					c.Write([]byte(msg))
					buf := make([]byte, len(msg))
					c.SetReadDeadline(time.Now().Add(20 * time.Second))
					if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
						errs <- fmt.Errorf("connection %d: read %q, %v", i, buf, err)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		}
	}
	e.agent.mu.Lock()
	defer e.agent.mu.Unlock()
	if len(e.agent.paths) != seen+1 || e.agent.paths[seen] != "/portForward/default/web?" || !e.agent.auth[seen] || e.agent.tcp[seen] != tcp {
		t.Errorf("the agent got %q (token %v, through its port %v), want one /portForward/default/web with the node token (through its port %v)",
			e.agent.paths[seen:], e.agent.auth[seen:], e.agent.tcp[seen:], tcp)
	}
}

func (f *fakeAgent) refusal() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refuse
}

// TestStreamPortForwardRefused: the agent's refusal reaches the client, from
// an agent reached over TCP or called in process.
func TestStreamPortForwardRefused(t *testing.T) {
	e := newStreamEnv(t)
	const msg = `pod "default/web" has no running sandbox`
	e.agent.mu.Lock()
	e.agent.refuse = msg
	e.agent.mu.Unlock()
	u, _ := url.Parse(e.api.url + "/api/v1/namespaces/default/pods/web/portforward")
	tr, upgrader, err := spdy.RoundTripperFor(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	spdyDialer := spdy.NewDialer(upgrader, &http.Client{Transport: tr}, http.MethodPost, u)
	wsDialer, err := portforward.NewSPDYOverWebsocketDialer(u, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, agent := range []string{"over TCP", "in process"} {
		if agent == "in process" {
			e.api.srv.SetLocalAgent("node1", e.agent)
		}
		for name, dialer := range map[string]httpstream.Dialer{"spdy": spdyDialer, "websocket": wsDialer} {
			t.Run(agent+"/"+name, func(t *testing.T) {
				c, _, err := dialer.Dial(portforward.PortForwardProtocolV1Name)
				if err == nil {
					c.Close()
					t.Fatal("the port-forward was upgraded, want the agent's refusal")
				}
				if !strings.Contains(err.Error(), msg) {
					t.Errorf("got %v, want the agent's %q", err, msg)
				}
			})
		}
	}
}

func TestStreamAttach(t *testing.T) {
	e := newStreamEnv(t)
	u, _ := url.Parse(e.api.url + "/api/v1/namespaces/default/pods/web/attach?stdin=true&stdout=true")
	for proto, ex := range e.executors(t, u) {
		var out bytes.Buffer
		err := ex.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdin: strings.NewReader("hello"), Stdout: &out})
		if err != nil || out.String() != "HELLO" {
			t.Errorf("%s attach: got %q, %v; want HELLO", proto, out.String(), err)
		}
	}
	e.agent.mu.Lock()
	defer e.agent.mu.Unlock()
	want := "/attach/default/web/app?input=1&output=1"
	if len(e.agent.paths) == 0 || e.agent.paths[0] != want {
		t.Errorf("agent got %v, want %s first", e.agent.paths, want)
	}
}

// TestStreamDefaultContainer: with the kubectl.kubernetes.io/default-container
// annotation, a pod of several containers needs no container name.
func TestStreamDefaultContainer(t *testing.T) {
	e := newStreamEnv(t)
	auth := "Bearer " + streamAPIToken
	p := newPod("annotated", "node1", nil)
	p.Annotations = map[string]string{defaultContainerAnnotation: "app"}
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "side", Image: "nginx:1.27"})
	e.api.do(http.MethodPost, "/api/v1/namespaces/default/pods", "application/json", p, "Authorization", auth).mustCode(t, http.StatusCreated, nil)
	for proto, ex := range e.executors(t, e.execURL("annotated", execQuery(false, "echo", "hi"))) {
		var out bytes.Buffer
		if err := ex.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: &out, Stderr: io.Discard}); err != nil || out.String() != "hi\n" {
			t.Errorf("%s: got %q, %v", proto, out.String(), err)
		}
	}
	e.agent.mu.Lock()
	defer e.agent.mu.Unlock()
	for _, got := range e.agent.paths {
		if !strings.HasPrefix(got, "/exec/default/annotated/app?") {
			t.Errorf("agent got %s, want the annotated container app", got)
		}
	}
}

func TestStreamDiscovery(t *testing.T) {
	e := newStreamEnv(t)
	var list metav1.APIResourceList
	e.api.do(http.MethodGet, "/api/v1", "", nil, "Authorization", "Bearer "+streamAPIToken).mustCode(t, http.StatusOK, &list)
	found := map[string]metav1.Verbs{}
	for _, r := range list.APIResources {
		found[r.Name] = r.Verbs
	}
	for _, sub := range []string{"pods/exec", "pods/attach", "pods/portforward"} {
		if v := found[sub]; len(v) != 2 || v[0] != "create" || v[1] != "get" {
			t.Errorf("discovery: %s has verbs %v, want [create get]", sub, v)
		}
	}
}
