package apiserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/minikit/minikit/internal/spdyframe"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/proxy"
	asproxy "k8s.io/apiserver/pkg/util/proxy"
	"k8s.io/streaming/pkg/httpstream/wsstream"
)

// defaultContainerAnnotation names the container kubectl (and here the API)
// picks when a pod has several and none is named.
const defaultContainerAnnotation = "kubectl.kubernetes.io/default-container"

// agentTransport dials node agents for streaming requests; the connections are
// hijacked and copied, so no pooling or timeouts beyond the dial apply.
var agentTransport = &http.Transport{Proxy: nil}

// portForwardTransport dials node agents for port-forward. After the upgrade
// the client's SPDY stream is copied into the connection a frame per write
// (spdyframe.ForwardConn): spdystream writes each frame as three pieces, which
// reach here as three TLS records or WebSocket messages, and copied as they
// come they would cross the node's network stack as three segments.
var portForwardTransport = &http.Transport{Proxy: nil,
	DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return spdyframe.ForwardConn{Conn: c}, nil
	}}

// isStreamSub reports whether sub is one of the pod subresources served by
// serveStream.
func isStreamSub(rq request) bool {
	return rq.res != nil && rq.res.name == "pods" && rq.name != "" &&
		(rq.sub == "exec" || rq.sub == "attach" || rq.sub == "portforward")
}

// serveStream serves pods/NAME/exec, attach and portforward as kube-apiserver
// does: it validates the request against the pod, then proxies it to the
// kubelet-like port of the agent on the pod's node. SPDY clients (kubectl 1.20,
// client-go's SPDY executors) are proxied byte for byte after the upgrade
// (UpgradeAwareHandler); WebSocket v5.channel.k8s.io clients (kubectl 1.30+)
// are translated to SPDY here (StreamTranslatorHandler, the
// TranslateStreamCloseWebsocketRequests gate); WebSocket port-forward tunnels
// (SPDY/3.1+portforward.k8s.io, kubectl 1.31+) are unwrapped here
// (TunnelingHandler, the PortForwardWebsockets gate).
func (s *Server) serveStream(w http.ResponseWriter, r *http.Request, rq request) error {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		return apierrors.NewMethodNotSupported(rq.res.gr(), r.Method)
	}
	obj, err := s.get(rq.res, rq.namespace, rq.name)
	if err != nil {
		return err
	}
	pod := obj.(*corev1.Pod)
	q := r.URL.Query()
	agentQuery := url.Values{}
	var path string
	var opts asproxy.Options
	switch rq.sub {
	case "exec", "attach":
		ctr, err := streamContainer(pod, q.Get("container"))
		if err != nil {
			return err
		}
		for _, f := range []struct {
			name, param string
			dst         *bool
		}{{"stdin", "input", &opts.Stdin}, {"stdout", "output", &opts.Stdout}, {"stderr", "error", &opts.Stderr}, {"tty", "tty", &opts.Tty}} {
			v := q.Get(f.name)
			if v == "" {
				continue
			}
			b, err := strconv.ParseBool(v)
			if err != nil {
				return apierrors.NewBadRequest(fmt.Sprintf("invalid value %q for %s: %v", v, f.name, err))
			}
			*f.dst = b
			if b {
				agentQuery.Set(f.param, "1")
			}
		}
		if !opts.Stdin && !opts.Stdout && !opts.Stderr {
			return apierrors.NewBadRequest("you must specify at least 1 of stdin, stdout, stderr")
		}
		if rq.sub == "exec" {
			cmd := q["command"]
			if len(cmd) == 0 {
				return apierrors.NewBadRequest("you must specify at least one command for the container")
			}
			agentQuery["command"] = cmd
		}
		path = "/" + rq.sub + "/" + pod.Namespace + "/" + pod.Name + "/" + ctr
	case "portforward":
		for _, p := range q["ports"] {
			for _, one := range strings.Split(p, ",") {
				n, err := strconv.ParseUint(strings.TrimSpace(one), 10, 16)
				if err != nil || n == 0 {
					return apierrors.NewBadRequest(fmt.Sprintf("invalid port %q: must be between 1 and 65535", one))
				}
				agentQuery.Add("port", strconv.FormatUint(n, 10))
			}
		}
		path = "/portForward/" + pod.Namespace + "/" + pod.Name
	}
	if pod.Spec.NodeName == "" {
		return apierrors.NewBadRequest(fmt.Sprintf("pod %s does not have a host assigned", pod.Name))
	}
	host, err := s.agentHost(pod.Spec.NodeName)
	if err != nil {
		return err
	}
	loc := &url.URL{Scheme: "http", Host: host, Path: path, RawQuery: agentQuery.Encode()}

	// The agent takes the node token, never the client's credentials.
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+s.cfg.NodeToken)
	if la := s.localAgent.Load(); la != nil && rq.sub == "portforward" && la.node == pod.Spec.NodeName {
		la.servePortForward(w, r, path, agentQuery)
		return nil
	}
	responder := streamResponder{s}
	transport := agentTransport
	if rq.sub == "portforward" {
		transport = portForwardTransport
	}
	upgrade := proxy.NewUpgradeAwareHandler(loc, transport, false, true, responder)
	var h http.Handler = upgrade
	switch rq.sub {
	case "exec", "attach":
		// The translator's SPDY client has no hook for headers: the token goes
		// as the URL's password, which net/http sends as basic auth (the agent
		// accepts either form).
		tloc := *loc
		tloc.User = url.UserPassword("apiserver", s.cfg.NodeToken)
		translator := asproxy.NewStreamTranslatorHandler(&tloc, agentTransport, 0, opts)
		h = asproxy.NewTranslatingHandler(upgrade, translator, wsstream.IsWebSocketRequestWithStreamCloseProtocol)
	case "portforward":
		h = asproxy.NewTranslatingHandler(upgrade, asproxy.NewTunnelingHandler(upgrade), wsstream.IsWebSocketRequestWithTunnelingProtocol)
	}
	h.ServeHTTP(w, r)
	return nil
}

