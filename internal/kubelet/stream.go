package kubelet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/minikit/minikit/internal/cni"
	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/spdyframe"

	"github.com/creack/pty"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream/wsstream"
	utilexec "k8s.io/utils/exec"
)

// The kubelet's streaming timeouts (cri-streaming's NewServer defaults): a
// session idle for 4 hours is closed, and the client has 30 seconds to open its
// streams after the upgrade.
const (
	streamIdleTimeout     = 4 * time.Hour
	streamCreationTimeout = remotecommand.DefaultStreamCreationTimeout
)

// streamTarget is one resolved exec, attach or port-forward request: the pod,
// its sandbox and (but for port-forward) the container. It implements
// cri-streaming's Executor, Attacher and PortForwarder, so the protocols (SPDY
// v1-v4, WebSocket channel.k8s.io, exit codes as Status) are the library's.
type streamTarget struct {
	a     *Agent
	pod   *corev1.Pod
	netns string
	spec  corev1.Container
	c     *container
}

// streamError is a request the kubelet would refuse before upgrading; its text
// reaches kubectl as "unable to upgrade connection: TEXT".
type streamError struct {
	code int
	msg  string
}

func (e *streamError) Error() string { return e.msg }

// resolveStream finds the pod (and the running container, when ctr is not
// empty) a streaming request names, with the kubelet's errors.
func (a *Agent) resolveStream(ns, name, ctr string) (*streamTarget, error) {
	pod, err := a.pods.Pods(ns).Get(name)
	if err != nil || pod.Spec.NodeName != a.cfg.NodeName {
		return nil, &streamError{http.StatusNotFound, "pod does not exist"}
	}
	t := &streamTarget{a: a, pod: pod, netns: a.sandboxName(pod.UID)}
	if ctr != "" {
		found := false
		// Running init containers (sidecars) take exec and attach too.
		for _, s := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
			if s.Name == ctr {
				t.spec, found = s, true
			}
		}
		c := a.liveContainer(pod.UID, ctr)
		if !found || c == nil || !c.isRunning() {
			return nil, &streamError{http.StatusInternalServerError, fmt.Sprintf("container not found (%q)", ctr)}
		}
		t.c = c
	}
	if !cni.PodNamespacesExist(t.netns) || (!pod.Spec.HostNetwork && !netns.ExistsNamed(t.netns)) {
		return nil, &streamError{http.StatusInternalServerError, fmt.Sprintf("pod %q has no running sandbox", ns+"/"+name)}
	}
	return t, nil
}

// liveContainer is the container the pod's worker runs under that name, if any.
func (a *Agent) liveContainer(uid types.UID, name string) *container {
	v, ok := a.live.Load(string(uid) + "/" + name)
	if !ok {
		return nil
	}
	return v.(*container)
}

// streamPath splits /KIND/NS/POD[/CONTAINER] into its n parts.
func streamPath(r *http.Request, kind string, n int) ([]string, bool) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"+kind+"/"), "/")
	if len(parts) != n {
		return nil, false
	}
	for _, p := range parts {
		if p == "" {
			return nil, false
		}
	}
	return parts, true
}

func writeStreamError(w http.ResponseWriter, err error) {
	var se *streamError
	if errors.As(err, &se) {
		http.Error(w, se.msg, se.code)
		return
	}
	http.Error(w, err.Error(), http.StatusInternalServerError)
}

