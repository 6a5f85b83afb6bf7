package images

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

// shutdownGrace bounds how long a cancelled image waits for in-flight requests.
// The kubelet's own grace period (30s by default) ends the process anyway.
const shutdownGrace = 10 * time.Second

// container is one run of a built-in image. Everything an image would otherwise
// take from the process (clock, hostname, log streams, random IDs) comes from
// here: newContainer fills in the real ones and tests replace them.
type container struct {
	image      string
	env        map[string]string
	listenHost string
	stdout     io.Writer
	stderr     io.Writer
	hostname   func() (string, error)
	now        func() time.Time
	requestID  func() string
	// after is time.After; tests replace it to end waits (serve-hostname's
	// minute after SIGTERM, netexec's --delay-shutdown) when they choose.
	after func(time.Duration) <-chan time.Time
	// root is where the container's filesystem starts: "/" in a pod (whose mount
	// namespace shows the host's files plus its own /etc/resolv.conf, /etc/hosts
	// and volumes), a temporary directory in tests.
	root string
	// shell runs netexec's /shell commands.
	shell string
	ready func()
	// clusterDNS serves the coredns image's kubernetes plugin (nil: none).
	clusterDNS ClusterDNS
	// onListen, when set, learns every bound address; tests use it to find the
	// ports the kernel picked for port 0.
	onListen func(network string, addr net.Addr)

	readyOnce sync.Once
	exit      chan exitRequest
	mu        sync.Mutex
	opened    []io.Closer // every socket, closed when the run ends
}

// exitRequest is an image asking to stop itself (agnhost's /exit).
type exitRequest struct {
	code  int
	grace time.Duration
}

func newContainer(image string, env map[string]string, listenHost string, stdout, stderr io.Writer) *container {
	return &container{
		image:      image,
		env:        env,
		listenHost: listenHost,
		stdout:     &syncWriter{w: stdout},
		stderr:     &syncWriter{w: stderr},
		hostname:   os.Hostname,
		// Real images run with no /etc/localtime, so their clocks read UTC.
		now:       func() time.Time { return time.Now().UTC() },
		requestID: randomRequestID,
		after:     time.After,
		root:      "/",
		shell:     "/bin/sh",
		exit:      make(chan exitRequest, 1),
	}
}

func (c *container) run(ctx context.Context, b builtin, args []string) error {
	defer c.closeAll()
	err := b.run(ctx, c, args)
	var exit *ExitError
	if err == nil || errors.As(err, &exit) {
		return err
	}
	return fmt.Errorf("running image %s: %w", c.image, err)
}

// syncWriter serialises writes from concurrent handlers so log lines never interleave.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func randomRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// logger writes in the standard library's default format, which is what the Go
// images (serve_hostname, agnhost) print to stderr.
func (c *container) logger() *log.Logger {
	return log.New(c.stderr, "", log.LstdFlags)
}

// podName is the downward-API name if the manifest exposes one, else the hostname.
func (c *container) podName(hostname string) string {
	for _, k := range []string{"POD_NAME", "MY_POD_NAME"} {
		if v := c.env[k]; v != "" {
			return v
		}
	}
	return hostname
}

// envPort reads a port from environment variable key, or returns def.
func (c *container) envPort(key string, def int) (int, error) {
	v, ok := c.env[key]
	if !ok || v == "" {
		return def, nil
	}
	p, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("parsing %s=%q: %w", key, v, err)
	}
	return p, checkPort(key, p)
}

func checkPort(what string, p int) error {
	if p < 0 || p > 65535 {
		return fmt.Errorf("%s %d is not a valid port", what, p)
	}
	return nil
}

// flags returns a flag set that, like the real images' CLIs, prints its usage to
// the container log on a bad flag.
func (c *container) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	return fs
}

// parseFlags parses args; like agnhost's cobra commands, it accepts no positional
// arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("parsing %s arguments %q: %w", fs.Name(), args, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("parsing %s arguments: unexpected %q", fs.Name(), fs.Args())
	}
	return nil
}

func (c *container) track(cl io.Closer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.opened = append(c.opened, cl)
}

func (c *container) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cl := range c.opened {
		_ = cl.Close() // most are closed already by shutdown
	}
	c.opened = nil
}

