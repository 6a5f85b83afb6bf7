package images

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/testutil"
)

const agnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"

// once is the result of a built-in image that ran to completion.
type once struct {
	stdout, stderr string
	err            error
}

// runOnce runs image with args until it returns by itself (a one-shot command
// such as `agnhost connect`), as `kubectl exec POD -- /agnhost ...` would.
func runOnce(t *testing.T, image string, args []string, configure func(*container)) once {
	t.Helper()
	b, ok := lookup(parseRef(image))
	if !ok {
		t.Fatalf("%q is not a built-in image", image)
	}
	var stdout, stderr lockedBuffer
	c := newContainer(b.name, map[string]string{}, "127.0.0.1", &stdout, &stderr)
	c.hostname = func() (string, error) { return "web-0", nil }
	if configure != nil {
		configure(c)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	err := c.run(ctx, b, args)
	return once{stdout: stdout.String(), stderr: stderr.String(), err: err}
}

func exitCode(err error) int {
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	if err != nil {
		return -1
	}
	return 0
}

// podRoot makes a container filesystem holding files (path -> content).
func podRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// The pod of the "configurable pod DNS nameservers" spec: dnsPolicy None with
// nameserver 1.1.1.1 and search resolv.conf.local.
const customResolvConf = "nameserver 1.1.1.1\nsearch resolv.conf.local\noptions ndots:5\n"

const clusterResolvConf = "search default.svc.cluster.local svc.cluster.local cluster.local\n" +
	"nameserver 10.96.0.10\nnameserver 10.96.0.11\noptions ndots:5\n"

func TestAgnhostOneShotCommands(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		files      map[string]string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"dns-suffix", []string{"dns-suffix"}, map[string]string{"etc/resolv.conf": customResolvConf},
			0, "resolv.conf.local\n", ""},
		{"dns-suffix lists every domain", []string{"dns-suffix"}, map[string]string{"etc/resolv.conf": clusterResolvConf},
			0, "default.svc.cluster.local,svc.cluster.local,cluster.local\n", ""},
		{"dns-server-list", []string{"dns-server-list"}, map[string]string{"etc/resolv.conf": customResolvConf},
			0, "1.1.1.1\n", ""},
		{"dns-server-list reads the first nameserver line", []string{"dns-server-list"},
			map[string]string{"etc/resolv.conf": clusterResolvConf}, 0, "10.96.0.10\n", ""},
		{"dns-suffix without a search line panics", []string{"dns-suffix"}, map[string]string{"etc/resolv.conf": "nameserver 1.1.1.1\n"},
			2, "", "panic: Could not find DNS search list!\n"},
		{"dns-server-list without resolv.conf panics", []string{"dns-server-list"}, nil,
			2, "", "panic: open "},
		{"etc-hosts", []string{"etc-hosts"}, map[string]string{"etc/hosts": "127.0.0.1\tlocalhost\n10.244.1.5\tweb-0.sub.ns.svc.cluster.local\tweb-0\n"},
			0, "127.0.0.1\tlocalhost\n10.244.1.5\tweb-0.sub.ns.svc.cluster.local\tweb-0\n\n", ""},
		{"help", []string{"--help"}, nil, 0, "Usage:\n  app [command]\n", ""},
		{"no arguments print help", nil, nil, 0, "Usage:\n  app [command]\n", ""},
		{"subcommand help", []string{"dns-suffix", "-h"}, nil, 0, "Usage:\n  app dns-suffix [flags]\n", ""},
		{"klog flags are accepted", []string{"dns-suffix", "--v=4", "--vmodule=x=2", "-v", "2"},
			map[string]string{"etc/resolv.conf": customResolvConf}, 0, "resolv.conf.local\n", ""},
		{"connect needs host:port", []string{"connect", "nocolon"}, nil, 1, "",
			"UNKNOWN: address nocolon: missing port in address\n"},
		{"connect to an unknown service name", []string{"connect", "127.0.0.1:no-such-service-minikit"}, nil, 1, "", "DNS: "},
		{"connect with an unsupported protocol", []string{"connect", "127.0.0.1:80", "--protocol=icmp"}, nil, 1, "",
			"Unsupported protocol\nicmp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := podRoot(t, tt.files)
			got := runOnce(t, agnhostImage, tt.args, func(c *container) { c.root = root })
			if code := exitCode(got.err); code != tt.wantCode {
				t.Errorf("exit code %d (%v), want %d", code, got.err, tt.wantCode)
			}
			if !strings.HasPrefix(got.stdout, tt.wantStdout) || (tt.wantStdout == "" && got.stdout != "") {
				t.Errorf("stdout = %q, want prefix %q", got.stdout, tt.wantStdout)
			}
			if !strings.HasPrefix(got.stderr, tt.wantStderr) || (tt.wantStderr == "" && got.stderr != "") {
				t.Errorf("stderr = %q, want prefix %q", got.stderr, tt.wantStderr)
			}
		})
	}
}

