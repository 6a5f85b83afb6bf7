package trace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/minikit/minikit/internal/cni"
	"github.com/minikit/minikit/internal/iptables/iptsim"
	"github.com/minikit/minikit/internal/kubelet"
	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/nft/nftsim"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
)

// Config is `minikit trace`'s arguments and flags.
type Config struct {
	// From is a pod ([pod/]NAME), a node ([node/]NAME), "client" or
	// "external" (the lab's hosts), or an IP address.
	From string
	// To is svc/NAME[:PORT] (a Service's cluster IP), or ADDRESS:PORT where
	// ADDRESS is an IP (cluster IP, external IP, LB IP, node IP) or a node
	// name (its NodePort).
	To        string
	Namespace string
	Proto     string // tcp or udp; default: the Service port's, else tcp
	// Node is the node whose rules to read; by default the one that
	// receives the first packet.
	Node string
	// Lab is the lab whose namespaces are the nodes (LAB-NODE); a node that
	// is not in it is read from the root namespace if it is this machine.
	Lab string
	// Family is the address family to trace, ipv4 or ipv6, in a
	// dual-stack cluster: which of a Service's cluster IPs svc/NAME means,
	// which of a node's addresses a node name, which of FROM's addresses
	// sends. By default the family of an IP address in TO, else the
	// cluster's primary family (the Service's first cluster IP).
	Family  string
	Live    bool
	Timeout time.Duration // of the live probe
	// Gateway reads the Gateway API's objects: a TO that is a Gateway's
	// address and listener port gets the Gateway's part (Result.Gateway).
	// nil, or a cluster without the CRDs, traces the Service alone.
	Gateway gwclient.Interface
}

type run struct {
	c     kubernetes.Interface
	o     Config
	nodes []corev1.Node
	pods  []corev1.Pod
	// fam is the family traced: TO's address's.
	fam family
	// routeCache holds the answers of routeGet: the tracer asks the same
	// route again for every rule with -o on every branch.
	routeCache map[routeKey]routeAnswer
	// nftRuleset is the traced node's table ip kube-proxy in nftables
	// mode, for the live trace's rule positions.
	nftRuleset *nftsim.Ruleset
}

type routeKey struct {
	netns string
	dst   netip.Addr
}

type routeAnswer struct {
	rt  *kernelRoute
	err error
}

// route is routeGet, asked once per namespace and destination in a run.
func (r *run) route(netns string, dst netip.Addr) (*kernelRoute, error) {
	k := routeKey{netns, dst}
	if a, ok := r.routeCache[k]; ok {
		return a.rt, a.err
	}
	rt, err := routeGet(netns, dst)
	if r.routeCache == nil {
		r.routeCache = map[routeKey]routeAnswer{}
	}
	r.routeCache[k] = routeAnswer{rt, err}
	return rt, err
}

