package images

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

var agnhostSubcommands = []string{"liveness", "netexec", "pause", "porter", "serve-hostname"}

// runAgnhost is registry.k8s.io/e2e-test-images/agnhost: its first argument picks
// the subcommand, as with the real image's cobra CLI.
func runAgnhost(ctx context.Context, c *container, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("agnhost needs a subcommand; minikit implements %s", strings.Join(agnhostSubcommands, ", "))
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "netexec":
		return netexec(ctx, c, rest)
	case "serve-hostname":
		return serveHostname(ctx, c, rest, true)
	case "liveness":
		return liveness(ctx, c, rest)
	case "porter":
		return porter(ctx, c, rest)
	case "pause":
		if err := parseFlags(c.flags("pause"), rest); err != nil {
			return err
		}
		fmt.Fprintln(c.stdout, "Paused")
		return c.serve(ctx)
	}
	return fmt.Errorf("agnhost subcommand %q is not implemented by minikit; implemented: %s",
		sub, strings.Join(agnhostSubcommands, ", "))
}

// netexecServer holds what netexec's handlers share.
type netexecServer struct {
	c        *container
	log      *log.Logger
	hostname string
	healthy  bool // the real /healthz reports whether a UDP (or SCTP) server runs
}

// netexec serves agnhost's test endpoints over HTTP(S) and the hostname/echo/clientip
// commands over UDP. Endpoints that touch the filesystem or run commands (/shell,
// /upload) answer 501: a minikit pod shares the host's filesystem.
func netexec(ctx context.Context, c *container, args []string) error {
	fs := c.flags("netexec")
	httpPort := fs.Int("http-port", 8080, "HTTP Listen Port")
	udpPort := fs.Int("udp-port", 8081, "UDP Listen Port")
	sctpPort := fs.Int("sctp-port", -1, "SCTP Listen Port")
	certFile := fs.String("tls-cert-file", "", "File containing an x509 certificate for HTTPS.")
	keyFile := fs.String("tls-private-key-file", "", "File containing an x509 private key matching --tls-cert-file")
	override := fs.String("http-override", "", "Override the HTTP handler to always respond as if it were a GET with this path & params")
	udpAddrs := fs.String("udp-listen-addresses", "", "A comma separated list of ip addresses the udp servers listen from")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := checkPort("--http-port", *httpPort); err != nil {
		return err
	}
	if *udpPort != -1 {
		if err := checkPort("--udp-port", *udpPort); err != nil {
			return err
		}
	}
	hostname, err := c.hostname()
	if err != nil {
		return fmt.Errorf("reading hostname: %w", err)
	}
	n := &netexecServer{c: c, log: c.logger(), hostname: hostname, healthy: *udpPort != -1 || *sctpPort != -1}
	if *sctpPort != -1 {
		n.log.Printf("SCTP is not supported by minikit; ignoring --sctp-port=%d", *sctpPort)
	}

	var servers []server
	if *udpPort != -1 {
		hosts := []string{c.listenHost}
		if *udpAddrs != "" {
			hosts = strings.Split(*udpAddrs, ",")
		}
		for _, h := range hosts {
			if net.ParseIP(h) == nil && h != "" {
				return fmt.Errorf("parseAddress: invalid address %s", h)
			}
			conn, err := c.listenUDP(h, *udpPort)
			if err != nil {
				return err
			}
			n.log.Printf("Started UDP server on port %s %d", h, *udpPort)
			servers = append(servers, &udpServer{conn: conn, handle: n.udp})
		}
	}

	mux := http.NewServeMux()
	n.routes(mux)
	var h http.Handler = mux
	if *override != "" {
		h = overrideHandler(mux, *override)
	}
	ln, err := c.listenTCP(c.listenHost, *httpPort)
	if err != nil {
		return err
	}
	hs := c.httpServer(ln, h)
	hs.cert, hs.keyFile = *certFile, *keyFile
	n.log.Printf("Started HTTP server on port %d", *httpPort)
	return c.serve(ctx, append(servers, hs)...)
}

func (n *netexecServer) routes(mux *http.ServeMux) {
	mux.HandleFunc("/", n.root)
	mux.HandleFunc("/clientip", n.clientIP)
	mux.HandleFunc("/dial", n.dial)
	mux.HandleFunc("/echo", n.echo)
	mux.HandleFunc("/exit", n.exit)
	mux.HandleFunc("/healthz", n.healthz)
	mux.HandleFunc("/hostname", n.hostnameHandler)
	mux.HandleFunc("/hostName", n.hostnameHandler)
	mux.HandleFunc("/redirect", n.redirect)
	mux.HandleFunc("/shell", n.notImplemented)
	mux.HandleFunc("/upload", n.notImplemented)
	mux.HandleFunc("/shutdown", n.shutdown)
}

