package images

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	pb "sigs.k8s.io/gateway-api/conformance/echo-basic/grpcechoserver"
)

// echoBasic is registry.k8s.io/gateway-api/echo-basic, the backend of the
// Gateway API conformance suite (sigs.k8s.io/gateway-api/conformance/echo-basic
// v1.6.3 is its source), in its four modes chosen by the environment:
//
//   - HTTP (default): port HTTP_PORT (3000) echoes every request as JSON
//     (path, host, method, proto, headers, httpPort, namespace, ingress,
//     service, pod, tls), with /health, /status/NNN, /retry/?uuid=&succeedAfter=,
//     /ws (a WebSocket echo), ?delay=, and X-Echo-Set-Header; H2C_PORT (3001)
//     the same for h2c only; HTTPS_PORT (8443) over TLS when TLS_SERVER_CERT and
//     TLS_SERVER_PRIVKEY name files, checking client certificates against
//     TLS_CLIENT_CACERTS when given;
//   - GRPC_ECHO_SERVER: the GrpcEcho service (Echo, EchoTwo; EchoThree
//     unimplemented) with reflection, over HTTP_PORT and, with a certificate,
//     over TLS on HTTPS_PORT, using the suite's own protobuf package;
//   - TCP_ECHO_SERVER: TCP_PORT (3000) and, with TLS_SERVER_CERT and
//     TLS_SERVER_PRIV_KEY, TLS on TLS_PORT (8443): a welcome line, then TEST,
//     IS_TLS and PING answered line by line;
//   - UDP_ECHO_SERVER: UDP_PORT (8080) answers each datagram with it and the
//     pod's context as JSON.
//
// Bodies, field names and log lines are the real image's: the suite parses
// the JSON and reads "Echoing back request made to" from the logs of mirrored
// backends.
func echoBasic(ctx context.Context, c *container, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("echo-basic takes no arguments, got %q", args)
	}
	switch {
	case c.env["GRPC_ECHO_SERVER"] != "":
		return c.echoGRPC(ctx)
	case c.env["TCP_ECHO_SERVER"] != "":
		return c.echoTCP(ctx)
	case c.env["UDP_ECHO_SERVER"] != "":
		return c.echoUDP(ctx)
	}
	return c.echoHTTP(ctx)
}

// echoContext is where the request landed, from the downward API.
type echoContext struct {
	Namespace string `json:"namespace"`
	Ingress   string `json:"ingress"`
	Service   string `json:"service"`
	Pod       string `json:"pod"`
}

func (c *container) echoContext() echoContext {
	return echoContext{Namespace: c.env["NAMESPACE"], Ingress: c.env["INGRESS_NAME"],
		Service: c.env["SERVICE_NAME"], Pod: c.env["POD_NAME"]}
}

type echoRequest struct {
	Path     string              `json:"path"`
	Host     string              `json:"host"`
	Method   string              `json:"method"`
	Proto    string              `json:"proto"`
	Headers  map[string][]string `json:"headers"`
	HTTPPort string              `json:"httpPort"`
	echoContext
	TLS *echoTLS `json:"tls,omitempty"`
}

type echoTLS struct {
	Version            string   `json:"version"`
	PeerCertificates   []string `json:"peerCertificates,omitempty"`
	ServerName         string   `json:"serverName"`
	NegotiatedProtocol string   `json:"negotiatedProtocol,omitempty"`
	CipherSuite        string   `json:"cipherSuite"`
}

// tlsVersionName is the version as echo-basic spells it.
func tlsVersionName(v uint16) string {
	switch v {
	case tls.VersionTLS13:
		return "TLSv1.3"
	case tls.VersionTLS12:
		return "TLSv1.2"
	case tls.VersionTLS11:
		return "TLSv1.1"
	case tls.VersionTLS10:
		return "TLSv1.0"
	}
	return ""
}

func peerPEMs(certs []*x509.Certificate) []string {
	var out []string
	for _, crt := range certs {
		out = append(out, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: crt.Raw})))
	}
	return out
}

