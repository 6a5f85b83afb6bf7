package apiserver

// The proxy subresources, pods|services|nodes/ID/proxy[/PATH], forward any
// request to a pod, to a ready endpoint of a service, or to a node's agent,
// as kube-apiserver's ProxyREST does: the same ID forms (name, name:port,
// scheme:name:port), the same choice of target and the same errors, and
// k8s.io/apimachinery's UpgradeAwareHandler for the forwarding itself
// (X-Forwarded-* headers, Location and HTML link rewriting, the 301 that adds
// the trailing slash, upgrades). The API server dials targets from where it
// runs (in a lab, node1's namespace), over the pod network and the underlay.

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/proxy"
)

var (
	proxyPodResource   = lookup("", "v1", "pods")
	proxySliceResource = lookup("discovery.k8s.io", "v1", "endpointslices")
)

// proxyTransports are the transports of the proxy subresources, built on first
// use. dial, when set before first use (tests), replaces the network dialer.
type proxyTransports struct {
	once sync.Once
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// backend reaches pods and service endpoints; like kube-apiserver's proxy
	// transport it does not verify their certificates: a pod's https port
	// usually serves a self-signed one.
	backend *http.Transport
	// agent reaches node agents; the request carries the node token (agentAuth).
	agent *http.Transport
}

func (p *proxyTransports) init() {
	p.once.Do(func() {
		dial := p.dial
		if dial == nil {
			dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		}
		p.backend = utilnet.SetTransportDefaults(&http.Transport{
			DialContext:         dial,
			TLSClientConfig:     &tls.Config{InsecureSkipVerify: true},
			MaxIdleConnsPerHost: 25,
		})
		p.agent = utilnet.SetTransportDefaults(&http.Transport{DialContext: dial, MaxIdleConnsPerHost: 25})
	})
}

// proxyMethods are the methods the proxy subresources accept.
var proxyMethods = map[string]bool{
	http.MethodGet: true, http.MethodPost: true, http.MethodPut: true, http.MethodPatch: true,
	http.MethodDelete: true, http.MethodHead: true, http.MethodOptions: true,
}

// proxyable reports whether res has the proxy subresource.
func proxyable(res *resource) bool {
	return res.gv.Group == "" && (res.name == "pods" || res.name == "services" || res.name == "nodes")
}

// serveProxy serves RES/ID/proxy[/PATH].
func (s *Server) serveProxy(w http.ResponseWriter, r *http.Request, rq request) error {
	if !proxyMethods[r.Method] {
		return apierrors.NewMethodNotSupported(rq.res.gr(), r.Method)
	}
	s.proxy.init()
	var (
		loc     *url.URL
		rt      http.RoundTripper
		upgrade proxy.UpgradeRequestRoundTripper
		err     error
	)
	switch rq.res.name {
	case "pods":
		loc, err = s.podProxyLocation(rq.namespace, rq.name)
		rt = s.proxy.backend
	case "services":
		loc, err = s.serviceProxyLocation(rq.namespace, rq.name)
		rt = s.proxy.backend
	case "nodes":
		var toAgent bool
		loc, toAgent, err = s.nodeProxyLocation(rq.name)
		rt = s.proxy.backend
		if toAgent {
			auth := &agentAuth{token: s.cfg.NodeToken, next: s.proxy.agent}
			rt = auth
			upgrade = proxy.NewUpgradeRequestRoundTripper(s.proxy.agent, &agentAuth{token: s.cfg.NodeToken, next: proxy.MirrorRequest})
		}
	}
	if err != nil {
		return err
	}
	if sub := proxySubpath(r.URL.Path, rq); sub != "" {
		loc.Path = utilnet.JoinPreservingTrailingSlash("/", sub)
	}
	h := proxy.NewUpgradeAwareHandler(loc, rt, true, false, proxyResponder{s})
	h.UpgradeTransport = upgrade
	// The caller's credentials are for the API, not for the target (kube-apiserver's
	// authentication filter drops them too): a pod must never see the API token.
	out := r.Clone(r.Context())
	out.Header.Del("Authorization")
	h.ServeHTTP(w, out)
	return nil
}