// Run resolves FROM and TO, reads the node's rules and routes, traces, and
// with Live probes.
func Run(ctx context.Context, c kubernetes.Interface, o Config) (*Result, error) {
	if o.Lab == "" {
		o.Lab = "lab"
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.Timeout == 0 {
		o.Timeout = 3 * time.Second
	}
	r := &run{c: c, o: o}
	nl, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	r.nodes = nl.Items
	fam, set, ok := parseFamily(o.Family)
	if !ok {
		return nil, fmt.Errorf("--ip-family must be ipv4 or ipv6, not %q", o.Family)
	}
	r.fam = fam
	// TO first: its address decides the family FROM sends from.
	to, proto, err := r.resolveTo(ctx, o.To, set)
	if err != nil {
		return nil, err
	}
	if set && familyOf(to.Addr.Addr()) != fam {
		return nil, fmt.Errorf("TO %s is an %s address, not --ip-family %s", to.Addr.Addr(), familyOf(to.Addr.Addr()), o.Family)
	}
	r.fam = familyOf(to.Addr.Addr())
	from, err := r.resolveFrom(ctx, o.From)
	if err != nil {
		return nil, err
	}
	if o.Proto != "" {
		proto = strings.ToLower(o.Proto)
	}
	if proto != "tcp" && proto != "udp" {
		return nil, fmt.Errorf("--proto must be tcp or udp, not %q", proto)
	}
	nodeName, err := r.tracedNode(ctx, from, to)
	if err != nil {
		return nil, err
	}
	n := r.node(nodeName)
	if n == nil {
		return nil, fmt.Errorf("node %q not found", nodeName)
	}
	netns, err := r.nodeNetns(n)
	if err != nil {
		return nil, err
	}
	res := &Result{From: from, To: to, Proto: proto, Node: nodeName, Netns: netns, Hook: "PREROUTING", Family: r.fam.String()}
	pkt := iptsim.Packet{Src: from.IP, Dst: to.Addr, Proto: proto}
	if from.Kind == "node" && from.Node == nodeName {
		res.Hook, pkt.Local = "OUTPUT", true
		// The node's own packets leave with the address its route picks.
		if rt, err := r.route(netns, to.Addr.Addr()); err == nil && rt.Src.IsValid() {
			pkt.Src = rt.Src
			res.From.IP = rt.Src
		}
	}
	local, err := addrs(netns, r.fam)
	if err != nil {
		return nil, err
	}
	if !pkt.Local {
		// The interface the packet arrives on is the one the node would
		// answer it through.
		if rt, err := r.route(netns, pkt.Src); err == nil {
			pkt.In = rt.Dev
		}
	}
	outDev := func(dst netip.Addr) string {
		if rt, err := r.route(netns, dst); err == nil {
			return rt.Dev
		}
		return ""
	}
	var outs []iptsim.Outcome
	res.Mode = ModeIPTables
	js, err := nftRules(netns, r.fam)
	if errors.Is(err, errNoNFTTable) && r.fam.v6 {
		// No table ip6 kube-proxy: iptables mode, unless the IPv4 table says
		// the node runs the nftables proxy single-stack.
		if _, err4 := nftRules(netns, ipv4); err4 == nil {
			return nil, fmt.Errorf("node %s runs the nftables proxy without a table ip6 kube-proxy: it proxies no IPv6 (is the cluster dual-stack?)", nodeName)
		}
	}
	switch {
	case err == nil:
		res.Mode, res.Hook = ModeNFTables, strings.ToLower(res.Hook)
		rs, err := nftsim.Parse(js)
		if err != nil {
			return nil, fmt.Errorf("parsing the nftables rules of node %s: %w", nodeName, err)
		}
		r.nftRuleset = rs
		if outs, err = rs.Trace(iptsim.Node{Addrs: local, Out: outDev}, pkt); err != nil {
			return nil, fmt.Errorf("tracing through the nftables rules of node %s: %w", nodeName, err)
		}
		if outs, err = minikitRules(netns, outs, pkt, iptsim.Node{Addrs: local, Out: outDev}); err != nil {
			return nil, fmt.Errorf("tracing through the iptables rules of node %s: %w", nodeName, err)
		}
	case errors.Is(err, errNoNFTTable):
		if pkt.Recent, err = recentLists(netns, pkt.Src); err != nil {
			return nil, err
		}
		save, err := saveRules(netns, r.fam)
		if err != nil {
			return nil, err
		}
		rules, err := iptsim.Parse(save)
		if err != nil {
			return nil, fmt.Errorf("parsing the %s rules of node %s: %w", r.fam, nodeName, err)
		}
		// Without readable ipsets (a kernel without ip_set) a rule that matches
		// one fails the walk with its own error; others trace as before.
		sets, _ := policySets(netns)
		if outs, err = rules.Trace(iptsim.Node{Addrs: local, Out: outDev, Sets: sets}, pkt); err != nil {
			return nil, fmt.Errorf("tracing through the rules of node %s: %w", nodeName, err)
		}
	default:
		return nil, fmt.Errorf("reading the nftables rules of node %s: %w", nodeName, err)
	}
	res.Paths = Paths(outs, to, nodeName)
	if err := r.routes(ctx, res, netns, outs); err != nil {
		return nil, err
	}
	for i := range res.Paths {
		if res.Paths[i].Verdict == "ACCEPT" {
			if err := r.deliveringHop(res, &res.Paths[i], pkt); err != nil {
				return nil, err
			}
		}
	}
	if err := r.gateway(ctx, res); err != nil {
		return nil, err
	}
	if o.Live {
		if err := r.live(res); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func (r *run) node(name string) *corev1.Node {
	for i := range r.nodes {
		if r.nodes[i].Name == name {
			return &r.nodes[i]
		}
	}
	return nil
}

// internalIP is the node's InternalIP of the family.
func internalIP(n *corev1.Node, f family) netip.Addr { return f.first(internalIPs(n)...) }

// nodeByIP is the node with InternalIP ip, of either family.
func (r *run) nodeByIP(ip netip.Addr) *corev1.Node {
	for i := range r.nodes {
		for _, a := range internalIPs(&r.nodes[i]) {
			if b, err := netip.ParseAddr(a); err == nil && b == ip {
				return &r.nodes[i]
			}
		}
	}
	return nil
}

// nodeByPodIP is the node whose pod CIDR of ip's family holds ip.
func (r *run) nodeByPodIP(ip netip.Addr) *corev1.Node {
	for i := range r.nodes {
		cidrs := r.nodes[i].Spec.PodCIDRs
		if len(cidrs) == 0 {
			cidrs = []string{r.nodes[i].Spec.PodCIDR}
		}
		for _, c := range cidrs {
			if p, err := netip.ParsePrefix(c); err == nil && p.Contains(ip) {
				return &r.nodes[i]
			}
		}
	}
	return nil
}

// labNS is lab.NS: a lab host's namespace.
func (r *run) labNS(host string) string { return r.o.Lab + "-" + host }

// nodeNetns finds where a node's kernel state is: its lab namespace, or
// this machine's own namespace when the node is this machine.
func (r *run) nodeNetns(n *corev1.Node) (string, error) {
	if ns := r.labNS(n.Name); netns.ExistsNamed(ns) {
		return ns, nil
	}
	ip := internalIP(n, ipv4)
	if !ip.IsValid() {
		ip = internalIP(n, ipv6)
	}
	own, err := addrs("", familyOf(ip))
	if err != nil {
		return "", err
	}
	for _, a := range own {
		if a == ip {
			return "", nil
		}
	}
	return "", fmt.Errorf("node %s (%s) is neither in lab %q (no netns %s) nor this machine; run minikit trace on that node, or pass --lab",
		n.Name, ip, r.o.Lab, r.labNS(n.Name))
}

func (r *run) resolveFrom(ctx context.Context, s string) (Source, error) {
	if ip, err := netip.ParseAddr(s); err == nil {
		return Source{Kind: "ip", IP: ip}, nil
	}
	kind, name, explicit := strings.Cut(s, "/")
	if !explicit {
		kind, name = "", s
	}
	if !explicit && (s == "client" || s == "external") {
		ns := r.labNS(s)
		if !netns.ExistsNamed(ns) {
			return Source{}, fmt.Errorf("lab %q has no %s host (netns %s)", r.o.Lab, s, ns)
		}
		ip, err := hostAddr(ns, r.fam)
		if err != nil {
			return Source{}, err
		}
		return Source{Kind: s, Name: s, IP: ip, Netns: ns}, nil
	}
	if kind == "node" || (kind == "" && r.node(name) != nil) {
		n := r.node(name)
		if n == nil {
			return Source{}, fmt.Errorf("node %q not found", name)
		}
		ns, err := r.nodeNetns(n)
		if err != nil {
			return Source{}, err
		}
		ip := internalIP(n, r.fam)
		if !ip.IsValid() {
			return Source{}, fmt.Errorf("node %s has no %s InternalIP", name, r.fam)
		}
		return Source{Kind: "node", Name: name, IP: ip, Node: name, Netns: ns}, nil
	}
	if kind != "" && kind != "pod" && kind != "po" {
		return Source{}, fmt.Errorf("FROM %q: want pod/NAME, node/NAME, client, external or an IP", s)
	}
	pod, err := r.c.CoreV1().Pods(r.o.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Source{}, fmt.Errorf("FROM %q is not a node, a lab host or an IP, and as a pod: %w", s, err)
	}
	ips := podIPs(pod)
	if len(ips) == 0 || pod.Spec.NodeName == "" {
		return Source{}, fmt.Errorf("pod %s/%s has no IP yet (phase %s)", pod.Namespace, pod.Name, pod.Status.Phase)
	}
	ip := r.fam.first(ips...)
	if !ip.IsValid() {
		return Source{}, fmt.Errorf("pod %s/%s has no %s address (podIPs %s): it cannot reach %s", pod.Namespace, pod.Name, r.fam, strings.Join(ips, ", "), r.o.To)
	}
	src := Source{Kind: "pod", Name: pod.Namespace + "/" + pod.Name, IP: ip, Node: pod.Spec.NodeName}
	if n := r.node(pod.Spec.NodeName); n != nil && !pod.Spec.HostNetwork {
		if sb, err := kubelet.PodSandboxName(n, pod.UID); err == nil && netns.ExistsNamed(sb) {
			src.Netns = sb
		}
	}
	return src, nil
}

func portName(svc *corev1.Service, p *corev1.ServicePort) string {
	s := svc.Namespace + "/" + svc.Name
	if p.Name != "" {
		s += ":" + p.Name
	}
	return s
}

// resolveTo reads TO; familySet says --ip-family chose r.fam (else a
// Service's or a node's primary address is meant).
func (r *run) resolveTo(ctx context.Context, s string, familySet bool) (Target, string, error) {
	if kind, rest, ok := strings.Cut(s, "/"); ok && (kind == "svc" || kind == "service") {
		name, port, _ := strings.Cut(rest, ":")
		svc, err := r.c.CoreV1().Services(r.o.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return Target{}, "", fmt.Errorf("TO %q: %w", s, err)
		}
		ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
		if err != nil {
			return Target{}, "", fmt.Errorf("service %s/%s has no cluster IP (%q)", svc.Namespace, svc.Name, svc.Spec.ClusterIP)
		}
		if familySet {
			if ip = r.fam.first(clusterIPs(svc)...); !ip.IsValid() {
				return Target{}, "", fmt.Errorf("service %s/%s has no %s cluster IP (clusterIPs %s)", svc.Namespace, svc.Name, r.fam, strings.Join(clusterIPs(svc), ", "))
			}
		}
		for i := range svc.Spec.Ports {
			p := &svc.Spec.Ports[i]
			if port == "" || port == p.Name || port == strconv.Itoa(int(p.Port)) {
				return Target{Addr: netip.AddrPortFrom(ip, uint16(p.Port)), Service: portName(svc, p), Kind: "cluster IP"},
					strings.ToLower(string(p.Protocol)), nil
			}
		}
		return Target{}, "", fmt.Errorf("service %s/%s has no port %q", svc.Namespace, svc.Name, port)
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return Target{}, "", fmt.Errorf("TO %q: want svc/NAME[:PORT] or ADDRESS:PORT: %w", s, err)
	}
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return Target{}, "", fmt.Errorf("TO %q: bad port: %w", s, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		n := r.node(host)
		if n == nil {
			return Target{}, "", fmt.Errorf("TO %q: %q is neither an IP nor a node", s, host)
		}
		f := r.fam
		if ips := internalIPs(n); !familySet && len(ips) > 0 {
			// The node's primary address: its first InternalIP.
			if a, err := netip.ParseAddr(ips[0]); err == nil {
				f = familyOf(a)
			}
		}
		if ip = internalIP(n, f); !ip.IsValid() {
			return Target{}, "", fmt.Errorf("TO %q: node %s has no %s InternalIP", s, host, f)
		}
	}
	t := Target{Addr: netip.AddrPortFrom(ip, uint16(pn)), Kind: "address"}
	svcs, err := r.c.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return Target{}, "", fmt.Errorf("listing services: %w", err)
	}
	a := ip.String()
	for i := range svcs.Items {
		svc := &svcs.Items[i]
		for j := range svc.Spec.Ports {
			p := &svc.Spec.Ports[j]
			kind := ""
			switch {
			case slices.Contains(clusterIPs(svc), a) && int(p.Port) == int(pn):
				kind = "cluster IP"
			case slices.Contains(svc.Spec.ExternalIPs, a) && int(p.Port) == int(pn):
				kind = "external IP"
			case lbIP(svc, a) && int(p.Port) == int(pn):
				kind = "loadbalancer IP"
			case p.NodePort != 0 && int(p.NodePort) == int(pn) && r.nodeByIP(ip) != nil:
				kind = "NodePort"
			}
			if kind != "" {
				t.Kind, t.Service = kind, portName(svc, p)
				return t, strings.ToLower(string(p.Protocol)), nil
			}
		}
	}
	return t, "tcp", nil
}

func lbIP(svc *corev1.Service, a string) bool {
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP == a {
			return true
		}
	}
	return false
}

// tracedNode is the node that sees the first packet and applies the NAT.
func (r *run) tracedNode(ctx context.Context, from Source, to Target) (string, error) {
	if r.o.Node != "" {
		return r.o.Node, nil
	}
	if from.Node != "" {
		return from.Node, nil
	}
	if n := r.nodeByIP(to.Addr.Addr()); n != nil {
		return n.Name, nil
	}
	if to.Kind == "loadbalancer IP" {
		if n, err := r.announcer(ctx, to); err == nil && n != "" {
			return n, nil
		}
	}
	if from.Netns != "" {
		// Which node does FROM send it to? Its route's next hop.
		if rt, err := r.route(from.Netns, to.Addr.Addr()); err == nil && rt.Via.IsValid() {
			if n := r.nodeByIP(rt.Via); n != nil {
				return n.Name, nil
			}
		}
	}
	return "", fmt.Errorf("cannot tell which node receives %s from %s; pass --node", to.Addr, from.IP)
}

// announcer is the node that answers ARP for a LoadBalancer IP: the source
// of the Service's latest nodeAssigned Event (MetalLB's convention).
func (r *run) announcer(ctx context.Context, to Target) (string, error) {
	ns, rest, _ := strings.Cut(to.Service, "/")
	name, _, _ := strings.Cut(rest, ":")
	evs, err := r.c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	var best *corev1.Event
	for i := range evs.Items {
		e := &evs.Items[i]
		if e.InvolvedObject.Kind != "Service" || e.InvolvedObject.Name != name || e.Reason != "nodeAssigned" {
			continue
		}
		if best == nil || eventTime(e).After(eventTime(best)) {
			best = e
		}
	}
	if best == nil {
		return "", errors.New("no nodeAssigned event")
	}
	host := best.Source.Host
	if host == "" {
		host = best.ReportingInstance
	}
	return host, nil
}

func eventTime(e *corev1.Event) time.Time {
	t := e.LastTimestamp.Time
	if e.EventTime.After(t) {
		t = e.EventTime.Time
	}
	if e.CreationTimestamp.After(t) {
		t = e.CreationTimestamp.Time
	}
	return t
}

func (r *run) allPods(ctx context.Context) ([]corev1.Pod, error) {
	if r.pods == nil {
		pl, err := r.c.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing pods: %w", err)
		}
		r.pods = pl.Items
	}
	return r.pods, nil
}