// connect is the NetworkPolicy specs' probe: its exit status is the verdict.
func TestAgnhostConnect(t *testing.T) {
	open, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	udpClosed, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	udpClosedAddr := udpClosed.LocalAddr().String()
	udpClosed.Close()
	server := start(t, agnhostImage, []string{"netexec", "--http-port=0", "--udp-port=0"}, nil)

	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string
	}{
		{"tcp open", []string{"connect", open.Addr().String(), "--timeout=3s"}, 0, ""},
		// cobra lets flags come first or last; the netpol probe puts the address first.
		{"tcp open, flags first", []string{"connect", "--timeout=3s", "--protocol=tcp", open.Addr().String()}, 0, ""},
		{"tcp refused", []string{"connect", "--timeout=3s", closedAddr}, 1, "REFUSED\n"},
		{"udp answered", []string{"connect", "--timeout=3s", "--protocol=udp", server.addr(t, "udp")}, 0, ""},
		{"udp refused", []string{"connect", "--timeout=3s", "--protocol=udp", udpClosedAddr}, 1, "REFUSED: read udp "},
		{"udp unanswered", []string{"connect", "--timeout=200ms", "--protocol=udp", silent.LocalAddr().String()}, 1, "TIMEOUT: read udp "},
		{"sctp", []string{"connect", "--protocol=sctp", open.Addr().String()}, 1, "OTHER: SCTP is not supported by minikit\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runOnce(t, agnhostImage, tt.args, nil)
			if code := exitCode(got.err); code != tt.wantCode {
				t.Errorf("exit code %d (%v), want %d", code, got.err, tt.wantCode)
			}
			if !strings.HasPrefix(got.stderr, tt.wantStderr) || (tt.wantStderr == "" && got.stderr != "") {
				t.Errorf("stderr = %q, want prefix %q", got.stderr, tt.wantStderr)
			}
		})
	}
	// The UDP probe sends --udp-data plus a newline, which netexec takes as "hostname".
	testutil.Eventually(t, waitTimeout, "netexec's log of the probe", contains(&server.stderr, "Sending udp hostName response"))
}