// overrideHandler answers every request as a GET of path, like --http-override.
func overrideHandler(mux http.Handler, path string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o, err := http.NewRequestWithContext(r.Context(), http.MethodGet, path, nil)
		if err != nil {
			http.Error(w, fmt.Sprintf("override request failed: %v", err), http.StatusInternalServerError)
			return
		}
		o.RemoteAddr = r.RemoteAddr
		mux.ServeHTTP(w, o)
	})
}

func (n *netexecServer) root(w http.ResponseWriter, r *http.Request) {
	n.log.Printf("GET /")
	fmt.Fprintf(w, "NOW: %v", n.c.now())
}

func (n *netexecServer) clientIP(w http.ResponseWriter, r *http.Request) {
	n.log.Printf("GET /clientip")
	fmt.Fprint(w, r.RemoteAddr)
}

func (n *netexecServer) hostnameHandler(w http.ResponseWriter, r *http.Request) {
	n.log.Printf("GET %s", r.URL.Path)
	fmt.Fprint(w, n.hostname)
}

func (n *netexecServer) echo(w http.ResponseWriter, r *http.Request) {
	msg, codeString := r.FormValue("msg"), r.FormValue("code")
	n.log.Printf("GET /echo?msg=%s&code=%s", msg, codeString)
	if codeString != "" {
		code, err := strconv.Atoi(codeString)
		if err != nil {
			fmt.Fprintf(w, "argument 'code' must be an integer or empty, got %q\n", codeString)
			return
		}
		w.WriteHeader(code)
	}
	fmt.Fprint(w, msg)
}

func (n *netexecServer) healthz(w http.ResponseWriter, r *http.Request) {
	n.log.Printf("GET /healthz")
	if !n.healthy {
		w.WriteHeader(http.StatusPreconditionFailed)
	}
}

func (n *netexecServer) redirect(w http.ResponseWriter, r *http.Request) {
	location, codeString := r.FormValue("location"), r.FormValue("code")
	n.log.Printf("%s /redirect?msg=%s&code=%s", r.Method, location, codeString)
	code := http.StatusFound
	if codeString != "" {
		var err error
		if code, err = strconv.Atoi(codeString); err != nil {
			fmt.Fprintf(w, "argument 'code' must be an integer or empty, got %q\n", codeString)
			return
		}
	}
	http.Redirect(w, r, location, code)
}

func (n *netexecServer) notImplemented(w http.ResponseWriter, r *http.Request) {
	n.log.Printf("GET %s (not implemented by minikit)", r.URL.Path)
	http.Error(w, r.URL.Path+" is not implemented by minikit's built-in agnhost", http.StatusNotImplemented)
}

// exit stops the image with ?code= after ?wait=, allowing ?timeout= for
// connections to close. With no timeout the real image exits at once, so the
// client gets no response.
func (n *netexecServer) exit(w http.ResponseWriter, r *http.Request) {
	waitString, timeoutString, codeString := r.FormValue("wait"), r.FormValue("timeout"), r.FormValue("code")
	n.log.Printf("GET /exit?code=%s&timeout=%s&wait=%s", codeString, timeoutString, waitString)
	timeout, err := time.ParseDuration(timeoutString)
	if err != nil && timeoutString != "" {
		fmt.Fprintf(w, "argument 'timeout' must be a valid golang duration or empty, got %q\n", timeoutString)
		return
	}
	wait, err := time.ParseDuration(waitString)
	if err != nil && waitString != "" {
		fmt.Fprintf(w, "argument 'wait' must be a valid golang duration or empty, got %q\n", waitString)
		return
	}
	code, err := strconv.Atoi(codeString)
	if err != nil && codeString != "" {
		fmt.Fprintf(w, "argument 'code' must be an integer [0-127] or empty, got %q\n", codeString)
		return
	}
	n.log.Printf("Will begin shutdown in %s, allowing %s for connections to close, then will exit with %d", wait, timeout, code)
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		}
	}
	if timeout <= 0 {
		hijackAndClose(w)
	}
	n.c.requestExit(code, timeout)
}

func (n *netexecServer) shutdown(w http.ResponseWriter, r *http.Request) {
	n.log.Printf("GET /shutdown")
	hijackAndClose(w)
	n.c.requestExit(0, 0)
}