// endpoint finds what owns an address: a pod, or a node (host network).
func (r *run) endpoint(ctx context.Context, ip netip.Addr) (*Pod, *corev1.Pod, error) {
	pods, err := r.allPods(ctx)
	if err != nil {
		return nil, nil, err
	}
	for i := range pods {
		p := &pods[i]
		if slices.Contains(podIPs(p), ip.String()) && !p.Spec.HostNetwork && p.DeletionTimestamp == nil {
			return &Pod{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName}, p, nil
		}
	}
	if n := r.nodeByIP(ip); n != nil {
		return &Pod{Node: n.Name, HostNetwork: true}, nil, nil
	}
	return nil, nil, nil
}

// routes adds, to every accepted path, the route out of the node and the
// pod the packet ends at.
func (r *run) routes(ctx context.Context, res *Result, netns string, outs []iptsim.Outcome) error {
	for i := range res.Paths {
		p := &res.Paths[i]
		if p.Verdict != "ACCEPT" {
			continue
		}
		dst := outs[i].Dst.Addr()
		rt, err := r.route(netns, dst)
		if err != nil {
			p.Why = strings.TrimPrefix(p.Why+"; ", "; ") + err.Error()
			continue
		}
		route := &Route{Kind: "link", Dev: rt.Dev}
		if rt.Src.IsValid() {
			route.Src = rt.Src.String()
		}
		ep, pod, err := r.endpoint(ctx, dst)
		if err != nil {
			return err
		}
		p.Endpoint = ep
		switch {
		case rt.Local || outs[i].Local:
			route.Kind = "local"
		case rt.Via.IsValid() && rt.Dev == cni.VXLANDevice:
			// The vxlan pod network: the gateway is the other node's subnet
			// .0, its VXLAN device, and the packet leaves encapsulated.
			route.Via = rt.Via.String()
			if n := r.nodeByPodIP(rt.Via); n != nil {
				route.Kind, route.Node = "vxlan", n.Name
				if ip, err := kubelet.PublicIP(n); err == nil {
					route.Tunnel = ip.String()
				} else if ip, err := kubelet.PublicIPv6(n); err == nil {
					route.Tunnel = ip.String() // an IPv6-only node's tunnel
				}
			}
		case rt.Via.IsValid():
			route.Via = rt.Via.String()
			if n := r.nodeByIP(rt.Via); n != nil {
				route.Kind, route.Node = "node", n.Name
			}
		case rt.Ports != nil:
			route.Kind = "bridge"
			route.Veth = r.veth(pod, rt)
		}
		p.Route = route
	}
	return nil
}

