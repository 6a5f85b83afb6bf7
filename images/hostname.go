package images

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
)

// serveHostname is registry.k8s.io/serve_hostname and `agnhost serve-hostname`:
// the hostname, without a newline, over HTTP (default), raw TCP or UDP on one
// port (default 9376). The two differ only in agnhost's start-up log line.
func serveHostname(ctx context.Context, c *container, args []string, agnhost bool) error {
	fs := c.flags("serve-hostname")
	doTCP := fs.Bool("tcp", false, "Serve raw over TCP.")
	doUDP := fs.Bool("udp", false, "Serve raw over UDP.")
	doHTTP := fs.Bool("http", true, "Serve HTTP.")
	doClose := fs.Bool("close", false, "Close connection per each HTTP request.")
	port := fs.Int("port", 9376, "Port number.")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := checkPort("--port", *port); err != nil {
		return err
	}
	if *doHTTP && (*doTCP || *doUDP) {
		return errors.New("can't serve TCP/UDP mode and HTTP mode at the same time")
	}
	hostname, err := c.hostname()
	if err != nil {
		return fmt.Errorf("reading hostname: %w", err)
	}
	logger := c.logger()

	var servers []server
	if *doTCP {
		ln, err := c.listenTCP(c.listenHost, *port)
		if err != nil {
			return err
		}
		servers = append(servers, newTCPServer(ln, func(conn net.Conn) {
			logger.Printf("TCP request from %s", conn.RemoteAddr())
			_, _ = conn.Write([]byte(hostname))
		}))
	}
	if *doUDP {
		conn, err := c.listenUDP(c.listenHost, *port)
		if err != nil {
			return err
		}
		servers = append(servers, &udpServer{conn: conn, handle: func(_ []byte, from *net.UDPAddr) []byte {
			logger.Printf("UDP request from %s", from)
			return []byte(hostname)
		}})
	}
	if *doHTTP {
		ln, err := c.listenTCP(c.listenHost, *port)
		if err != nil {
			return err
		}
		servers = append(servers, c.httpServer(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			logger.Printf("HTTP request from %s", r.RemoteAddr)
			if *doClose {
				w.Header().Set("Connection", "close")
			}
			fmt.Fprint(w, hostname)
		})))
	}
	if agnhost {
		logger.Printf("Serving on port %d.\n", *port)
	}
	return c.serve(ctx, servers...)
}

// runPause is registry.k8s.io/pause: it holds the pod open and says nothing.
func runPause(ctx context.Context, c *container, _ []string) error {
	return c.serve(ctx)
}