// streamContainer picks the container of an exec or attach as kube-apiserver
// does (plus the default-container annotation kubectl honours).
func streamContainer(pod *corev1.Pod, name string) (string, error) {
	if name == "" {
		if d := pod.Annotations[defaultContainerAnnotation]; d != "" && podHasContainer(pod, d) {
			return d, nil
		}
		switch len(pod.Spec.Containers) {
		case 1:
			return pod.Spec.Containers[0].Name, nil
		case 0:
			return "", apierrors.NewBadRequest(fmt.Sprintf("a container name must be specified for pod %s", pod.Name))
		}
		msg := fmt.Sprintf("a container name must be specified for pod %s, choose one of: [%s]", pod.Name, containerNames(pod.Spec.Containers))
		if len(pod.Spec.InitContainers) > 0 {
			msg += fmt.Sprintf(" or one of the init containers: [%s]", containerNames(pod.Spec.InitContainers))
		}
		return "", apierrors.NewBadRequest(msg)
	}
	if !podHasContainer(pod, name) {
		return "", apierrors.NewBadRequest(fmt.Sprintf("container %s is not valid for pod %s", name, pod.Name))
	}
	return name, nil
}

func podHasContainer(pod *corev1.Pod, name string) bool {
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return true
		}
	}
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			return true
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if c.Name == name {
			return true
		}
	}
	return false
}

func containerNames(cs []corev1.Container) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Name
	}
	return strings.Join(names, " ")
}

// agentHost is host:port of a node's agent (nodeAgentAddress), which
// pods/log, pods/exec|attach|portforward and nodes/proxy all reach.
func (s *Server) agentHost(nodeName string) (string, error) {
	nobj, err := s.get(nodeResource, "", nodeName)
	if err != nil {
		return "", err
	}
	n := nobj.(*corev1.Node)
	ip, port := nodeAgentAddress(n)
	if ip == "" || port == 0 {
		return "", apierrors.NewServiceUnavailable(fmt.Sprintf("node %q has no address for its agent", n.Name))
	}
	return net.JoinHostPort(ip, strconv.Itoa(int(port))), nil
}

// streamResponder renders proxy errors (the agent unreachable) as Status.
type streamResponder struct{ s *Server }

func (sr streamResponder) Error(w http.ResponseWriter, r *http.Request, err error) {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		writeError(w, r, err, sr.s.log)
		return
	}
	writeError(w, r, apierrors.NewServiceUnavailable(fmt.Sprintf("error dialing backend: %v", err)), sr.s.log)
}

// localAgent is the node agent of this process (`minikit server` runs one for
// its own node) and its kubelet handler. A port-forward to a pod of that node
// is served by calling the handler on the client's connection rather than by
// proxying to the agent's port: the same handler, token check and SPDY
// session, without copying every frame across the node's loopback twice (out
// of the API server and into the agent, and back).
type localAgent struct {
	node    string
	handler http.Handler
}

// SetLocalAgent names the node whose agent runs in this process and its
// kubelet handler (kubelet.Agent.KubeletHandler).
func (s *Server) SetLocalAgent(node string, kubelet http.Handler) {
	s.localAgent.Store(&localAgent{node: node, handler: kubelet})
}

// servePortForward hands r, already carrying the node token, to the agent as
// the request for path and query. SPDY clients upgrade to the agent directly;
// WebSocket tunnels (kubectl 1.31+) are unwrapped by apiserver's
// TunnelingHandler, which expects its handler to write the upgrade response
// onto the hijacked connection as a proxied backend does (rawUpgrade).
func (la *localAgent) servePortForward(w http.ResponseWriter, r *http.Request, path string, query url.Values) {
	r.URL = &url.URL{Path: path, RawQuery: query.Encode()}
	r.RequestURI = r.URL.RequestURI()
	tunnel := asproxy.NewTunnelingHandler(rawUpgrade{la.handler})
	asproxy.NewTranslatingHandler(la.handler, tunnel, wsstream.IsWebSocketRequestWithTunnelingProtocol).ServeHTTP(w, r)
}

// rawUpgrade runs a handler that upgrades in place (WriteHeader(101), then
// Hijack, as cri-streaming's SPDY upgrade does) so that the hijacked
// connection begins with the 101 response's bytes, as a proxied backend's
// would.
type rawUpgrade struct{ h http.Handler }

func (u rawUpgrade) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.h.ServeHTTP(&rawUpgradeWriter{ResponseWriter: w}, r)
}

type rawUpgradeWriter struct {
	http.ResponseWriter
	upgrade bool
}

func (w *rawUpgradeWriter) WriteHeader(code int) {
	if code == http.StatusSwitchingProtocols {
		w.upgrade = true
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *rawUpgradeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, _, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if w.upgrade {
		var b bytes.Buffer
		b.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
		w.Header().Write(&b)
		b.WriteString("\r\n")
		if _, err := c.Write(b.Bytes()); err != nil {
			c.Close()
			return nil, nil, err
		}
	}
	return c, bufio.NewReadWriter(bufio.NewReader(c), bufio.NewWriter(c)), nil
}
