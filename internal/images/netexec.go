package images

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// netexecServer holds what netexec's handlers share.
type netexecServer struct {
	c        *container
	log      *log.Logger
	hostname string
	httpPort int
	// ready is what /healthz and /readyz report: true once a UDP server listens,
	// as in the real image (which has no UDP server, hence never ready, with
	// --udp-port=-1 and no SCTP port).
	ready bool
	// terminating is set when the pod is asked to stop (SIGTERM): /readyz then
	// answers 503 while --delay-shutdown keeps the servers up.
	terminating atomic.Bool
}

// netexec is `agnhost netexec`: agnhost's test endpoints over HTTP(S) and the
// hostname/echo/clientip/serverport/envvar commands over UDP. /upload answers
// 501: it would write into the host's /uploads, as a minikit pod shares the
// host's filesystem. /shell runs /bin/sh inside the pod's namespaces, as a
// container whose command is a shell script does.
func netexec(ctx context.Context, c *container, args []string) error {
	fs := c.agnhostFlags("netexec")
	httpPort := fs.Int("http-port", 8080, "HTTP Listen Port")
	certFile := fs.String("tls-cert-file", "", "File containing an x509 certificate for HTTPS. (CA cert, if any, concatenated after server cert)")
	keyFile := fs.String("tls-private-key-file", "", "File containing an x509 private key matching --tls-cert-file")
	udpPort := fs.Int("udp-port", 8081, "UDP Listen Port")
	sctpPort := fs.Int("sctp-port", -1, "SCTP Listen Port")
	override := fs.String("http-override", "", "Override the HTTP handler to always respond as if it were a GET with this path & params")
	udpAddrs := fs.String("udp-listen-addresses", "", "A comma separated list of ip addresses the udp servers listen from")
	delayShutdown := fs.Int("delay-shutdown", 0, "Number of seconds to delay shutdown when receiving SIGTERM.")
	if _, err := c.parseAgnhost(fs, args, 0, 0); err != nil {
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
	n := &netexecServer{c: c, log: c.logger(), hostname: hostname, httpPort: *httpPort}
	if *sctpPort != -1 {
		n.log.Printf("SCTP is not supported by minikit; ignoring --sctp-port=%d", *sctpPort)
		n.ready = true
	}

	var servers []server
	if *udpPort != -1 {
		hosts, err := parseUDPAddresses(*udpAddrs, c.listenHost)
		if err != nil {
			return err
		}
		for _, h := range hosts {
			conn, err := c.listenUDP(h, *udpPort)
			if err != nil {
				return err
			}
			n.log.Printf("Started UDP server on port %s %d", h, *udpPort)
			port := conn.LocalAddr().(*net.UDPAddr).Port // *udpPort, unless that was 0
			servers = append(servers, &udpServer{conn: conn, handle: func(pkt []byte, from *net.UDPAddr) []byte {
				return n.udp(pkt, from, port)
			}})
		}
		n.ready = true
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
	n.httpPort = ln.Addr().(*net.TCPAddr).Port
	hs := c.httpServer(ln, h)
	hs.cert, hs.keyFile = *certFile, *keyFile
	n.log.Printf("Started HTTP server on port %d", *httpPort)

	// A stop request (the pod's SIGTERM) fails /readyz at once; the servers
	// go on for --delay-shutdown seconds, so endpoints drop the pod first.
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	go func() {
		select {
		case <-ctx.Done():
		case <-runCtx.Done():
			return
		}
		n.terminating.Store(true)
		if *delayShutdown > 0 {
			n.log.Printf("Sleeping %d seconds before terminating...", *delayShutdown)
			select {
			case <-c.after(time.Duration(*delayShutdown) * time.Second):
			case <-runCtx.Done():
			}
		}
		stop()
	}()
	return c.serve(runCtx, append(servers, hs)...)
}

// parseUDPAddresses is --udp-listen-addresses: a sorted set of IPs, or the
// default listen host when empty.
func parseUDPAddresses(list, def string) ([]string, error) {
	if list == "" {
		return []string{def}, nil
	}
	var hosts []string
	for _, a := range strings.Split(list, ",") {
		if net.ParseIP(a) == nil {
			return nil, fmt.Errorf("parseAddress: invalid address %s", a)
		}
		hosts = append(hosts, a)
	}
	slices.Sort(hosts)
	return slices.Compact(hosts), nil
}

func (n *netexecServer) routes(mux *http.ServeMux) {
	mux.HandleFunc("/", n.root)
	mux.HandleFunc("/clientip", n.clientIP)
	mux.HandleFunc("/serverport", n.serverPort)
	mux.HandleFunc("/header", n.header)
	mux.HandleFunc("/dial", n.dial)
	mux.HandleFunc("/echo", n.echo)
	mux.HandleFunc("/exit", n.exit)
	mux.HandleFunc("/healthz", n.healthz)
	mux.HandleFunc("/readyz", n.readyz)
	mux.HandleFunc("/hostname", n.hostnameHandler)
	mux.HandleFunc("/envvar", n.envvar)
	mux.HandleFunc("/redirect", n.redirect)
	mux.HandleFunc("/shell", n.shell)
	mux.HandleFunc("/upload", n.notImplemented)
	mux.HandleFunc("/hostName", n.hostnameHandler)
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
	if !n.ready {
		w.WriteHeader(http.StatusPreconditionFailed)
	}
}

// readyz is /healthz that turns 503 once the pod is asked to stop.
func (n *netexecServer) readyz(w http.ResponseWriter, r *http.Request) {
	n.log.Printf("GET /readyz")
	switch {
	case n.terminating.Load():
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, "shutting down")
	case n.ready:
		fmt.Fprint(w, "ok")
	default:
		w.WriteHeader(http.StatusPreconditionFailed)
	}
}

func (n *netexecServer) serverPort(w http.ResponseWriter, r *http.Request) {
	n.log.Printf("GET /serverport")
	fmt.Fprint(w, n.httpPort)
}

// header answers one request header (?key=) or all of them as JSON.
func (n *netexecServer) header(w http.ResponseWriter, r *http.Request) {
	key := r.FormValue("key")
	if key != "" {
		n.log.Printf("GET /header?key=%s", key)
		fmt.Fprint(w, r.Header.Get(key))
		return
	}
	n.log.Printf("GET /header")
	data, err := json.Marshal(r.Header)
	if err != nil {
		fmt.Fprintf(w, "error marshalling header, err: %v", err)
		return
	}
	_, _ = w.Write(data)
}

// envvar answers the container's environment variable ?var=.
func (n *netexecServer) envvar(w http.ResponseWriter, r *http.Request) {
	name := r.FormValue("var")
	if name == "" {
		http.Error(w, "'var' query parameter is required", http.StatusBadRequest)
		return
	}
	n.log.Printf("GET /envvar?var=%s", name)
	v, ok := n.c.env[name]
	if !ok {
		http.Error(w, fmt.Sprintf("env var %q is not set", name), http.StatusInternalServerError)
		return
	}
	fmt.Fprint(w, v)
}

// shell runs ?shellCommand= (or ?cmd=) with /bin/sh -c and answers its combined
// output and error as JSON, with 200 either way, as the real handler does.
func (n *netexecServer) shell(w http.ResponseWriter, r *http.Request) {
	cmd := r.FormValue("shellCommand")
	if cmd == "" {
		cmd = r.FormValue("cmd")
	}
	n.log.Printf("GET /shell?cmd=%s", cmd)
	out, err := exec.CommandContext(r.Context(), n.c.shell, "-c", cmd).CombinedOutput()
	output := map[string]string{}
	if len(out) > 0 {
		output["output"] = string(out)
	}
	if err != nil {
		output["error"] = err.Error()
	}
	n.log.Printf("Output: %s", output)
	b, err := json.Marshal(output)
	if err != nil {
		http.Error(w, fmt.Sprintf("response could not be serialized. %v", err), http.StatusExpectationFailed)
		return
	}
	_, _ = w.Write(b)
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
// datagram first, so "echo Hello" answers "hello"; only envvar keeps the name's case.
func (n *netexecServer) udp(pkt []byte, from *net.UDPAddr, port int) []byte {
	raw := strings.TrimSpace(string(pkt))
	text := strings.ToLower(raw)
	switch {
	case text == "hostname":
		n.log.Println("Sending udp hostName response")
		return []byte(n.hostname)
	case strings.HasPrefix(text, "envvar "):
		_, name, _ := strings.Cut(raw, " ")
		name = strings.TrimSpace(name)
		n.log.Printf("Sending UDP envvar response for %s", name)
		return append([]byte{}, n.c.env[name]...) // unset: an empty datagram, still an answer
	case strings.HasPrefix(text, "echo "):
		msg := strings.TrimPrefix(text, "echo ")
		n.log.Printf("Echoing %v to UDP client %s\n", msg, from)
		return []byte(msg)
	case text == "clientip":
		n.log.Printf("Sending clientip back to UDP client %s\n", from)
		return []byte(from.String())
	case text == "serverport":
		n.log.Printf("Sending server port to UDP client %d\n", port)
		return []byte(strconv.Itoa(port))
	case text != "":
		n.log.Printf("Unknown UDP command received from %s: %v\n", from, text)
	}
	// The real server answers nothing; an empty datagram would be an answer.
	return nil
}