// serveExec serves /exec/NS/POD/CONTAINER?command=...&input=1&output=1&error=1&tty=1.
func (a *Agent) serveExec(w http.ResponseWriter, r *http.Request) {
	parts, ok := streamPath(r, "exec", 3)
	if !ok {
		http.Error(w, "want /exec/NAMESPACE/POD/CONTAINER", http.StatusBadRequest)
		return
	}
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	cmd := r.URL.Query()["command"]
	if len(cmd) == 0 {
		http.Error(w, "you must specify at least one command for the container", http.StatusBadRequest)
		return
	}
	t, err := a.resolveStream(parts[0], parts[1], parts[2])
	if err != nil {
		writeStreamError(w, err)
		return
	}
	remotecommand.ServeExec(w, r, t, parts[0]+"/"+parts[1], string(t.pod.UID), parts[2], cmd, opts,
		streamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

// serveAttach serves /attach/NS/POD/CONTAINER?input=1&output=1&error=1&tty=1.
func (a *Agent) serveAttach(w http.ResponseWriter, r *http.Request) {
	parts, ok := streamPath(r, "attach", 3)
	if !ok {
		http.Error(w, "want /attach/NAMESPACE/POD/CONTAINER", http.StatusBadRequest)
		return
	}
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	t, err := a.resolveStream(parts[0], parts[1], parts[2])
	if err != nil {
		writeStreamError(w, err)
		return
	}
	remotecommand.ServeAttach(w, r, t, parts[0]+"/"+parts[1], string(t.pod.UID), parts[2], opts,
		streamIdleTimeout, streamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

// servePortForward serves /portForward/NS/POD (SPDY portforward.k8s.io, or
// WebSocket with ?port=N).
func (a *Agent) servePortForward(w http.ResponseWriter, r *http.Request) {
	parts, ok := streamPath(r, "portForward", 2)
	if !ok {
		http.Error(w, "want /portForward/NAMESPACE/POD", http.StatusBadRequest)
		return
	}
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	t, err := a.resolveStream(parts[0], parts[1], "")
	if err != nil {
		writeStreamError(w, err)
		return
	}
	if !wsstream.IsWebSocketRequest(r) {
		w = frameWriter{w}
	}
	portforward.ServePortForward(w, r, t, parts[0]+"/"+parts[1], string(t.pod.UID), opts,
		streamIdleTimeout, streamCreationTimeout, portforward.SupportedProtocols)
}

// frameWriter hands the SPDY upgrade a connection that writes whole frames
// (spdyframe): spdystream writes each frame field by field, three segments per
// data frame, each of which the API server would forward as a TLS record.
type frameWriter struct{ http.ResponseWriter }

func (f frameWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(f.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	return spdyframe.NewConn(c), rw, nil
}

// ExecInContainer runs cmd in the pod's network, UTS and mount namespaces with
// the container's environment, as a container runtime's exec does. A command
// that names the container image's own program (/agnhost in an agnhost
// container) runs that built-in image, as it starts containers; anything else
// runs from the node's file system. A non-zero exit is returned as a
// utilexec.ExitError, which the library reports to the client as the exit code.
func (t *streamTarget) ExecInContainer(ctx context.Context, _, _, _ string, argv []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	env, _ := containerEnv(t.pod, t.spec, t.a.cfg.NodeName, statusPodIPs(t.pod), t.a.hostIPs(), t.a.apiServiceEnv(ctx))
	argv = t.a.execImageArgv(t.spec.Image, argv)
	argv = cni.ExecArgv(t.netnsPath(), cni.PodUTSPath(t.netns), cni.PodMntPath(t.netns), argv)
	if t.c != nil {
		// In the container's working directory, as a runtime's exec runs.
		if layer := t.c.w.containerDir(t.c.name); dirExists(layer) {
			argv = inWorkDir(argv, layer)
		}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	// As the container got it: the kubernetes Service's variables, then its own env (which wins).
	cmd.Env = env
	if tty {
		cmd.Env = append(cmd.Env, "TERM=xterm")
		return exitError(runInPty(ctx, cmd, in, out, resize))
	}
	go drainResize(resize)
	if out != nil {
		cmd.Stdout = out
	}
	if errOut != nil {
		cmd.Stderr = errOut
	}
	// A background child that keeps stdout open must not hold the session
	// once the command itself has exited.
	cmd.WaitDelay = time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stdin io.WriteCloser
	if in != nil {
		var err error
		if stdin, err = cmd.StdinPipe(); err != nil {
			return err
		}
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	if stdin != nil {
		// Not waited for: the client may never close its stdin. Wait closes
		// the pipe when the command exits, which ends this copy at its next write.
		go func() {
			io.Copy(stdin, in)
			stdin.Close()
		}()
	}
	stop := context.AfterFunc(ctx, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	defer stop()
	return exitError(cmd.Wait())
}

// runInPty runs cmd with a new pseudo-terminal as its controlling terminal,
// copying in to it, its output to out, and applying resize events.
func runInPty(ctx context.Context, cmd *exec.Cmd, in io.Reader, out io.Writer, resize <-chan remotecommand.TerminalSize) error {
	ptmx, tty, err := pty.Open()
	if err != nil {
		return fmt.Errorf("allocating a terminal: %w", err)
	}
	defer ptmx.Close()
	pty.Setsize(ptmx, &pty.Winsize{Rows: 24, Cols: 80})
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	err = cmd.Start()
	tty.Close()
	if err != nil {
		return err
	}
	go applyResize(ptmx, resize)
	if in != nil {
		go io.Copy(ptmx, in)
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		if out != nil {
			io.Copy(out, ptmx)
		} else {
			io.Copy(io.Discard, ptmx)
		}
	}()
	stop := context.AfterFunc(ctx, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	defer stop()
	err = cmd.Wait()
	// What the command wrote before exiting is still in the terminal's buffer;
	// the copy ends (EIO) once every holder of the terminal has closed it. A
	// background child holding it on does not hold the session.
	select {
	case <-copied:
	case <-time.After(time.Second):
	}
	return err
}

func applyResize(f *os.File, resize <-chan remotecommand.TerminalSize) {
	for s := range resize {
		if s.Width > 0 && s.Height > 0 {
			pty.Setsize(f, &pty.Winsize{Rows: s.Height, Cols: s.Width})
		}
	}
}

// drainResize consumes resize events nobody applies, so the library's reader
// of the resize stream is never blocked.
func drainResize(resize <-chan remotecommand.TerminalSize) {
	for range resize {
	}
}

// exitError turns a finished command's error into what cri-streaming reports
// as an exit code: a signal is 128+N, as a shell reports it.
func exitError(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code := ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", code), Code: code}
	}
	if errors.Is(err, exec.ErrWaitDelay) {
		return nil
	}
	return err
}

// AttachContainer connects a client to the container's stdin (a pipe or
// terminal the agent holds, for containers with stdin: true) and its output
// from now on (read from the container's log, which holds both stdout and
// stderr, as with a terminal).
func (t *streamTarget) AttachContainer(ctx context.Context, _, _, _ string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	c := t.c
	stdin, ptmx, exited := c.attachPoints()
	if ptmx != nil {
		go applyResize(ptmx, resize)
	} else {
		go drainResize(resize)
	}
	if out == nil {
		out = errOut
	}
	// The output is followed from before the first key reaches the
	// container: what the keys make it write (their echo, a command's answer)
	// is the client's even when the container answers and exits at once.
	var logf *os.File
	if out != nil {
		var err error
		if logf, err = openLogEnd(t.a.podLogPath(t.pod.UID, c.name)); err != nil {
			return err
		}
		defer logf.Close()
	}
	clientGone := make(chan struct{})
	if in != nil && stdin != nil {
		go func() {
			_, err := io.Copy(stdin, in)
			if t.spec.StdinOnce {
				// stdinOnce: the first attach session's end closes stdin for good.
				c.closeStdin()
			}
			if err != nil {
				close(clientGone)
			}
		}()
	}
	if out == nil {
		select {
		case <-exited:
		case <-clientGone:
		case <-ctx.Done():
		}
		return nil
	}
	followLog(ctx, logf, out, exited, clientGone)
	return nil
}

// openLogEnd opens the container's log at path where it ends now.
func openLogEnd(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening the container's output: %w", err)
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return nil, fmt.Errorf("opening the container's output: %w", err)
	}
	return f, nil
}

// followLog copies what is appended to the log f from its offset on to out,
// until the container exits (then what it wrote last), the client goes or ctx ends.
func followLog(ctx context.Context, f *os.File, out io.Writer, exited, gone <-chan struct{}) {
	buf := make([]byte, 32<<10)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last := false
	for {
		for {
			n, err := f.Read(buf)
			if n > 0 {
				if _, werr := out.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil || n == 0 {
				break
			}
		}
		if last {
			return
		}
		select {
		case <-exited:
			last = true
		case <-gone:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (a *Agent) podLogPath(uid types.UID, ctr string) string {
	return (&podWorker{a: a, uid: uid}).logPath(ctr)
}

// portForwardBuffer is the most a pod's answer is read at once.
const portForwardBuffer = 256 << 10

// PortForward connects stream to the port on the pod's loopback, dialled from
// inside its network namespace, as the kubelet's runtimes do.
func (t *streamTarget) PortForward(ctx context.Context, _, _ string, port int32, stream io.ReadWriteCloser) error {
	if port <= 0 || port > 65535 {
		return fmt.Errorf("invalid port %d", port)
	}
	var conn net.Conn
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port)))
	err := netns.DoPath(t.netnsPath(), func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, "tcp4", addr)
		return err
	})
	if err != nil {
		return fmt.Errorf("failed to connect to localhost:%d inside namespace of pod %q: %w", port, t.pod.Namespace+"/"+t.pod.Name, err)
	}
	defer conn.Close()
	go func() {
		// The client closing its side half-closes the connection, so a
		// request-then-EOF protocol still gets its answer.
		if _, err := io.Copy(conn, stream); err == nil {
			conn.(*net.TCPConn).CloseWrite()
		} else {
			conn.Close()
		}
	}()
	// Each read from the pod is one SPDY data frame: a larger buffer than
	// io.Copy's 32 KiB makes fewer frames of a bulk transfer, each of which
	// costs a frame header, an allocation and a channel hand-off on both ends.
	_, err = io.CopyBuffer(stream, struct{ io.Reader }{conn}, make([]byte, portForwardBuffer))
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("copying from port %d of pod %q: %w", port, t.pod.Namespace+"/"+t.pod.Name, err)
	}
	return nil
}
