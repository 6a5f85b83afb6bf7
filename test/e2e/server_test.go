package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	"k8s.io/client-go/tools/clientcmd"
)

// minikitBin is the binary TestMain builds once for every test.
var minikitBin string

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	flag.Parse()
	dir, err := os.MkdirTemp("", "minikit-e2e-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: creating build dir: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "minikit")
	// `go test` puts the go command that runs it first on PATH.
	build := exec.Command("go", "build", "-o", bin, "github.com/minikit/minikit/cmd/minikit")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	start := time.Now()
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: building minikit: %v\n", err)
		return 1
	}
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "e2e: built minikit in %v\n", time.Since(start).Round(time.Millisecond))
	}
	minikitBin = bin
	return m.Run()
}

// Deadlines for polled conditions. They are generous because the machine may be busy;
// a passing run never waits for them.
const (
	startTimeout = 30 * time.Second
	exitTimeout  = 10 * time.Second
)

// serverProc is one `minikit server` process on a data dir, restartable on the same
// dir. Only the test goroutine may call its methods, except sigkill.
type serverProc struct {
	t       testing.TB
	dataDir string
	listen  string
	logs    *testenv.Buffer // stderr of every incarnation, in order
	starts  int

	mu     sync.Mutex // guards cmd and exited, which restart replaces
	cmd    *exec.Cmd
	exited chan struct{}

	// Set by each start from what the server printed and the kubeconfig it wrote.
	URL        string
	Kubeconfig string
	Token      string // empty on loopback, where the kubeconfig carries no credentials
	CAData     []byte // empty on loopback
	Client     *http.Client
}

// startServer runs `minikit server` on a free loopback port with dataDir and returns
// once /readyz answers. The process is killed in t.Cleanup.
func startServer(t testing.TB, dataDir string) *serverProc {
	t.Helper()
	return startServerListen(t, dataDir, "127.0.0.1:0")
}

// startServerListen is startServer with an explicit --listen address. Port 0 lets the
// kernel choose; the server prints and writes into the kubeconfig the real port.
func startServerListen(t testing.TB, dataDir, listen string) *serverProc {
	t.Helper()
	p := &serverProc{t: t, dataDir: dataDir, listen: listen, logs: &testenv.Buffer{}}
	t.Cleanup(p.cleanup)
	p.start()
	return p
}

var readyLine = regexp.MustCompile(`minikit server ready at (\S+)`)

func (p *serverProc) start() {
	t := p.t
	t.Helper()
	p.starts++
	fmt.Fprintf(p.logs, "=== start %d: minikit server --data-dir %s --listen %s\n", p.starts, p.dataDir, p.listen)
	stdout := &testenv.Buffer{}
	// API and controllers only: these tests run in the root namespace, where a node
	// agent would create cni0 and rules; pod tests run in labs.
	cmd := exec.Command(minikitBin, "server", "--data-dir", p.dataDir, "--listen", p.listen, "--disable-agent")
	cmd.Stdout, cmd.Stderr = stdout, p.logs
	setParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting minikit server: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()

	// A restart finds the previous incarnation's kubeconfig already there, so the
	// signal is the ready line, which the server prints after writing the kubeconfig.
	var url string
	testutil.Eventually(t, startTimeout, "minikit server to print its ready line", func() error {
		select {
		case <-exited:
			t.Fatalf("minikit server exited before it was ready (%v); logs:\n%s", cmd.ProcessState, p.logs)
		default:
		}
		m := readyLine.FindStringSubmatch(stdout.String())
		if m == nil {
			return errors.New("stdout: " + stdout.String())
		}
		url = m[1]
		return nil
	})
	p.URL = url
	p.Kubeconfig = filepath.Join(p.dataDir, "kubeconfig")
	p.loadKubeconfig()
	testutil.Eventually(t, startTimeout, "GET "+p.URL+"/readyz to answer ok", func() error {
		resp, body, err := p.do(http.MethodGet, "/readyz", nil)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || string(body) != "ok" {
			return fmt.Errorf("%s %q", resp.Status, body)
		}
		return nil
	})
}