func (c *container) echoHTTP(ctx context.Context) error {
	httpPort, err := c.envPort("HTTP_PORT", 3000)
	if err != nil {
		return err
	}
	h2cPort, err := c.envPort("H2C_PORT", 3001)
	if err != nil {
		return err
	}
	httpsPort, err := c.envPort("HTTPS_PORT", 8443)
	if err != nil {
		return err
	}
	// httpPort in the reply is the variable as given (the real one echoes the
	// string); "3000" when unset.
	portText := c.env["HTTP_PORT"]
	if portText == "" {
		portText = "3000"
	}
	e := &echoHandler{c: c, port: portText, ctx: c.echoContext(), attempts: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("OK"))
	})
	mux.HandleFunc("/status/", statusHandler)
	mux.HandleFunc("/retry/", e.retry)
	mux.HandleFunc("/", e.echo)
	mux.Handle("/ws", websocket.Handler(func(ws *websocket.Conn) {
		fmt.Fprintln(c.stdout, "established websocket connection", ws.RemoteAddr())
		_, _ = io.Copy(ws, ws)
	}))
	// The real one collapses "//" before routing.
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.URL.Path = strings.ReplaceAll(r.URL.Path, "//", "/")
		mux.ServeHTTP(w, r)
	})

	var servers []server
	ln, err := c.listenTCP(c.listenHost, httpPort)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "Starting server, listening on port %d (http)\n", httpPort)
	servers = append(servers, c.httpServer(ln, handler))

	h2cLn, err := c.listenTCP(c.listenHost, h2cPort)
	if err != nil {
		return err
	}
	h2c := c.httpServer(h2cLn, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 && r.Header.Get("Upgrade") != "h2c" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, "Expected h2c request")
			return
		}
		e.echo(w, r)
	}))
	h2c.srv.Protocols = new(http.Protocols)
	h2c.srv.Protocols.SetHTTP1(true)
	h2c.srv.Protocols.SetUnencryptedHTTP2(true)
	h2c.srv.ReadHeaderTimeout = time.Second
	fmt.Fprintf(c.stdout, "Starting server, listening on port %d (h2c)\n", h2cPort)
	servers = append(servers, h2c)

	cert, key := c.env["TLS_SERVER_CERT"], c.env["TLS_SERVER_PRIVKEY"]
	if cert != "" && key != "" {
		cfg := &tls.Config{}
		if ca := c.env["TLS_CLIENT_CACERTS"]; ca != "" {
			pemCA, err := os.ReadFile(ca)
			if err != nil {
				return err
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pemCA) {
				return fmt.Errorf("unable to append certificate in %q to CA pool", ca)
			}
			cfg.ClientAuth, cfg.ClientCAs = tls.VerifyClientCertIfGiven, pool
		}
		tlsLn, err := c.listenTCP(c.listenHost, httpsPort)
		if err != nil {
			return err
		}
		s := c.httpServer(tlsLn, handler)
		s.srv.TLSConfig = cfg
		s.cert, s.keyFile = cert, key
		fmt.Fprintf(c.stdout, "Starting server, listening on port %d (https)\n", httpsPort)
		servers = append(servers, s)
	}
	return c.serve(ctx, servers...)
}

type echoHandler struct {
	c    *container
	port string
	ctx  echoContext

	mu       sync.Mutex
	attempts map[string]int // /retry/'s count per uuid
}

var statusPath = regexp.MustCompile(`^/status/(\d\d\d)$`)

// statusHandler answers /status/NNN with NNN, anything else under /status/
// with 400.
func statusHandler(w http.ResponseWriter, r *http.Request) {
	code := http.StatusBadRequest
	if m := statusPath.FindStringSubmatch(r.RequestURI); m != nil {
		code, _ = strconv.Atoi(m[1])
	}
	w.WriteHeader(code)
}

// delay waits for the duration in the form value key, if any.
func delay(r *http.Request, key string) error {
	d := r.FormValue(key)
	if d == "" {
		return nil
	}
	t, err := time.ParseDuration(d)
	if err != nil {
		return err
	}
	select {
	case <-time.After(t):
	case <-r.Context().Done():
	}
	return nil
}