// veth finds the pod's host-side veth among the bridge's ports: by the
// alias the node agent gives it (the pod's netns name), else by the peer
// index of the pod's eth0.
func (r *run) veth(pod *corev1.Pod, rt *kernelRoute) string {
	if pod == nil {
		return ""
	}
	n := r.node(pod.Spec.NodeName)
	if n == nil {
		return ""
	}
	sb, err := kubelet.PodSandboxName(n, pod.UID)
	if err != nil {
		return ""
	}
	names := slices.Sorted(maps.Keys(rt.Ports))
	for _, name := range names {
		if rt.Ports[name] == sb {
			return name
		}
	}
	if idx, err := eth0Peer(sb); err == nil {
		for _, name := range names {
			if rt.PortIndex[name] == idx {
				return name
			}
		}
	}
	return ""
}

// live sends one probe from FROM's namespace and compares what the kernel
// did with the paths.
func (r *run) live(res *Result) error {
	ns := res.From.Netns
	if ns == "" && res.From.Kind == "ip" {
		ns = r.hostWithIP(res.From.IP)
	}
	if ns == "" {
		return fmt.Errorf("--live: no network namespace on this machine sends from %s (%s)", res.From.IP, res.From.Kind)
	}
	nftMode := res.Mode == ModeNFTables
	// Counters are read right before the probe so the delta is the probe's
	// (plus whatever else the node did meanwhile). In nftables mode the
	// kernel's trace of the probe says which rules it matched instead.
	// In nftables mode the iptables counters still say which of minikit's
	// own rules (network policy, pod masquerade) the probe passed.
	save, err := saveRules(res.Netns, r.fam)
	if err != nil {
		return err
	}
	before, err := iptsim.Parse(save)
	if err != nil {
		return err
	}
	// The other nodes whose policy verdicts the paths show (in nftables
	// mode the traced node too: network policy stays in iptables).
	others := map[string]*iptsim.Rules{}
	for _, p := range res.Paths {
		for _, h := range p.hops {
			if _, ok := others[h.netns]; ok {
				continue
			}
			s, err := saveRules(h.netns, r.fam)
			if err != nil {
				return err
			}
			if others[h.netns], err = iptsim.Parse(s); err != nil {
				return err
			}
		}
	}
	l := &Live{}
	var pr probeResult
	var events []TraceEvent
	if nftMode {
		var err error
		if pr, events, err = r.nftLive(res, ns); err != nil {
			return fmt.Errorf("--live: %w", err)
		}
	} else {
		pr = probe(ns, res.Proto, res.To.Addr, r.o.Timeout)
	}
	l.Connected, l.Reply = pr.connected, pr.reply
	if pr.err != nil {
		l.Error = pr.err.Error()
	}
	src := pr.local
	if src.IsValid() && src.Addr().IsUnspecified() {
		src = netip.AddrPortFrom(res.From.IP, src.Port())
	}
	l.Probe = fmt.Sprintf("%s %s -> %s", res.Proto, src, res.To.Addr)
	if !src.IsValid() {
		l.Probe = fmt.Sprintf("%s %s -> %s", res.Proto, res.From.IP, res.To.Addr)
	}
	flows, err := conntrackFlows(res.Netns, r.fam)
	if pr.conn != nil {
		pr.conn.Close()
	}
	if err != nil {
		return err
	}
	if pr.local.IsValid() {
		l.Conntrack = findFlow(flows, res.Proto, pr.local, res.To.Addr)
	}
	if save, err = saveRules(res.Netns, r.fam); err != nil {
		return err
	}
	after, err := iptsim.Parse(save)
	if err != nil {
		return err
	}
	moved := map[string][]iptsim.Counter{res.Node: iptsim.Moved(before, after)}
	if nftMode {
		ConfirmTrace(l, res.Paths, events)
	} else {
		Confirm(l, res.Paths, moved[res.Node])
	}
	for _, p := range res.Paths {
		for _, h := range p.hops {
			if _, ok := moved[h.node]; ok {
				continue
			}
			s, err := saveRules(h.netns, r.fam)
			if err != nil {
				return err
			}
			a, err := iptsim.Parse(s)
			if err != nil {
				return err
			}
			moved[h.node] = iptsim.Moved(others[h.netns], a)
		}
	}
	confirmPolicy(l, res.Paths, moved)
	res.Live = l
	return nil
}