func (c *container) listenTCP(host string, port int) (net.Listener, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	c.track(ln)
	if c.onListen != nil {
		c.onListen("tcp", ln.Addr())
	}
	return ln, nil
}

func (c *container) listenUDP(host string, port int) (*net.UDPConn, error) {
	addr, err := net.ResolveUDPAddr("udp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	conn, err := net.ListenUDP("udp", addr)
	if err != nil {
		return nil, err
	}
	c.track(conn)
	if c.onListen != nil {
		c.onListen("udp", conn.LocalAddr())
	}
	return conn, nil
}

// requestExit asks serve to stop with code after letting connections finish for
// grace. Only the first request counts.
func (c *container) requestExit(code int, grace time.Duration) {
	select {
	case c.exit <- exitRequest{code: code, grace: grace}:
	default:
	}
}

// server is one socket's serving loop.
type server interface {
	// serve runs until shutdown; it returns nil when stopped by shutdown.
	serve() error
	// shutdown stops accepting, then waits for in-flight work until ctx is done.
	shutdown(ctx context.Context)
}

// serve reports readiness, runs the servers until ctx is done, one of them fails
// or the image asks to exit, then shuts all of them down gracefully.
func (c *container) serve(ctx context.Context, servers ...server) error {
	c.readyOnce.Do(func() {
		if c.ready != nil {
			c.ready()
		}
	})
	errc := make(chan error, len(servers))
	for _, s := range servers {
		go func() { errc <- s.serve() }()
	}
	running := len(servers)
	grace := shutdownGrace
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		running--
		if err == nil {
			err = errors.New("server stopped unexpectedly")
		}
	case req := <-c.exit:
		err = &ExitError{Code: req.code}
		grace = req.grace
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	for _, s := range servers {
		s.shutdown(sctx)
	}
	for ; running > 0; running-- {
		if e := <-errc; err == nil {
			err = e
		}
	}
	return err
}

type httpServer struct {
	srv           *http.Server
	ln            net.Listener
	cert, keyFile string // serve TLS when set
}

func (c *container) httpServer(ln net.Listener, h http.Handler) *httpServer {
	return &httpServer{ln: ln, srv: &http.Server{
		Handler:           h,
		ErrorLog:          c.logger(),
		ReadHeaderTimeout: time.Minute,
	}}
}

func (s *httpServer) serve() error {
	var err error
	if s.cert != "" {
		err = s.srv.ServeTLS(s.ln, s.cert, s.keyFile)
	} else {
		err = s.srv.Serve(s.ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func (s *httpServer) shutdown(ctx context.Context) {
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close() // grace is over: drop what is left
	}
}

// udpServer answers datagrams; handle returns the reply, or nil for none.
type udpServer struct {
	conn   *net.UDPConn
	handle func(pkt []byte, from *net.UDPAddr) []byte
}

func (s *udpServer) serve() error {
	buf := make([]byte, 2048)
	for {
		n, from, err := s.conn.ReadFromUDP(buf)
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		if reply := s.handle(buf[:n], from); reply != nil {
			_, _ = s.conn.WriteToUDP(reply, from) // UDP: a lost reply is the client's to retry
		}
	}
}

func (s *udpServer) shutdown(context.Context) { _ = s.conn.Close() }

// tcpServer runs handle on every accepted connection, then closes it.
type tcpServer struct {
	ln       net.Listener
	handle   func(net.Conn)
	wg       sync.WaitGroup
	loopDone chan struct{} // closed when serve returns, so no wg.Go races wg.Wait
}

func newTCPServer(ln net.Listener, handle func(net.Conn)) *tcpServer {
	return &tcpServer{ln: ln, handle: handle, loopDone: make(chan struct{})}
}

func (s *tcpServer) serve() error {
	defer close(s.loopDone)
	for {
		conn, err := s.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		s.wg.Go(func() {
			defer conn.Close()
			s.handle(conn)
		})
	}
}

func (s *tcpServer) shutdown(ctx context.Context) {
	_ = s.ln.Close()
	done := make(chan struct{})
	go func() {
		<-s.loopDone
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// hijackAndClose drops the client's connection without a response, which is what
// a client sees when the real image calls os.Exit inside a handler.
func hijackAndClose(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
		}
	}
}