func echoError(w http.ResponseWriter, err error, code int) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	body, _ := json.Marshal(struct {
		Message string `json:"message"`
	}{err.Error()})
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

func (e *echoHandler) echo(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(e.c.stdout, "Echoing back request made to %s to client (%s)\n", r.RequestURI, r.RemoteAddr)
	if err := delay(r, "delay"); err != nil {
		echoError(w, err, http.StatusInternalServerError)
		return
	}
	req := echoRequest{Path: r.RequestURI, Host: r.Host, Method: r.Method, Proto: r.Proto,
		Headers: r.Header, HTTPPort: e.port, echoContext: e.ctx}
	if st := r.TLS; st != nil {
		req.TLS = &echoTLS{Version: tlsVersionName(st.Version), PeerCertificates: peerPEMs(st.PeerCertificates),
			ServerName: st.ServerName, NegotiatedProtocol: st.NegotiatedProtocol, CipherSuite: tls.CipherSuiteName(st.CipherSuite)}
	}
	js, err := json.MarshalIndent(req, "", " ")
	if err != nil {
		echoError(w, err, http.StatusInternalServerError)
		return
	}
	// X-Echo-Set-Header: "Name: value, Other: value" sets response headers.
	for _, list := range r.Header["X-Echo-Set-Header"] {
		for kv := range strings.SplitSeq(list, ",") {
			name, value, _ := strings.Cut(strings.TrimSpace(kv), ":")
			if len(w.Header()[name]) == 0 {
				w.Header()[name] = []string{value}
			} else {
				w.Header()[name][0] += "," + strings.TrimSpace(value)
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(js)
}

// retry fails the first succeedAfter requests of a uuid (resetting the
// connection, or with responseCode when given), then echoes.
func (e *echoHandler) retry(w http.ResponseWriter, r *http.Request) {
	uuid := r.URL.Query().Get("uuid")
	if uuid == "" {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, "uuid is required")
		return
	}
	succeedAfter, err := strconv.Atoi(r.URL.Query().Get("succeedAfter"))
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, "succeedAfter is required")
		return
	}
	fail := func(w http.ResponseWriter) error {
		hj, ok := w.(http.Hijacker)
		if !ok {
			return errors.New("response writer does not support hijacking")
		}
		conn, _, err := hj.Hijack()
		if err != nil {
			return err
		}
		if tcp, ok := conn.(*net.TCPConn); ok {
			if err := tcp.SetLinger(0); err != nil {
				return err
			}
		}
		return conn.Close()
	}
	if code, err := strconv.Atoi(r.URL.Query().Get("responseCode")); err == nil {
		fail = func(w http.ResponseWriter) error {
			w.WriteHeader(code)
			return nil
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.attempts[uuid] < succeedAfter {
		e.attempts[uuid]++
		if err := delay(r, "delayRetry"); err != nil {
			echoError(w, err, http.StatusInternalServerError)
			return
		}
		if err := fail(w); err != nil {
			echoError(w, err, http.StatusInternalServerError)
		}
		return
	}
	e.echo(w, r)
}

// grpcServer adapts a gRPC server to the container's serve loop.
type grpcServer struct {
	srv *grpc.Server
	ln  net.Listener
}

func (s *grpcServer) serve() error { return s.srv.Serve(s.ln) }

func (s *grpcServer) shutdown(ctx context.Context) {
	done := make(chan struct{})
	go func() { s.srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.srv.Stop()
	}
}

type grpcEcho struct {
	pb.UnimplementedGrpcEchoServer
	c           *container
	fullService string
	tls         bool
	podContext  *pb.Context
}

func (s *grpcEcho) Echo(ctx context.Context, in *pb.EchoRequest) (*pb.EchoResponse, error) {
	return s.doEcho("Echo", ctx, in)
}

func (s *grpcEcho) EchoTwo(ctx context.Context, in *pb.EchoRequest) (*pb.EchoResponse, error) {
	return s.doEcho("EchoTwo", ctx, in)
}

func (s *grpcEcho) doEcho(method string, ctx context.Context, in *pb.EchoRequest) (*pb.EchoResponse, error) {
	kind := "plaintext"
	if s.tls {
		kind = "TLS"
	}
	fmt.Fprintf(s.c.stdout, "Received over %s: %v\n", kind, in)
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return nil, errors.New("failed to retrieve metadata from incoming request")
	}
	var authority string
	var headers []*pb.Header
	for k, vs := range md {
		for _, v := range vs {
			if k == ":authority" {
				authority = v
			}
			headers = append(headers, &pb.Header{Key: k, Value: v})
		}
	}
	resp := &pb.EchoResponse{Assertions: &pb.Assertions{
		FullyQualifiedMethod: "/" + s.fullService + "/" + method,
		Headers:              headers, Authority: authority, Context: s.podContext,
	}}
	if s.tls {
		p, ok := peer.FromContext(ctx)
		if !ok {
			return nil, errors.New("failed to retrieve auth info from request")
		}
		info, ok := p.AuthInfo.(credentials.TLSInfo)
		if !ok {
			return nil, errors.New("failed to retrieve TLS info from request")
		}
		st := info.State
		resp.Assertions.TlsAssertions = &pb.TLSAssertions{Version: tlsVersionName(st.Version),
			NegotiatedProtocol: st.NegotiatedProtocol, ServerName: st.ServerName,
			CipherSuite: tls.CipherSuiteName(st.CipherSuite), PeerCertificates: peerPEMs(st.PeerCertificates)}
	}
	return resp, nil
}

func (c *container) echoGRPC(ctx context.Context) error {
	httpPort, err := c.envPort("HTTP_PORT", 3000)
	if err != nil {
		return err
	}
	httpsPort, err := c.envPort("HTTPS_PORT", 8443)
	if err != nil {
		return err
	}
	svc := pb.File_grpcecho_proto.Services().ByName("GrpcEcho")
	if svc == nil {
		return errors.New("failed to look up service GrpcEcho")
	}
	ec := c.echoContext()
	podCtx := &pb.Context{Namespace: ec.Namespace, Ingress: ec.Ingress, ServiceName: ec.Service, Pod: ec.Pod}
	newServer := func(ln net.Listener, tlsOn bool, opts ...grpc.ServerOption) *grpcServer {
		s := grpc.NewServer(opts...)
		pb.RegisterGrpcEchoServer(s, &grpcEcho{c: c, fullService: string(svc.FullName()), tls: tlsOn, podContext: podCtx})
		reflection.Register(s)
		return &grpcServer{srv: s, ln: ln}
	}
	ln, err := c.listenTCP(c.listenHost, httpPort)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "plaintext server listening at %v\n", ln.Addr())
	servers := []server{newServer(ln, false)}
	if cert, key := c.env["TLS_SERVER_CERT"], c.env["TLS_SERVER_PRIVKEY"]; cert != "" && key != "" {
		creds, err := credentials.NewServerTLSFromFile(cert, key)
		if err != nil {
			return fmt.Errorf("failed to create credentials: %w", err)
		}
		tln, err := c.listenTCP(c.listenHost, httpsPort)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "secure server listening at %v\n", tln.Addr())
		servers = append(servers, newServer(tln, true, grpc.Creds(creds)))
	}
	return c.serve(ctx, servers...)
}

