package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// awaitDeletion is how long agnhost serve-hostname goes on serving after
// SIGTERM: it waits for the kubelet to kill it, so clients see it until then.
const awaitDeletion = 60 * time.Second

// serveHostname is registry.k8s.io/serve_hostname and `agnhost serve-hostname`:
// the hostname, without a newline, over HTTP (default), raw TCP (written on
// accept, then closed) or UDP on one port (default 9376). The old image parses
// Go flags (-port), agnhost pflag ones (--port); only agnhost logs its port.
func serveHostname(ctx context.Context, c *container, args []string, agnhost bool) error {
	var doTCP, doUDP, doHTTP, doClose bool
	var port int
	define := func(fs interface {
		BoolVar(p *bool, name string, value bool, usage string)
		IntVar(p *int, name string, value int, usage string)
	}) {
		fs.BoolVar(&doTCP, "tcp", false, "Serve raw over TCP.")
		fs.BoolVar(&doUDP, "udp", false, "Serve raw over UDP.")
		fs.BoolVar(&doHTTP, "http", true, "Serve HTTP.")
		fs.BoolVar(&doClose, "close", false, "Close connection per each HTTP request.")
		fs.IntVar(&port, "port", 9376, "Port number.")
	}
	if agnhost {
		fs := c.agnhostFlags("serve-hostname")
		define(fs)
		if _, err := c.parseAgnhost(fs, args, 0, 0); err != nil {
			return err
		}
	} else {
		fs := c.flags("serve-hostname")
		define(fs)
		if err := parseFlags(fs, args); err != nil {
			return err
		}
	}
	if err := checkPort("--port", port); err != nil {
		return err
	}
	if doHTTP && (doTCP || doUDP) {
		return errors.New("can't serve TCP/UDP mode and HTTP mode at the same time")
	}
	hostname, err := c.hostname()
	if err != nil {
		return fmt.Errorf("reading hostname: %w", err)
	}
	logger := c.logger()

	var servers []server
	if doTCP {
		ln, err := c.listenTCP(c.listenHost, port)
		if err != nil {
			return err
		}
		servers = append(servers, newTCPServer(ln, func(conn net.Conn) {
			logger.Printf("TCP request from %s", conn.RemoteAddr())
			_, _ = conn.Write([]byte(hostname))
			finishTCP(conn)
		}))
	}
	if doUDP {
		conn, err := c.listenUDP(c.listenHost, port)
		if err != nil {
			return err
		}
		servers = append(servers, &udpServer{conn: conn, handle: func(_ []byte, from *net.UDPAddr) []byte {
			logger.Printf("UDP request from %s", from)
			return []byte(hostname)
		}})
	}
	if doHTTP {
		ln, err := c.listenTCP(c.listenHost, port)
		if err != nil {
			return err
		}
		servers = append(servers, c.httpServer(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			logger.Printf("HTTP request from %s", r.RemoteAddr)
			if doClose {
				w.Header().Set("Connection", "close")
			}
			fmt.Fprint(w, hostname)
		})))
	}
	if agnhost {
		logger.Printf("Serving on port %d.\n", port)
	}
	// The old serve_hostname image (the docs' and the book's "hostnames"
	// Deployment) stops serving at SIGTERM, so scaling to zero empties a
	// Service at once. agnhost's serve-hostname instead goes on for
	// awaitDeletion after the pod's SIGTERM, until the kubelet kills it.
	if !agnhost {
		return c.serve(ctx, servers...)
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	go func() {
		select {
		case <-ctx.Done():
		case <-runCtx.Done():
			return
		}
		if sig, _, ok := signalOf(ctx); ok {
			logger.Printf("Shutting down after receiving signal: %s.\n", sig)
		}
		logger.Printf("Awaiting pod deletion.\n")
		select {
		case <-c.after(awaitDeletion):
		case <-runCtx.Done():
		}
		stop()
	}()
	return c.serve(runCtx, servers...)
}

// runPause is registry.k8s.io/pause: it holds the pod open and says nothing.
func runPause(ctx context.Context, c *container, _ []string) error {
	return c.serve(ctx)
}

// tcpLinger bounds how long finishTCP reads what a client sent.
const tcpLinger = 5 * time.Second

// finishTCP ends a raw TCP answer with a FIN, then reads and drops what the
// client sent until it closes (or tcpLinger passes). Closing a socket with
// unread bytes makes the kernel send a RST instead of a FIN, and a client
// that polls late — `echo hostName | nc -w 2 …` on a loaded node — then sees
// the error and never reads the answer that came before it: that is how a
// conformance run at load 60 lost every one of 26 answers in two minutes.
// The real agnhost closes at once; a client sees the same bytes either way.
func finishTCP(conn net.Conn) {
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return
	}
	_ = tc.CloseWrite()
	_ = tc.SetReadDeadline(time.Now().Add(tcpLinger))
	_, _ = io.Copy(io.Discard, tc)
}