// dial makes ?tries= requests of ?request= to ?host=:?port= over ?protocol= (http or
// udp) and reports the answers as JSON, like the real /dial used by the e2e tests.
func (n *netexecServer) dial(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	host, port, request, protocol, tryParam := q.Get("host"), q.Get("port"), q.Get("request"), q.Get("protocol"), q.Get("tries")
	n.log.Printf("GET /dial?host=%s&protocol=%s&port=%s&request=%s&tries=%s", host, protocol, port, request, tryParam)
	tries := 1
	if tryParam != "" {
		var err error
		if tries, err = strconv.Atoi(tryParam); err != nil {
			http.Error(w, fmt.Sprintf("tries parameter is invalid. %v", err), http.StatusBadRequest)
			return
		}
	}
	if request == "" {
		http.Error(w, "request parameter not specified. <nil>", http.StatusBadRequest)
		return
	}
	hostPort := net.JoinHostPort(host, port)
	var dial func(ctx context.Context, request, addr string) (string, error)
	var err error
	switch strings.ToLower(protocol) {
	case "", "http":
		dial = dialHTTP
		_, err = net.ResolveTCPAddr("tcp", hostPort)
	case "udp":
		dial = dialUDP
		_, err = net.ResolveUDPAddr("udp", hostPort)
	case "sctp":
		http.Error(w, "sctp is not supported by minikit", http.StatusNotImplemented)
		return
	default:
		http.Error(w, fmt.Sprintf("unsupported protocol. %s", protocol), http.StatusBadRequest)
		return
	}
	if err != nil {
		http.Error(w, fmt.Sprintf("host and/or port param are invalid. %v", err), http.StatusBadRequest)
		return
	}
	var responses, errs []string
	var response string
	for range tries {
		if response, err = dial(r.Context(), request, hostPort); err != nil {
			errs = append(errs, err.Error())
		} else {
			responses = append(responses, response)
		}
	}
	// The real handler keys "responses" on the last answer being non-empty.
	output := map[string][]string{}
	if response != "" {
		output["responses"] = responses
	}
	if len(errs) > 0 {
		output["errors"] = errs
	}
	b, err := json.Marshal(output)
	if err != nil {
		http.Error(w, fmt.Sprintf("response could not be serialized. %v", err), http.StatusExpectationFailed)
		return
	}
	_, _ = w.Write(b)
}

func dialHTTP(ctx context.Context, request, addr string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/%s", addr, request), nil)
	if err != nil {
		return "", err
	}
	// No proxy: the request must leave from this pod, as the real one does.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	return string(body), nil
}

func dialUDP(ctx context.Context, request, addr string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "udp", addr)
	if err != nil {
		return "", fmt.Errorf("udp dial failed. err:%v", err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(request)); err != nil {
		return "", fmt.Errorf("udp connection write failed. err:%v", err)
	}
	buf := make([]byte, 2048)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := conn.Read(buf)
	if err != nil || n == 0 {
		return "", fmt.Errorf("reading from udp connection failed. err:'%v'", err)
	}
	return string(buf[:n]), nil
}

// udp answers netexec's UDP commands. Like the real server it lower-cases the
// datagram first, so "echo Hello" answers "hello".
func (n *netexecServer) udp(pkt []byte, from *net.UDPAddr) []byte {
	text := strings.ToLower(strings.TrimSpace(string(pkt)))
	switch {
	case text == "hostname":
		n.log.Println("Sending udp hostName response")
		return []byte(n.hostname)
	case strings.HasPrefix(text, "echo "):
		msg := strings.TrimPrefix(text, "echo ")
		n.log.Printf("Echoing %v to UDP client %s\n", msg, from)
		return []byte(msg)
	case text == "clientip":
		n.log.Printf("Sending clientip back to UDP client %s\n", from)
		return []byte(from.String())
	case text != "":
		n.log.Printf("Unknown UDP command received from %s: %v\n", from, text)
	}
	return nil
}

// liveness is `agnhost liveness`, the server of the Kubernetes liveness-probe
// tutorial: /healthz answers 200 for the first 10 seconds, then 500. The real one
// always listens on 8080; MINIKIT_PORT overrides that for tests.
func liveness(ctx context.Context, c *container, args []string) error {
	if err := parseFlags(c.flags("liveness"), args); err != nil {
		return err
	}
	port, err := c.envPort("MINIKIT_PORT", 8080)
	if err != nil {
		return err
	}
	started := c.now()
	mux := http.NewServeMux()
	mux.HandleFunc("/started", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, c.now().Sub(started).String())
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		d := c.now().Sub(started)
		if d.Seconds() > 10 {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, "error: %v", d.Seconds())
			return
		}
		fmt.Fprint(w, "ok")
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		loc, err := url.QueryUnescape(r.URL.Query().Get("loc"))
		if err != nil {
			http.Error(w, fmt.Sprintf("invalid redirect: %q", r.URL.Query().Get("loc")), http.StatusBadRequest)
			return
		}
		http.Redirect(w, r, loc, http.StatusFound)
	})
	ln, err := c.listenTCP(c.listenHost, port)
	if err != nil {
		return err
	}
	return c.serve(ctx, c.httpServer(ln, mux))
}