// tcpEchoContext is the TCP server's reply to TEST.
type tcpEchoContext struct {
	echoContext
	TCPPort string `json:"tcpport"`
	TLSPort string `json:"tlsport,omitempty,omitzero"`
}

type tcpEchoTLS struct {
	Version            string `json:"version"`
	ServerName         string `json:"serverName"`
	NegotiatedProtocol string `json:"negotiatedProtocol,omitempty,omitzero"`
	Curves             string `json:"curves,omitempty,omitzero"`
	CipherSuite        string `json:"cipherSuite"`
}

type tcpEchoAssertions struct {
	tcpEchoContext
	IsTLS bool        `json:"isTLS"`
	TLS   *tcpEchoTLS `json:"tls,omitempty,omitzero"`
}

func (c *container) echoTCP(ctx context.Context) error {
	tcpPort, tlsPort := c.env["TCP_PORT"], c.env["TLS_PORT"]
	if tcpPort == "" {
		tcpPort = "3000"
	}
	if tlsPort == "" {
		tlsPort = "8443"
	}
	tcpN, err := strconv.Atoi(tcpPort)
	if err != nil {
		return fmt.Errorf("non-integer value in TCP_PORT: %s. Error: %w", tcpPort, err)
	}
	tlsN, err := strconv.Atoi(tlsPort)
	if err != nil {
		return fmt.Errorf("non-integer value in TLS_PORT: %s. Error: %w", tlsPort, err)
	}
	base := tcpEchoContext{echoContext: c.echoContext(), TCPPort: tcpPort, TLSPort: tlsPort}
	log := slog.New(slog.NewTextHandler(c.stderr, nil))
	handle := func(conn net.Conn) {
		a := tcpEchoAssertions{tcpEchoContext: base}
		if tc, ok := conn.(*tls.Conn); ok {
			if err := tc.HandshakeContext(ctx); err != nil {
				log.Error("TLS Handshake failed", "error", err)
				return
			}
			st := tc.ConnectionState()
			a.IsTLS = true
			a.TLS = &tcpEchoTLS{NegotiatedProtocol: st.NegotiatedProtocol, ServerName: st.ServerName,
				Version: tls.VersionName(st.Version), CipherSuite: tls.CipherSuiteName(st.CipherSuite), Curves: st.CurveID.String()}
		}
		fmt.Fprint(conn, "Gateway API Test TCP Server\n")
		payload, err := json.Marshal(a)
		if err != nil {
			log.Error("error encoding tcp response", "error", err)
			return
		}
		sc := bufio.NewScanner(conn)
		for sc.Scan() {
			switch sc.Text() {
			case "TEST":
				fmt.Fprintf(conn, "%s\n", payload)
			case "IS_TLS":
				fmt.Fprintf(conn, "%t\n", a.IsTLS)
			case "PING":
				fmt.Fprintf(conn, "PONG\n")
			}
		}
	}
	ln, err := c.listenTCP(c.listenHost, tcpN)
	if err != nil {
		return err
	}
	log.Info("Starting server (tcp)", "protocol", "tcp", "port", tcpPort)
	servers := []server{newTCPServer(ln, handle)}
	if cert, key := c.env["TLS_SERVER_CERT"], c.env["TLS_SERVER_PRIV_KEY"]; cert != "" && key != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return fmt.Errorf("error parsing key pair: %w", err)
		}
		tln, err := c.listenTCP(c.listenHost, tlsN)
		if err != nil {
			return err
		}
		log.Info("Starting server (tcp)", "protocol", "tls", "port", tlsPort)
		servers = append(servers, newTCPServer(tls.NewListener(tln, &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}), handle))
	}
	return c.serve(ctx, servers...)
}

func (c *container) echoUDP(ctx context.Context) error {
	port, err := c.envPort("UDP_PORT", 8080)
	if err != nil {
		return err
	}
	ec := c.echoContext()
	conn, err := c.listenUDP(c.listenHost, port)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "UDP server listening on :%d with context: %+v\n", port, struct {
		Namespace, Ingress, Service, Pod string
	}{ec.Namespace, ec.Ingress, ec.Service, ec.Pod})
	return c.serve(ctx, &udpServer{conn: conn, handle: func(pkt []byte, from *net.UDPAddr) []byte {
		fmt.Fprintf(c.stdout, "Received UDP %s from %s\n", pkt, from)
		b, err := json.Marshal(struct {
			Request string `json:"request"`
			echoContext
		}{string(pkt), ec})
		if err != nil {
			fmt.Fprintln(c.stdout, "Error marshaling UDP response:", err)
			return nil
		}
		return b
	}})
}
