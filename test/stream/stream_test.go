// Package stream drives the real kubectl (the current one, which speaks
// WebSocket, and Debian's 1.20, which speaks SPDY only) through exec, attach,
// run -i, cp and port-forward against a lab: through the lab API's loopback
// forwarder, the API server's bridges and the node agent's kubelet endpoints
// into pods' namespaces.
package stream

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/test/testenv"

	"github.com/creack/pty"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
)

// Kubectl120 is where scripts/deps.sh extracts Debian's kubernetes-client
// (kubectl 1.20), next to and not over the system's kubectl.
const Kubectl120 = "/var/cache/minikit/kubectl-1.20/usr/bin/kubectl"

// manifest: a shell pod for exec and cp, an HTTP server behind a Service for
// port-forward and DNS, and a pod reading its stdin for attach.
const manifest = `apiVersion: v1
kind: Pod
metadata:
  name: shell
spec:
  containers:
  - name: shell
    image: busybox
    command: ["sleep", "3600"]
---
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels:
    app: web
spec:
  containers:
  - name: web
    image: registry.k8s.io/serve_hostname
    ports:
    - containerPort: 9376
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector:
    app: web
  ports:
  - port: 80
    targetPort: 9376
---
apiVersion: v1
kind: Pod
metadata:
  name: att
spec:
  containers:
  - name: att
    image: busybox
    stdin: true
    command: ["sh", "-c", "while read l; do echo \"echo:$l\"; done"]
`

// kubectl is one kubectl binary pointed at the lab.
type kubectl struct {
	name, path, kubeconfig string
	minor                  int // the client's minor version: which protocols it speaks
}