// proxySubpath is what follows ".../NAME/proxy/" in the request path, taken
// from the raw path so that a trailing slash is kept ("" for ".../proxy" and
// ".../proxy/").
func proxySubpath(urlPath string, rq request) string {
	n := 2 + 3 // api/v1 + RES/NAME/proxy
	if rq.namespace != "" {
		n += 2
	}
	parts := strings.SplitN(strings.TrimLeft(urlPath, "/"), "/", n+1)
	if len(parts) <= n {
		return ""
	}
	return parts[n]
}

// proxyResponder renders the proxy's errors as Status objects, as every other
// API error.
type proxyResponder struct{ s *Server }

func (p proxyResponder) Error(w http.ResponseWriter, r *http.Request, err error) {
	writeError(w, r, err, p.s.log)
}

// agentAuth adds the node token that node agents require.
type agentAuth struct {
	token string
	next  http.RoundTripper
}

func (a *agentAuth) RoundTrip(req *http.Request) (*http.Response, error) {
	req = utilnet.CloneRequest(req)
	req.Header.Set("Authorization", "Bearer "+a.token)
	return a.next.RoundTrip(req)
}

func (a *agentAuth) WrappedRoundTripper() http.RoundTripper { return a.next }

// allowedProxyIP is kube-apiserver's rule for pod and node targets: a global
// unicast address (not loopback, link-local or multicast).
func allowedProxyIP(s string) bool {
	ip := net.ParseIP(s)
	return ip != nil && ip.IsGlobalUnicast()
}

// podProxyLocation resolves a pods/ID/proxy target: the pod's IP and the given
// port, else its first declared container port, else the scheme's default.
func (s *Server) podProxyLocation(ns, id string) (*url.URL, error) {
	scheme, name, port, ok := utilnet.SplitSchemeNamePort(id)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid pod request %q", id))
	}
	obj, err := s.get(proxyPodResource, ns, name)
	if err != nil {
		return nil, err
	}
	pod := obj.(*corev1.Pod)
	if port == "" {
	find:
		for _, c := range pod.Spec.Containers {
			for _, p := range c.Ports {
				port = strconv.Itoa(int(p.ContainerPort))
				break find
			}
		}
	}
	ip := pod.Status.PodIP
	if len(pod.Status.PodIPs) > 0 {
		ip = pod.Status.PodIPs[0].IP
	}
	if !allowedProxyIP(ip) {
		return nil, apierrors.NewBadRequest("address not allowed")
	}
	loc := &url.URL{Scheme: scheme, Host: ip}
	if strings.Contains(ip, ":") {
		loc.Host = "[" + ip + "]"
	}
	if port != "" {
		loc.Host = net.JoinHostPort(ip, port)
	}
	return loc, nil
}