// hostWithIP is the lab namespace (node, client or external) that owns ip.
func (r *run) hostWithIP(ip netip.Addr) string {
	hosts := []string{"client", "external"}
	for _, n := range r.nodes {
		hosts = append(hosts, n.Name)
	}
	for _, h := range hosts {
		ns := r.labNS(h)
		if !netns.ExistsNamed(ns) {
			continue
		}
		if as, err := addrs(ns, r.fam); err == nil {
			for _, a := range as {
				if a == ip {
					return ns
				}
			}
		}
	}
	return ""
}

type probeResult struct {
	local     netip.AddrPort
	connected bool
	reply     string
	err       error
	conn      net.Conn
}

// probe opens one connection (TCP) or sends one datagram (UDP) from inside
// netns, of dst's family. For TCP it sends an HTTP/1.0 request; for UDP a line of text (the
// lab's echo image answers both). The connection is left open for the
// caller to read the conntrack entry first.
func probe(netns, proto string, dst netip.AddrPort, timeout time.Duration) probeResult {
	var pr probeResult
	f := familyOf(dst.Addr())
	err := in(netns, func() error {
		d := net.Dialer{Timeout: timeout, Control: func(_, _ string, rc syscall.RawConn) error {
			// Bind before connecting so the source port is known even when
			// the connection fails: a dropped SYN still has a conntrack
			// entry to look for when nat let it through.
			var berr error
			err := rc.Control(func(fd uintptr) {
				var any unix.Sockaddr = &unix.SockaddrInet4{}
				if f.v6 {
					any = &unix.SockaddrInet6{}
				}
				if berr = unix.Bind(int(fd), any); berr != nil {
					return
				}
				sa, err := unix.Getsockname(int(fd))
				if err != nil {
					berr = err
					return
				}
				switch in := sa.(type) {
				case *unix.SockaddrInet4:
					pr.local = netip.AddrPortFrom(netip.AddrFrom4(in.Addr), uint16(in.Port))
				case *unix.SockaddrInet6:
					pr.local = netip.AddrPortFrom(netip.AddrFrom16(in.Addr), uint16(in.Port))
				}
			})
			if err != nil {
				return err
			}
			return berr
		}}
		c, err := d.Dial(proto+f.net(), dst.String())
		if err != nil {
			return err
		}
		pr.conn = c
		if ap, err := netip.ParseAddrPort(c.LocalAddr().String()); err == nil {
			pr.local = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		}
		return nil
	})
	if err != nil {
		pr.err = err
		return pr
	}
	c := pr.conn
	c.SetDeadline(time.Now().Add(timeout))
	if proto == "tcp" {
		pr.connected = true
		fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: %s\r\nUser-Agent: minikit-trace\r\n\r\n", dst)
		b, err := io.ReadAll(io.LimitReader(c, 4096))
		pr.reply = string(b)
		if err != nil && len(b) == 0 {
			pr.err = err
		}
		return pr
	}
	if _, err := c.Write([]byte("minikit trace probe\n")); err != nil {
		pr.err = err
		return pr
	}
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		pr.err = err
		return pr
	}
	pr.connected, pr.reply = true, string(buf[:n])
	return pr
}

// findFlow picks the probe's conntrack entry by its original tuple.
func findFlow(flows []*netlink.ConntrackFlow, proto string, src, dst netip.AddrPort) *Flow {
	num := map[string]uint8{"tcp": unix.IPPROTO_TCP, "udp": unix.IPPROTO_UDP}[proto]
	ap := func(ip net.IP, port uint16) netip.AddrPort {
		a, _ := netip.AddrFromSlice(ip)
		return netip.AddrPortFrom(a.Unmap(), port)
	}
	for _, f := range flows {
		fw, rv := f.Forward, f.Reverse
		// An unconnected probe knows its port but not yet its address.
		orig := ap(fw.SrcIP, fw.SrcPort)
		if fw.Protocol != num || orig.Port() != src.Port() || (!src.Addr().IsUnspecified() && orig.Addr() != src.Addr()) || ap(fw.DstIP, fw.DstPort) != dst {
			continue
		}
		return &Flow{Proto: proto, OrigSrc: orig.String(), OrigDst: dst.String(),
			ReplySrc: ap(rv.SrcIP, rv.SrcPort).String(), ReplyDst: ap(rv.DstIP, rv.DstPort).String(), Mark: f.Mark}
	}
	return nil
}