// clientMinor asks a kubectl binary for its minor version (1.20's
// `version --client -o json` says "minor":"20").
func clientMinor(t testing.TB, path string) int {
	out, err := exec.Command(path, "version", "--client", "-o", "json").Output()
	if err != nil {
		t.Fatalf("%s version --client: %v", path, err)
	}
	var v struct {
		ClientVersion struct{ Minor string } `json:"clientVersion"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%s version --client: %v: %s", path, err, out)
	}
	minor, err := strconv.Atoi(strings.TrimRight(v.ClientVersion.Minor, "+"))
	if err != nil {
		t.Fatalf("%s version --client: minor %q: %v", path, v.ClientVersion.Minor, err)
	}
	return minor
}

func (k kubectl) cmd(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, k.path, append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
}

func (k kubectl) run(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := k.cmd(ctx, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s %v: %v\n%s", k.name, args, err, out)
	}
	return string(out)
}

func kubectls(t testing.TB, l *lab.Lab) []kubectl {
	cur, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl not on PATH (scripts/deps.sh installs it): %v", err)
	}
	if _, err := os.Stat(Kubectl120); err != nil {
		t.Fatalf("Debian's kubectl 1.20 is missing (scripts/deps.sh extracts it): %v", err)
	}
	// On a new Debian machine the kubectl on PATH is that same 1.20: the
	// protocol checks follow each binary's version, not its place.
	return []kubectl{{"current", cur, l.Kubeconfig(), clientMinor(t, cur)}, {"1.20", Kubectl120, l.Kubeconfig(), clientMinor(t, Kubectl120)}}
}

// setup brings up a one-node lab with the manifest's pods ready.
func setup(t testing.TB) (*lab.Lab, []kubectl) {
	l := testenv.NewLab(t, 1)
	ks := kubectls(t, l)
	apply := ks[0].cmd(context.Background(), "apply", "-f", "-")
	apply.Stdin = strings.NewReader(manifest)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	c := testenv.Client(t, l)
	for _, p := range []string{"shell", "web", "att"} {
		testenv.WaitPodReady(t, c, "default", p)
	}
	return l, ks
}

func TestKubectlStreaming(t *testing.T) {
	l, ks := setup(t)
	c := testenv.Client(t, l)
	svc, err := c.CoreV1().Services("default").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("exec without token", func(t *testing.T) {
		noToken(t, l)
	})
	for _, k := range ks {
		t.Run(k.name, func(t *testing.T) {
			t.Run("exec exit code", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				out, err := k.cmd(ctx, "exec", "shell", "--", "sh", "-c", "echo out; echo err >&2; exit 3").CombinedOutput()
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 3 {
					t.Fatalf("got %v, want exit status 3\n%s", err, out)
				}
				if !strings.Contains(string(out), "out\n") || !strings.Contains(string(out), "err\n") {
					t.Errorf("stdout and stderr missing from %q", out)
				}
			})
			t.Run("exec protocol", func(t *testing.T) {
				// kubectl ≥ 1.30 speaks WebSocket (v5.channel.k8s.io, a GET)
				// and must not fall back to SPDY; older ones POST SPDY.
				out := k.run(t, "-v=6", "exec", "shell", "--", "true")
				want := regexp.MustCompile(`POST https?://[^ ]*/pods/shell/exec\?`)
				if k.minor >= 30 {
					want = regexp.MustCompile(`GET https?://[^ ]*/pods/shell/exec\?`)
				}
				if !want.MatchString(out) || strings.Contains(strings.ToLower(out), "fallback") {
					t.Errorf("kubectl %s -v=6 exec: no %s, or a fallback:\n%s", k.name, want, out)
				}
			})
			t.Run("exec cat resolv.conf", func(t *testing.T) {
				out := k.run(t, "exec", "shell", "--", "cat", "/etc/resolv.conf")
				// The pod's file (cluster DNS search path), not the node's.
				if !strings.Contains(out, "search default.svc.cluster.local") {
					t.Errorf("pod resolv.conf lacks the cluster search path:\n%s", out)
				}
			})
			t.Run("exec tty", func(t *testing.T) {
				ttySession(t, k, svc.Spec.ClusterIP)
			})
			t.Run("cp", func(t *testing.T) {
				copyRoundTrip(t, k)
			})
			t.Run("run -i --rm", func(t *testing.T) {
				runRemoved(t, l, k)
			})
			t.Run("run -it --rm", func(t *testing.T) {
				runTerminal(t, l, k)
			})
			t.Run("attach", func(t *testing.T) {
				attach(t, k)
			})
			for _, target := range []string{"pod/web", "svc/web"} {
				t.Run("port-forward "+target, func(t *testing.T) {
					port := ":9376"
					if target == "svc/web" {
						port = ":80"
					}
					local, stop, log := portForwardLog(t, k, target, port, "-v=6")
					defer stop()
					n, errs := load(local, 1000, 20)
					if errs != nil {
						t.Fatalf("%d requests through port-forward, %d errors; first: %v", n, len(errs), errs[0])
					}
					// kubectl ≥ 1.31 tunnels SPDY in WebSocket (a GET); older ones POST SPDY.
					want := regexp.MustCompile(`POST https?://[^ ]*/pods/web/portforward`)
					if k.minor >= 31 {
						want = regexp.MustCompile(`GET https?://[^ ]*/pods/web/portforward`)
					}
					if out := log.String(); !want.MatchString(out) || strings.Contains(strings.ToLower(out), "fallback") {
						t.Errorf("kubectl %s -v=6 port-forward: no %s, or a fallback:\n%s", k.name, want, out)
					}
				})
			}
		})
	}
}