// The DNS specs read /results/<file> through pods/proxy from test-webserver.
func TestAgnhostTestWebserver(t *testing.T) {
	root := podRoot(t, map[string]string{"results/musl_udp@kubernetes.default.svc.cluster.local": "OK\n"})
	r := startWith(t, agnhostImage, []string{"test-webserver", "--port=0"}, nil, func(c *container) { c.root = root })
	base := "http://" + r.addr(t, "tcp")

	got := do(t, http.MethodGet, base+"/results/musl_udp@kubernetes.default.svc.cluster.local", nil)
	if got.status != 200 || got.body != "OK\n" {
		t.Errorf("GET result file = %d %q, want 200 %q", got.status, got.body, "OK\n")
	}
	for k, v := range map[string]string{
		"Cache-Control":                "private",
		"Access-Control-Allow-Origin":  "*",
		"Access-Control-Allow-Methods": "GET, POST, OPTIONS",
	} {
		if got.header.Get(k) != v {
			t.Errorf("header %s = %q, want %q", k, got.header.Get(k), v)
		}
	}
	// A file that the querier writes later is served then, never a 304.
	if got := do(t, http.MethodGet, base+"/results/glibc_udp@x", nil); got.status != 404 {
		t.Errorf("missing file = %d, want 404", got.status)
	}
	if err := os.WriteFile(filepath.Join(root, "results/glibc_udp@x"), []byte("OK\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got = do(t, http.MethodGet, base+"/results/glibc_udp@x", map[string]string{"If-Modified-Since": "Wed, 01 Jan 2100 00:00:00 GMT"})
	if got.status != 200 || got.body != "OK\n" {
		t.Errorf("new file with If-Modified-Since = %d %q, want 200 %q", got.status, got.body, "OK\n")
	}
}

func TestNetexecEndpoints(t *testing.T) {
	r := startWith(t, agnhostImage, []string{"netexec", "--http_port=0", "--udp-port", "0", "--v=2"},
		map[string]string{"NODE_NAME": "node1", "EMPTY": ""}, nil)
	base := "http://" + r.addr(t, "tcp")
	_, httpPort, _ := net.SplitHostPort(r.addr(t, "tcp"))
	_, udpPort, _ := net.SplitHostPort(r.addr(t, "udp"))

	tests := []struct {
		path       string
		header     map[string]string
		wantStatus int
		wantBody   string
	}{
		{"/serverport", nil, 200, httpPort},
		{"/header?key=X-Test", map[string]string{"X-Test": "yes"}, 200, "yes"},
		{"/header", map[string]string{"X-Test": "yes"}, 200,
			`{"Accept":["*/*"],"User-Agent":["curl/8.5.0"],"X-Test":["yes"]}`},
		{"/envvar?var=NODE_NAME", nil, 200, "node1"},
		{"/envvar?var=EMPTY", nil, 200, ""},
		{"/envvar?var=UNSET", nil, 500, "env var \"UNSET\" is not set\n"},
		{"/envvar", nil, 400, "'var' query parameter is required\n"},
		{"/readyz", nil, 200, "ok"},
		{"/healthz", nil, 200, ""},
	}
	for _, tt := range tests {
		got := do(t, http.MethodGet, base+tt.path, tt.header)
		if got.status != tt.wantStatus || got.body != tt.wantBody {
			t.Errorf("GET %s = %d %q, want %d %q", tt.path, got.status, got.body, tt.wantStatus, tt.wantBody)
		}
	}

	udp := []struct{ send, want string }{
		{"serverport", udpPort},
		{"envvar NODE_NAME", "node1"},
		{"ENVVAR NODE_NAME", "node1"},
		{"envvar UNSET", ""},
		{"hostName", "web-0"},
	}
	for _, tt := range udp {
		if got, _ := ask(t, r.addr(t, "udp"), tt.send); got != tt.want {
			t.Errorf("UDP %q = %q, want %q", tt.send, got, tt.want)
		}
	}
}

// The networking specs' DialFromTestContainer, DialEchoFromTestContainer and
// GetEndpointsFromContainer go through /dial with these requests.
func TestNetexecDialAsTheSpecsDo(t *testing.T) {
	server := start(t, agnhostImage, []string{"netexec", "--http-port=0", "--udp-port=0"}, nil)
	target := start(t, agnhostImage, []string{"netexec", "--http-port=0", "--udp-port=0"}, nil)
	_, httpPort, _ := net.SplitHostPort(target.addr(t, "tcp"))
	_, udpPort, _ := net.SplitHostPort(target.addr(t, "udp"))
	tests := []struct {
		query, want string
	}{
		{"request=hostName&protocol=http&host=127.0.0.1&port=" + httpPort + "&tries=1", `{"responses":["web-0"]}`},
		{"request=hostName&protocol=udp&host=127.0.0.1&port=" + udpPort + "&tries=1", `{"responses":["web-0"]}`},
		{"request=echo?msg=hello&protocol=http&host=127.0.0.1&port=" + httpPort + "&tries=1", `{"responses":["hello"]}`},
		{"request=echo%20hello&protocol=udp&host=127.0.0.1&port=" + udpPort + "&tries=1", `{"responses":["hello"]}`},
	}
	for _, tt := range tests {
		got := do(t, http.MethodGet, "http://"+server.addr(t, "tcp")+"/dial?"+tt.query, nil)
		if got.status != 200 || got.body != tt.want {
			t.Errorf("/dial?%s = %d %s, want 200 %s", tt.query, got.status, got.body, tt.want)
		}
	}
}

func TestNetexecUDPListenAddresses(t *testing.T) {
	r := start(t, agnhostImage, []string{"netexec", "--http-port=0", "--udp-port=0",
		"--udp-listen-addresses=127.0.0.1,127.0.0.1"}, nil)
	r.mu.Lock()
	n := len(r.addrs["udp"])
	r.mu.Unlock()
	if n != 1 {
		t.Errorf("%d UDP sockets for a repeated address, want 1", n)
	}
	if got, _ := ask(t, r.addr(t, "udp"), "hostname"); got != "web-0" {
		t.Errorf("hostname = %q", got)
	}
}

// After SIGTERM, --delay-shutdown keeps netexec serving with /readyz failing, so
// the pod leaves the endpoints before it stops answering.
func TestNetexecDelayShutdown(t *testing.T) {
	delay := make(chan time.Time)
	asked := make(chan time.Duration, 1)
	r := startWith(t, agnhostImage, []string{"netexec", "--http-port=0", "--udp-port=0", "--delay-shutdown", "100"}, nil,
		func(c *container) {
			c.after = func(d time.Duration) <-chan time.Time { asked <- d; return delay }
		})
	base := "http://" + r.addr(t, "tcp")
	r.cancel()
	if d := <-asked; d != 100*time.Second {
		t.Errorf("waits %s, want 100s", d)
	}
	if !strings.Contains(r.stderr.String(), "Sleeping 100 seconds before terminating...") {
		t.Errorf("log %q lacks the delay", r.stderr.String())
	}
	if got := do(t, http.MethodGet, base+"/readyz", nil); got.status != 503 || got.body != "shutting down" {
		t.Errorf("/readyz while terminating = %d %q, want 503 %q", got.status, got.body, "shutting down")
	}
	if got := do(t, http.MethodGet, base+"/healthz", nil); got.status != 200 {
		t.Errorf("/healthz while terminating = %d, want 200", got.status)
	}
	if got := do(t, http.MethodGet, base+"/hostname", nil); got.body != "web-0" {
		t.Errorf("/hostname while terminating = %q, want web-0", got.body)
	}
	close(delay)
	if err := r.result(); err != nil {
		t.Errorf("Run = %v after the delay, want nil", err)
	}
}

// serve-hostname serves on for a minute after SIGTERM, until the kubelet kills it.
func TestServeHostnameAwaitsDeletion(t *testing.T) {
	wait := make(chan time.Time)
	asked := make(chan time.Duration, 1)
	r := startWith(t, agnhostImage, []string{"serve-hostname", "--port=0"}, nil, func(c *container) {
		c.after = func(d time.Duration) <-chan time.Time { asked <- d; return wait }
	})
	r.cancel()
	if d := <-asked; d != time.Minute {
		t.Errorf("waits %s, want 1m", d)
	}
	if !strings.Contains(r.stderr.String(), "Awaiting pod deletion.") {
		t.Errorf("log %q lacks the awaiting line", r.stderr.String())
	}
	if got := do(t, http.MethodGet, "http://"+r.addr(t, "tcp")+"/", nil); got.body != "web-0" {
		t.Errorf("after SIGTERM: %q, want web-0", got.body)
	}
	close(wait)
	if err := r.result(); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}

// agnhost pause exits as the real one does on the signal minikit's __image-run
// turns into a cancelled context.
func TestAgnhostPauseSignals(t *testing.T) {
	tests := []struct {
		cause    error
		wantCode int
		wantOut  string
	}{
		{errors.New("terminated signal received"), 2, "exiting because of signal \"terminated\"\n"},
		{errors.New("interrupt signal received"), 1, "exiting because of signal \"interrupt\"\n"},
		{nil, 0, ""},
	}
	for _, tt := range tests {
		b, _ := lookup(parseRef(agnhostImage))
		var stdout lockedBuffer
		c := newContainer(b.name, map[string]string{}, "127.0.0.1", &stdout, &lockedBuffer{})
		ctx, cancel := context.WithCancelCause(t.Context())
		c.ready = func() { cancel(tt.cause) }
		err := c.run(ctx, b, []string{"pause"})
		if code := exitCode(err); code != tt.wantCode {
			t.Errorf("cause %v: exit code %d (%v), want %d", tt.cause, code, err, tt.wantCode)
		}
		if want := "Paused\nSignals registered\n" + tt.wantOut; stdout.String() != want {
			t.Errorf("cause %v: stdout %q, want %q", tt.cause, stdout.String(), want)
		}
	}
}

func TestHttpd(t *testing.T) {
	for _, image := range []string{"httpd:2.4", "registry.k8s.io/e2e-test-images/httpd:2.4.39-4"} {
		r := start(t, image, nil, map[string]string{"MINIKIT_PORT": "0"})
		base := "http://" + r.addr(t, "tcp")
		if got := do(t, http.MethodGet, base+"/", nil); got.status != 200 || got.body != httpdPage {
			t.Errorf("%s GET / = %d %q", image, got.status, got.body)
		}
		if got := do(t, http.MethodGet, base+"/nope", nil); got.status != 404 || !strings.Contains(got.body, "<h1>Not Found</h1>") {
			t.Errorf("%s GET /nope = %d %q", image, got.status, got.body)
		}
		want := `127.0.0.1 - - [02/Dec/2026:15:40:01 +0000] "GET / HTTP/1.1" 200 45` + "\n" +
			`127.0.0.1 - - [02/Dec/2026:15:40:01 +0000] "GET /nope HTTP/1.1" 404 196` + "\n"
		testutil.Eventually(t, waitTimeout, "two access log lines", lines(&r.stdout, 2))
		if got := r.stdout.String(); got != want {
			t.Errorf("%s access log:\n%s\nwant:\n%s", image, got, want)
		}
	}
}
