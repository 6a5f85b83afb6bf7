package images

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// connect is `agnhost connect HOST:PORT`, the NetworkPolicy specs' probe: it
// exits 0 when a TCP connection opens (or a UDP datagram is answered), else
// prints one of UNKNOWN, DNS, TIMEOUT, REFUSED or OTHER to stderr and exits 1.
func connect(ctx context.Context, c *container, args []string) error {
	fs := c.agnhostFlags("connect")
	timeout := fs.Duration("timeout", 0, "Maximum time before returning an error")
	protocol := fs.String("protocol", "tcp", "The protocol to use to perform the connection, can be tcp, udp or sctp")
	udpData := fs.String("udp-data", "hostname", "The UDP payload send to the server")
	fs.String("sctp-data", "hostname", "The SCTP payload send to the server")
	pos, err := c.parseAgnhost(fs, args, 1, 1)
	if err != nil {
		return err
	}
	var msg string
	switch *protocol {
	case "", "tcp":
		msg = connectTCP(ctx, pos[0], *timeout)
	case "udp":
		msg = connectUDP(ctx, pos[0], *timeout, *udpData)
	case "sctp":
		msg = "OTHER: SCTP is not supported by minikit\n"
	default:
		msg = "Unsupported protocol\n" + *protocol
	}
	if msg == "" {
		return nil
	}
	fmt.Fprint(c.stderr, msg)
	return &ExitError{Code: 1}
}

// connectTCP returns what connect prints for dest, or "" on success.
func connectTCP(ctx context.Context, dest string, timeout time.Duration) string {
	if _, _, err := net.SplitHostPort(dest); err != nil {
		return fmt.Sprintf("UNKNOWN: %v\n", err)
	}
	if _, err := net.ResolveTCPAddr("tcp", dest); err != nil {
		return fmt.Sprintf("DNS: %v\n", err)
	}
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", dest)
	if err == nil {
		_ = conn.Close()
		return ""
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		if opErr.Timeout() {
			return "TIMEOUT\n"
		}
		var sysErr *os.SyscallError
		if errors.As(opErr.Err, &sysErr) && sysErr.Err == syscall.ECONNREFUSED {
			return "REFUSED\n"
		}
	}
	return fmt.Sprintf("OTHER: %v\n", err)
}

// connectUDP sends data and waits for any answer: a UDP "connection" exists only
// if the server replies.
func connectUDP(ctx context.Context, dest string, timeout time.Duration, data string) string {
	if _, err := net.ResolveUDPAddr("udp", dest); err != nil {
		return fmt.Sprintf("DNS: %v\n", err)
	}
	conn, err := net.Dial("udp", dest)
	if err != nil {
		return fmt.Sprintf("OTHER: %v\n", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	if timeout > 0 {
		if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
			return fmt.Sprintf("OTHER: %v\n", err)
		}
	}
	if _, err := conn.Write([]byte(data + "\n")); err != nil {
		return udpError(err)
	}
	buf := make([]byte, 1024)
	n, err := conn.Read(buf)
	if err != nil {
		return udpError(err)
	}
	if n == 0 {
		return "OTHER: No data received from the server. Cannot guarantee the server received the request.\n"
	}
	return ""
}

func udpError(err error) string {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Sprintf("TIMEOUT: %v\n", err)
	case strings.Contains(err.Error(), "connection refused"):
		return fmt.Sprintf("REFUSED: %v\n", err)
	}
	return fmt.Sprintf("UNKNOWN: %v\n", err)
}

// dnsSuffix is `agnhost dns-suffix`: the first "search" line of the pod's
// /etc/resolv.conf, comma-separated.
func dnsSuffix(_ context.Context, c *container, args []string) error {
	return c.printResolvConf("dns-suffix", "search", "Could not find DNS search list!", args)
}

// dnsServerList is `agnhost dns-server-list`: the first "nameserver" line's
// addresses. (The real one also panics with "search list" in the message.)
func dnsServerList(_ context.Context, c *container, args []string) error {
	return c.printResolvConf("dns-server-list", "nameserver", "Could not find DNS search list!", args)
}

// printResolvConf prints the fields after keyword on the first line of
// /etc/resolv.conf that starts with it, as the real image splits it (on single
// spaces). The image reads the file of the pod's own mount namespace, where the
// node agent put the pod's dnsPolicy and dnsConfig.
func (c *container) printResolvConf(name, keyword, missing string, args []string) error {
	if _, err := c.parseAgnhost(c.agnhostFlags(name), args, 0, 0); err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(c.root, "etc/resolv.conf"))
	if err != nil {
		return c.panic(err.Error())
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.HasPrefix(line, keyword) {
			fmt.Fprintln(c.stdout, strings.Join(strings.Split(line, " ")[1:], ","))
			return nil
		}
	}
	return c.panic(missing)
}

// etcHosts is `agnhost etc-hosts`: the pod's /etc/hosts.
func etcHosts(_ context.Context, c *container, args []string) error {
	if _, err := c.parseAgnhost(c.agnhostFlags("etc-hosts"), args, 0, 0); err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(c.root, "etc/hosts"))
	if err != nil {
		return c.panic(err.Error())
	}
	fmt.Fprintln(c.stdout, string(data))
	return nil
}

// panic ends the image the way a Go panic ends the real one: the message on
// stderr and exit status 2.
func (c *container) panic(msg string) error {
	fmt.Fprintf(c.stderr, "panic: %s\n", msg)
	return &ExitError{Code: 2}
}

// testWebserver is `agnhost test-webserver`: any file of the container's
// filesystem at its path, on --port (80). The DNS conformance specs read their
// queriers' results from it (/results/<file>, an emptyDir volume) through the
// API server's pods/proxy.
func testWebserver(ctx context.Context, c *container, args []string) error {
	fs := c.agnhostFlags("test-webserver")
	port := fs.Int("port", 80, "Port number.")
	if _, err := c.parseAgnhost(fs, args, 0, 0); err != nil {
		return err
	}
	if err := checkPort("--port", *port); err != nil {
		return err
	}
	files := http.StripPrefix("/", http.FileServer(http.Dir(c.root)))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "private")
		// Needed for local proxy to Kubernetes API server to work.
		w.Header().Set("Access-Control-Allow-Origin", "*")
		w.Header().Set("Access-Control-Allow-Credentials", "true")
		w.Header().Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
		w.Header().Set("Access-Control-Allow-Headers", "DNT,X-Mx-ReqToken,Keep-Alive,User-Agent,X-Requested-With,Cache-Control,Content-Type")
		// No 304s: a poller must see a file's new content.
		r.Header.Del("If-Modified-Since")
		files.ServeHTTP(w, r)
	})
	ln, err := c.listenTCP(c.listenHost, *port)
	if err != nil {
		return err
	}
	return c.serve(ctx, c.httpServer(ln, h))
}