// noToken sends an exec, as both kubectls would, without credentials to the
// lab's API (which is off loopback from the API server's side of the
// forwarder): 401, and the command never runs.
func noToken(t *testing.T, l *lab.Lab) {
	rc, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	anon := rest.AnonymousClientConfig(rc)
	suffix := make([]byte, 4)
	rand.Read(suffix)
	marker := "/tmp/minikit-noauth-" + hex.EncodeToString(suffix)
	t.Cleanup(func() { os.Remove(marker) })
	q := url.Values{"command": {"touch", marker}, "stdout": {"true"}, "stderr": {"true"}}
	u, err := url.Parse(rc.Host + "/api/v1/namespaces/default/pods/shell/exec?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	spdyExec, err := remotecommand.NewSPDYExecutor(anon, http.MethodPost, u)
	if err != nil {
		t.Fatal(err)
	}
	wsExec, err := remotecommand.NewWebSocketExecutor(anon, http.MethodGet, u.String())
	if err != nil {
		t.Fatal(err)
	}
	for name, ex := range map[string]remotecommand.Executor{"spdy": spdyExec, "websocket": wsExec} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard})
		cancel()
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "unauthorized") {
			t.Errorf("%s exec without a token: got %v, want Unauthorized", name, err)
		}
	}
	// The pod's mount namespace shares the node's /tmp.
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the unauthenticated exec ran: %s exists (%v)", marker, err)
	}
	// The same exec with the token does run, so the check above is meaningful.
	withToken, err := remotecommand.NewWebSocketExecutor(rc, http.MethodGet, u.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := withToken.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard}); err != nil {
		t.Fatalf("exec with the token: %v", err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the authenticated exec did not create %s: %v", marker, err)
	}
}

// ttySession runs an interactive shell under a terminal, as a user at a
// keyboard: the terminal's size reaches the pod, a Service name resolves
// through cluster DNS, and exit ends the session with status 0.
func ttySession(t *testing.T, k kubectl, clusterIP string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := k.cmd(ctx, "exec", "-it", "shell", "--", "sh")
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 41, Cols: 113})
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	var out testenv.Buffer
	go io.Copy(&out, ptmx)
	waitFor := func(what, want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(out.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %q never appeared in the session:\n%s", what, want, out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	io.WriteString(ptmx, "stty size\n")
	waitFor("terminal size", "41 113")
	io.WriteString(ptmx, "nslookup web.default.svc.cluster.local\n")
	waitFor("nslookup of the Service", "Address: "+clusterIP)
	io.WriteString(ptmx, "exit\n")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("session ended with %v:\n%s", err, out.String())
	}
}

// copyRoundTrip copies 1 MiB of random bytes into a pod and back.
func copyRoundTrip(t *testing.T, k kubectl) {
	data := make([]byte, 1<<20)
	rand.Read(data)
	dir := t.TempDir()
	in, back := filepath.Join(dir, "in.bin"), filepath.Join(dir, "back.bin")
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	suffix := make([]byte, 4)
	rand.Read(suffix)
	remote := "/tmp/minikit-cp-" + hex.EncodeToString(suffix)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		k.cmd(ctx, "exec", "shell", "--", "rm", "-f", remote).Run()
	})
	k.run(t, "cp", in, "shell:"+remote)
	k.run(t, "cp", "shell:"+remote, back)
	got, err := os.ReadFile(back)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("copied back %d bytes that differ from the %d sent", len(got), len(data))
	}
}

// runRemoved runs a pod that reads a line from kubectl's stdin, answers it
// and exits; --rm leaves no pod behind.
func runRemoved(t *testing.T, l *lab.Lab, k kubectl) {
	name := "box-" + strings.ReplaceAll(k.name, ".", "")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := k.cmd(ctx, "run", "-i", "--rm", "--restart=Never", name, "--image=busybox", "--", "sh", "-c", "read x; echo got:$x")
	cmd.Stdin = strings.NewReader("hello\n")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "got:hello") {
		t.Fatalf("kubectl run: %v\n%s", err, out)
	}
	// kubectl run --rm deletes the pod before it returns.
	c := testenv.Client(t, l)
	if _, err := c.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("pod %s still there after run --rm (get: %v)", name, err)
	}
}