// serviceProxyLocation resolves a services/ID/proxy target: a random ready
// endpoint, among the service's EndpointSlices, of the port named in ID (a
// service port number is first mapped to its name). As in kube-apiserver, an
// endpoint counts only if it names a pod of the namespace that has its address.
func (s *Server) serviceProxyLocation(ns, id string) (*url.URL, error) {
	scheme, name, portName, ok := utilnet.SplitSchemeNamePort(id)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid service request %q", id))
	}
	obj, err := s.get(svcResource, ns, name)
	if err != nil {
		return nil, err
	}
	svc := obj.(*corev1.Service)
	if num, err := strconv.ParseInt(portName, 10, 64); err == nil {
		found := false
		for _, sp := range svc.Spec.Ports {
			if int64(sp.Port) == num {
				portName, found = sp.Name, true
				break
			}
		}
		if !found {
			return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("no service port %d found for service %q", num, name))
		}
	}
	type candidate struct {
		ip   string
		port int32
		ref  *corev1.ObjectReference
	}
	var cands []candidate
	kvs, _, err := s.store.List(proxySliceResource.prefix(ns))
	if err != nil {
		return nil, err
	}
	for _, kv := range kvs {
		var sl discoveryv1.EndpointSlice
		if err := decodeStored(kv.Value, &sl); err != nil {
			return nil, fmt.Errorf("decoding stored %s: %w", kv.Key, err)
		}
		if sl.Labels[discoveryv1.LabelServiceName] != name {
			continue
		}
		var port *int32
		for _, p := range sl.Ports {
			if p.Port != nil && (p.Name == nil && portName == "" || p.Name != nil && *p.Name == portName) {
				port = p.Port
				break
			}
		}
		if port == nil {
			continue
		}
		for _, ep := range sl.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				cands = append(cands, candidate{ip: a, port: *port, ref: ep.TargetRef})
			}
		}
	}
	start := 0
	if len(cands) > 0 {
		start = rand.IntN(len(cands))
	}
	for i := range cands {
		c := cands[(start+i)%len(cands)]
		if !s.endpointIsPod(ns, c.ip, c.ref) {
			continue
		}
		return &url.URL{Scheme: scheme, Host: net.JoinHostPort(c.ip, strconv.Itoa(int(c.port)))}, nil
	}
	return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("no endpoints available for service %q", id))
}

// endpointIsPod is kube-apiserver's check of a service endpoint before proxying
// to it: it refers to a pod of the service's namespace that has its address.
func (s *Server) endpointIsPod(ns, ip string, ref *corev1.ObjectReference) bool {
	if ref == nil || ref.Kind != "Pod" || ref.Namespace != ns {
		return false
	}
	obj, err := s.get(proxyPodResource, ns, ref.Name)
	if err != nil {
		return false
	}
	pod := obj.(*corev1.Pod)
	if pod.Status.PodIP == ip {
		return true
	}
	for _, p := range pod.Status.PodIPs {
		if p.IP == ip {
			return true
		}
	}
	return false
}

// nodeProxyLocation resolves a nodes/ID/proxy target. With no port, or the
// agent's port, it is the node's agent (the kubelet's port; plain HTTP with the
// node token); another port is reached with the given scheme and no token.
func (s *Server) nodeProxyLocation(id string) (loc *url.URL, toAgent bool, err error) {
	scheme, name, port, ok := utilnet.SplitSchemeNamePort(id)
	if !ok {
		return nil, false, apierrors.NewBadRequest(fmt.Sprintf("invalid node request %q", id))
	}
	obj, err := s.get(nodeResource, "", name)
	if err != nil {
		return nil, false, err
	}
	n := obj.(*corev1.Node)
	ip, agentPort := nodeAgentAddress(n)
	if ip == "" {
		return nil, false, apierrors.NewServiceUnavailable(fmt.Sprintf("node %q has no address", name))
	}
	if !allowedProxyIP(ip) {
		return nil, false, apierrors.NewBadRequest("address not allowed")
	}
	if port == "" || port == strconv.Itoa(int(agentPort)) {
		if agentPort == 0 {
			return nil, false, apierrors.NewServiceUnavailable(fmt.Sprintf("node %q has no agent port", name))
		}
		return &url.URL{Scheme: "http", Host: net.JoinHostPort(ip, strconv.Itoa(int(agentPort)))}, true, nil
	}
	return &url.URL{Scheme: scheme, Host: net.JoinHostPort(ip, port)}, false, nil
}

// nodeAgentAddress is where the API server reaches a node's agent: its
// InternalIP (else ExternalIP) and the port it reports as the kubelet's.
func nodeAgentAddress(n *corev1.Node) (ip string, port int32) {
	for _, t := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, a := range n.Status.Addresses {
			if a.Type == t && ip == "" {
				ip = a.Address
			}
		}
	}
	return ip, n.Status.DaemonEndpoints.KubeletEndpoint.Port
}
