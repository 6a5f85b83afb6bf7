package images

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
)

// echoInfo is what minikit/echo tells a client: who it saw, who answered.
type echoInfo struct {
	ClientAddress string            `json:"client_address"`
	ClientIP      string            `json:"client_ip"`
	Pod           string            `json:"pod"`
	Node          string            `json:"node"`
	Namespace     string            `json:"namespace"`
	ServerAddress string            `json:"server_address"`
	Method        string            `json:"method"`
	URI           string            `json:"uri"`
	Host          string            `json:"host"`
	Headers       map[string]string `json:"headers"`
}

// runEcho is minikit/echo, the lab's answer to "which source address did the pod
// see?": on one port number (8080, or --port, or env PORT) it answers HTTP with the
// client address, the pod, node and namespace, the server address and the request,
// and UDP datagrams with the client address and pod. The client address is what
// shows SNAT and externalTrafficPolicy at work.
func runEcho(ctx context.Context, c *container, args []string) error {
	def, err := c.envPort("PORT", 8080)
	if err != nil {
		return err
	}
	fs := c.flags("echo")
	port := fs.Int("port", def, "TCP and UDP port to listen on (default: env PORT, else 8080)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := checkPort("--port", *port); err != nil {
		return err
	}
	hostname, err := c.hostname()
	if err != nil {
		return fmt.Errorf("reading hostname: %w", err)
	}
	pod := c.podName(hostname)
	node := c.firstEnv("MINIKIT_NODE_NAME", "NODE_NAME", "MY_NODE_NAME")
	namespace := c.firstEnv("MINIKIT_POD_NAMESPACE", "POD_NAMESPACE", "MY_POD_NAMESPACE")

	ln, conn, err := c.listenTCPAndUDP(*port)
	if err != nil {
		return err
	}
	logger := c.logger()
	logger.Printf("minikit/echo: pod %s serving HTTP and UDP on port %d", pod, ln.Addr().(*net.TCPAddr).Port)

	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info := echoInfo{
			ClientAddress: r.RemoteAddr,
			Pod:           pod,
			Node:          node,
			Namespace:     namespace,
			Method:        r.Method,
			URI:           r.RequestURI,
			Host:          r.Host,
			Headers:       map[string]string{},
		}
		info.ClientIP, _, _ = net.SplitHostPort(r.RemoteAddr)
		if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			info.ServerAddress = a.String()
		}
		for k, v := range r.Header {
			info.Headers[k] = strings.Join(v, ", ")
		}
		fmt.Fprintf(c.stdout, "HTTP %s %s from %s\n", r.Method, r.RequestURI, r.RemoteAddr)
		if r.URL.Query().Get("format") == "json" || strings.Contains(r.Header.Get("Accept"), "application/json") {
			w.Header().Set("Content-Type", "application/json")
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			_ = enc.Encode(info)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, echoText(info, r))
	})
	udp := func(_ []byte, from *net.UDPAddr) []byte {
		fmt.Fprintf(c.stdout, "UDP from %s\n", from)
		return fmt.Appendf(nil, "client_address=%s pod=%s\n", from, pod)
	}
	return c.serve(ctx, c.httpServer(ln, h), &udpServer{conn: conn, handle: udp})
}

// echoText renders info as key=value lines, then the request as it arrived:
// request line and headers (Host first, the rest sorted).
func echoText(info echoInfo, r *http.Request) string {
	var b strings.Builder
	fmt.Fprintf(&b, "client_address=%s\npod=%s\nnode=%s\nnamespace=%s\nserver_address=%s\n\n",
		info.ClientAddress, info.Pod, info.Node, info.Namespace, info.ServerAddress)
	fmt.Fprintf(&b, "%s %s %s\nHost: %s\n", r.Method, r.RequestURI, r.Proto, r.Host)
	keys := make([]string, 0, len(r.Header))
	for k := range r.Header {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range r.Header[k] {
			fmt.Fprintf(&b, "%s: %s\n", k, v)
		}
	}
	return b.String()
}

func (c *container) firstEnv(keys ...string) string {
	for _, k := range keys {
		if v := c.env[k]; v != "" {
			return v
		}
	}
	return ""
}

// listenTCPAndUDP binds TCP and UDP to the same port number. For port 0 the
// kernel picks the TCP port; if that number is taken for UDP, try another.
func (c *container) listenTCPAndUDP(port int) (net.Listener, *net.UDPConn, error) {
	for attempt := 0; ; attempt++ {
		ln, err := c.listenTCP(c.listenHost, port)
		if err != nil {
			return nil, nil, err
		}
		conn, err := c.listenUDP(c.listenHost, ln.Addr().(*net.TCPAddr).Port)
		if err == nil {
			return ln, conn, nil
		}
		_ = ln.Close()
		if port != 0 || attempt == 10 {
			return nil, nil, err
		}
	}
}