// runTerminal is run -it: the pod gets a terminal (tty: true) that kubectl
// attaches to, from a terminal of its own.
func runTerminal(t *testing.T, l *lab.Lab, k kubectl) {
	name := "boxt-" + strings.ReplaceAll(k.name, ".", "")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := k.cmd(ctx, "run", "-it", "--rm", "--restart=Never", name, "--image=busybox", "--",
		"sh", "-c", "stty size; read x; echo got:$x")
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 37, Cols: 91})
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	var out testenv.Buffer
	go io.Copy(&out, ptmx)
	// Typed until the shell has read it: keys pressed before kubectl attached
	// are not seen, as on a real cluster.
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "got:hello") {
		if time.Now().After(deadline) {
			t.Fatalf("no answer through run -it:\n%s", out.String())
		}
		if strings.Contains(out.String(), "try pressing enter") {
			io.WriteString(ptmx, "hello\r")
		}
		time.Sleep(300 * time.Millisecond)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("kubectl run -it: %v\n%s", err, out.String())
	}
	c := testenv.Client(t, l)
	if _, err := c.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("pod %s still there after run -it --rm (get: %v)", name, err)
	}
}

// attach writes a line to the running att pod's stdin and reads its answer.
func attach(t *testing.T, k kubectl) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := k.cmd(ctx, "attach", "-i", "att")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out testenv.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	}()
	line := "ping-" + strings.ReplaceAll(k.name, ".", "")
	want := "echo:" + line
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%q never came back through attach:\n%s", want, out.String())
		}
		// The line is repeated until attach is up: what is written before the
		// session reaches the container is not lost, just late, so count lines
		// only as "at least one".
		io.WriteString(stdin, line+"\n")
		time.Sleep(500 * time.Millisecond)
	}
}

var forwarding = regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) ->`)

// portForward starts kubectl port-forward and returns the local address.
func portForward(t testing.TB, k kubectl, target, port string, flags ...string) (string, func()) {
	addr, stop, _ := portForwardLog(t, k, target, port, flags...)
	return addr, stop
}

// portForwardLog is portForward that also returns kubectl's stderr.
func portForwardLog(t testing.TB, k kubectl, target, port string, flags ...string) (string, func(), *testenv.Buffer) {
	cmd := k.cmd(context.Background(), append(flags, "port-forward", target, port)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errOut testenv.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop := func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	found := make(chan string, 1)
	go func() {
		buf := make([]byte, 4096)
		var seen []byte
		for {
			n, err := stdout.Read(buf)
			seen = append(seen, buf[:n]...)
			if m := forwarding.FindSubmatch(seen); m != nil {
				found <- "127.0.0.1:" + string(m[1])
				io.Copy(io.Discard, stdout)
				return
			}
			if err != nil {
				close(found)
				return
			}
		}
	}()
	select {
	case addr, ok := <-found:
		if !ok {
			stop()
			t.Fatalf("kubectl port-forward %s ended: %s", target, errOut.String())
		}
		return addr, stop, &errOut
	case <-time.After(30 * time.Second):
		stop()
		t.Fatalf("kubectl port-forward %s: no local port after 30s: %s", target, errOut.String())
	}
	return "", nil, nil
}

// load sends n GETs to http://addr/ over conc keep-alive connections and
// returns how many succeeded with the pod's name as body, and the errors.
func load(addr string, n, conc int) (int, []error) {
	return loadWith(&http.Transport{MaxConnsPerHost: conc, MaxIdleConnsPerHost: conc}, addr, n, conc, nil)
}

func loadWith(tr *http.Transport, addr string, n, conc int, bytesRead *atomic.Int64) (int, []error) {
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var ok atomic.Int64
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				err := func() error {
					resp, err := client.Get("http://" + addr + "/")
					if err != nil {
						return err
					}
					defer resp.Body.Close()
					b, err := io.ReadAll(resp.Body)
					if err != nil {
						return err
					}
					if bytesRead != nil {
						bytesRead.Add(int64(len(b)))
					}
					if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != "web" {
						return fmt.Errorf("status %d, body %q", resp.StatusCode, b)
					}
					return nil
				}()
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					continue
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(ok.Load()), errs
}