// loadKubeconfig reads the kubeconfig the server wrote and builds a client from it,
// the way kubectl would: trust only its CA, send its token.
func (p *serverProc) loadKubeconfig() {
	t := p.t
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(p.Kubeconfig)
	if err != nil {
		t.Fatalf("server printed ready but its kubeconfig is unusable: %v", err)
	}
	kctx := cfg.Contexts[cfg.CurrentContext]
	if kctx == nil || cfg.Clusters[kctx.Cluster] == nil || cfg.AuthInfos[kctx.AuthInfo] == nil {
		t.Fatalf("kubeconfig %s: current context %q does not name a cluster and a user", p.Kubeconfig, cfg.CurrentContext)
	}
	cluster, user := cfg.Clusters[kctx.Cluster], cfg.AuthInfos[kctx.AuthInfo]
	if cluster.Server != p.URL {
		t.Fatalf("kubeconfig %s points at %s, the server said it is ready at %s", p.Kubeconfig, cluster.Server, p.URL)
	}
	p.Token, p.CAData = user.Token, cluster.CertificateAuthorityData
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 100, IdleConnTimeout: 30 * time.Second}
	if len(p.CAData) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(p.CAData) {
			t.Fatalf("kubeconfig %s: certificate-authority-data holds no PEM certificate", p.Kubeconfig)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	if p.Client != nil {
		p.Client.CloseIdleConnections()
	}
	p.Client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// do sends one request to the current incarnation with the kubeconfig's credentials;
// a non-nil body is sent as JSON.
func (p *serverProc) do(method, path string, body []byte) (*http.Response, []byte, error) {
	return doRequest(p.Client, method, p.URL+path, p.Token, body)
}

func doRequest(c *http.Client, method, url, token string, body []byte) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp, b, fmt.Errorf("reading response to %s %s: %w", method, url, err)
	}
	return resp, b, nil
}

// sigkill sends SIGKILL to the current incarnation. It is safe from any goroutine.
func (p *serverProc) sigkill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return errors.New("server not started")
	}
	return p.cmd.Process.Signal(syscall.SIGKILL)
}

// waitKilled waits for the current incarnation to exit and checks that SIGKILL is
// what ended it, not a crash of its own.
func (p *serverProc) waitKilled() {
	t := p.t
	t.Helper()
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	select {
	case <-exited:
	case <-time.After(exitTimeout):
		t.Fatalf("minikit server (pid %d) still running %v after SIGKILL", cmd.Process.Pid, exitTimeout)
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("minikit server ended with %v, want killed by SIGKILL; logs:\n%s", cmd.ProcessState, p.logs)
	}
}

// kill9 kills the server as a power cut would: no shutdown, no final writes.
func (p *serverProc) kill9() {
	p.t.Helper()
	if err := p.sigkill(); err != nil {
		p.t.Fatalf("sending SIGKILL to minikit server: %v (had it exited? logs:\n%s)", err, p.logs)
	}
	p.waitKilled()
}

// running reports whether the current incarnation has not exited.
func (p *serverProc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// restart starts a new incarnation on the same data dir and --listen address, killing
// the current one first if it is still running. With port 0 the port changes; URL,
// Kubeconfig and Client follow.
func (p *serverProc) restart() {
	p.t.Helper()
	if p.running() {
		p.kill9()
	}
	p.start()
}

func (p *serverProc) cleanup() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd != nil {
		cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(exitTimeout):
			p.t.Errorf("minikit server pid %d did not exit after SIGKILL", cmd.Process.Pid)
		}
	}
	if p.Client != nil {
		p.Client.CloseIdleConnections()
	}
	if p.t.Failed() {
		p.t.Logf("minikit server logs (%s):\n%s", p.dataDir, tail(p.logs.String(), 16<<10))
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	if j := strings.IndexByte(s[i:], '\n'); j >= 0 {
		i += j + 1
	}
	return "...\n" + s[i:]
}
