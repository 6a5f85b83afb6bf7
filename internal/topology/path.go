package topology

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/minikit/minikit/internal/trace"
)

// PathOf draws trace path number path of r over g: the hops from FROM's
// host to the node whose rules were read, what the rules did there (DNAT,
// mark, MASQUERADE, in the order trace reports them), the route out, and
// the hosts on the way to the endpoint's host. A DROP or REJECT ends the
// hops at the host that takes it, with Verdict set. Between two hosts the
// hops are: the interface the packet leaves by (a node's bridge when it
// leaves to one of its pods), the link, the next host; the underlay's
// bridge ports are not drawn as interfaces of their own; a routed lab's
// underlay is two bridges, and a packet crosses from one to the other only
// through the router host.
//
// A route out through a VXLAN device (trace's route kind "vxlan") goes:
// the device, the vxlan link to the other node's device (the
// encapsulation), the underlay hops the outer UDP packet takes from this
// node to the other (labelled as the outer header), the other node
// decapsulating, its VXLAN device, and on to the endpoint as usual.
//
// It returns nil when path is out of range or FROM's host is not in g.
func PathOf(g *Graph, r *trace.Result, path int) []Hop {
	if g == nil || r == nil || path < 0 || path >= len(r.Paths) {
		return nil
	}
	p := r.Paths[path]
	w := newWalker(g)
	src := w.sourceHost(r)
	node := w.nodeHost(r)
	if src == "" || node == "" {
		return nil
	}
	w.host(src, sourceLabel(r))
	w.walk(src, node, "")
	if src != node {
		w.host(node, "rules of "+r.Node+" ("+r.Mode+")")
	}
	for _, s := range p.Steps {
		if l := stepLabel(s); l != "" {
			w.host(node, l)
		}
	}
	if p.Verdict != "ACCEPT" {
		at := node
		for _, v := range p.Policy {
			if v.Verdict == "rejected" && v.Node != r.Node {
				if h := w.hostByKindName(KindNode, v.Node); h != "" {
					w.walk(node, h, "")
					at = h
				}
			}
		}
		label := p.Verdict
		if p.Why != "" {
			label += ": " + p.Why
		}
		w.hops = append(w.hops, Hop{Element: at, Kind: "host", Label: label, Verdict: p.Verdict})
		return w.hops
	}
	dst := w.endpointHost(p)
	if p.Route != nil && p.Route.Kind == "local" {
		if dst == "" {
			dst = node
		}
	}
	first := ""
	if p.Route != nil {
		first = p.Route.Dev
	}
	if dst == "" {
		// The endpoint is no host of the lab (gone, or outside): show the
		// route out only.
		if first != "" {
			if ifc := w.iface(node, first); ifc != "" {
				w.hops = append(w.hops, Hop{Element: ifc, Kind: "interface", Label: routeLabel(p.Route)})
			}
		}
		return w.hops
	}
	if dst == node {
		l := "local: " + p.Dst
		if gl := gatewayLabel(r, p); gl != "" {
			l = "local: " + gl
		}
		w.host(node, l)
		return w.hops
	}
	w.routeLabel = routeLabel(p.Route)
	if p.Route != nil && p.Route.Kind == "vxlan" {
		if peer := w.hostByKindName(KindNode, p.Route.Node); peer != "" && peer != node && w.iface(node, first) != "" {
			w.vxlan(node, peer, p.Route)
			node = peer
			first = ""
		}
	}
	w.walk(node, dst, first)
	w.host(dst, endpointLabel(r, p))
	return w.hops
}

type walker struct {
	g     *Graph
	hosts map[string]*Host
	ifcs  map[string]*Interface
	// adj is host → the veth links out of it: (local interface, link,
	// remote interface, remote host).
	adj        map[string][]edge
	hops       []Hop
	routeLabel string
	// outer, when set, is added to the labels of the hops walk adds: the
	// underlay crossing of an encapsulated packet.
	outer string
	// tunnels is VXLAN device → the vxlan links out of it.
	tunnels map[string][]edge
}

type edge struct {
	local, link, remote, to string
}

func newWalker(g *Graph) *walker {
	w := &walker{g: g, hosts: map[string]*Host{}, ifcs: map[string]*Interface{}, adj: map[string][]edge{}, tunnels: map[string][]edge{}}
	for i := range g.Hosts {
		h := &g.Hosts[i]
		w.hosts[h.ID] = h
		for j := range h.Interfaces {
			w.ifcs[h.Interfaces[j].ID] = &h.Interfaces[j]
		}
	}
	for _, l := range g.Links {
		if l.Kind == "vxlan" {
			w.tunnels[l.A] = append(w.tunnels[l.A], edge{l.A, l.ID, l.B, hostOf(l.B)})
			w.tunnels[l.B] = append(w.tunnels[l.B], edge{l.B, l.ID, l.A, hostOf(l.A)})
			continue
		}
		if l.Kind != "veth" {
			continue
		}
		ha, hb := hostOf(l.A), hostOf(l.B)
		w.adj[ha] = append(w.adj[ha], edge{l.A, l.ID, l.B, hb})
		w.adj[hb] = append(w.adj[hb], edge{l.B, l.ID, l.A, ha})
	}
	return w
}

func hostOf(ifcID string) string {
	h, _, _ := strings.Cut(ifcID, "/")
	return h
}

// host adds a host hop, once per label (a host already last in the hops
// with an empty label gets this one instead).
func (w *walker) host(id, label string) {
	if n := len(w.hops); n > 0 && w.hops[n-1].Element == id && w.hops[n-1].Label == "" {
		w.hops[n-1].Label = label
		return
	}
	w.hops = append(w.hops, Hop{Element: id, Kind: "host", Label: label})
}

// vxlan adds the hops of a packet sent out of node's VXLAN device (the
// route's) to peer: the device, the tunnel (the vxlan link to peer's
// device, when the kernel has the FDB entry that makes it), the outer
// packet's way over the underlay, peer decapsulating, peer's device.
func (w *walker) vxlan(node, peer string, rt *trace.Route) {
	dev := node + "/" + rt.Dev
	vni, port := 1, 8472
	if vx := w.ifcs[dev].VXLAN; vx != nil {
		vni, port = vx.VNI, vx.Port
	}
	w.hops = append(w.hops, Hop{Element: dev, Kind: "interface", Label: w.routeLabel})
	to := rt.Tunnel
	if to == "" {
		to = w.hosts[peer].Address
	}
	remote := ""
	for _, e := range w.tunnels[dev] {
		if e.to == peer {
			w.hops = append(w.hops, Hop{Element: e.link, Kind: "link",
				Label: fmt.Sprintf("VXLAN encapsulated to %s's %s:%d (VNI %d)", w.hostName(peer), to, port, vni)})
			remote = e.remote
			break
		}
	}
	if remote == "" {
		remote = w.iface(peer, rt.Dev)
	}
	w.outer = fmt.Sprintf(" (UDP %d outer header)", port)
	w.walk(node, peer, "")
	w.outer = ""
	w.hops = append(w.hops, Hop{Element: peer, Kind: "host", Label: fmt.Sprintf("%s decapsulates (VNI %d)", w.hostName(peer), vni)})
	if remote != "" {
		w.hops = append(w.hops, Hop{Element: remote, Kind: "interface", Label: "in by " + w.ifName(remote)})
	}
}

// step is where a packet is in the breadth-first search of walk: a host,
// and in the underlay the bridge it is on (a routed lab's underlay holds
// two segments, joined only through the router host).
type step struct{ host, br string }

// walk adds the hops from host a (already in the hops) to host b, found by
// a breadth-first search over the veth links; out, when set, is the
// interface the packet leaves a by (the route's device).
func (w *walker) walk(a, b, out string) {
	if a == b {
		return
	}
	start := step{host: a}
	prev := map[step]edge{start: {}}
	var end step
	queue := []step{start}
	for len(queue) > 0 && end.host == "" {
		cur := queue[0]
		queue = queue[1:]
		for _, e := range w.adj[cur.host] {
			if cur.br != "" && w.master(e.local) != cur.br {
				continue // another segment of the underlay
			}
			next := step{host: e.to}
			if h := w.hosts[e.to]; h != nil && h.Kind == KindUnderlay {
				next.br = w.master(e.remote)
			}
			if _, seen := prev[next]; seen {
				continue
			}
			// Never route through a pod or the client/external hosts.
			if e.to != b && w.hosts[e.to] != nil && !transit(w.hosts[e.to].Kind) {
				continue
			}
			prev[next] = e
			if e.to == b {
				end = next
				break
			}
			queue = append(queue, next)
		}
	}
	if end.host == "" {
		return
	}
	var chain []edge
	for st := end; st != start; {
		e := prev[st]
		chain = append([]edge{e}, chain...)
		// The step the edge left from: its host, and in the underlay the
		// bridge of the port it left by.
		from := step{host: hostOf(e.local)}
		if h := w.hosts[from.host]; h != nil && h.Kind == KindUnderlay {
			from.br = w.master(e.local)
		}
		if from.host == a {
			from = start
		}
		st = from
	}
	for i, e := range chain {
		from := hostOf(e.local)
		if w.hosts[from] != nil && w.hosts[from].Kind != KindUnderlay {
			ifc := e.local
			if m := w.ifcs[ifc]; m != nil && m.Master != "" {
				ifc = from + "/" + m.Master // leaving by the bridge to one of its ports
			}
			label := "out by " + w.ifName(ifc) + w.outer
			if i == 0 && out != "" {
				label = w.routeLabel
			}
			w.hops = append(w.hops, Hop{Element: ifc, Kind: "interface", Label: label})
		}
		w.hops = append(w.hops, Hop{Element: e.link, Kind: "link", Label: w.linkLabel(e) + w.outer})
		// Into a node from one of its pods: through the pod's veth onto
		// the bridge.
		if m := w.ifcs[e.remote]; m != nil && m.Master != "" && w.hosts[e.to] != nil && w.hosts[e.to].Kind != KindUnderlay {
			br := e.to + "/" + m.Master
			w.hops = append(w.hops, Hop{Element: br, Kind: "interface", Label: "in by " + w.ifName(br)})
		}
		if e.to != b {
			label := w.hostName(e.to)
			if h := w.hosts[e.to]; h != nil && h.Kind == KindUnderlay {
				label = "underlay bridge"
				if m := w.ifcs[e.remote]; m != nil && m.Master != "" {
					label += " " + m.Master
				}
			} else if h != nil && (h.Kind == KindNode || h.Kind == KindRouter) {
				label = h.Name + " forwards"
			}
			w.hops = append(w.hops, Hop{Element: e.to, Kind: "host", Label: label + w.outer})
		}
	}
}

// transit reports whether a path may pass through a host of the kind.
func transit(kind string) bool {
	return kind == KindUnderlay || kind == KindNode || kind == KindRouter
}

// master is the bridge an interface is a port of ("" if none).
func (w *walker) master(ifc string) string {
	if m := w.ifcs[ifc]; m != nil {
		return m.Master
	}
	return ""
}

func (w *walker) linkLabel(e edge) string {
	kind := "veth"
	if w.hosts[hostOf(e.local)].Kind == KindUnderlay || w.hosts[e.to].Kind == KindUnderlay {
		kind = "underlay link"
	}
	return fmt.Sprintf("%s %s → %s", kind, w.ifName(e.local), w.ifName(e.remote))
}

// ifName is "HOST IFNAME" for an interface ID.
func (w *walker) ifName(id string) string {
	h, n, _ := strings.Cut(id, "/")
	return w.hostName(h) + " " + n
}

func (w *walker) hostName(id string) string {
	if h := w.hosts[id]; h != nil {
		return h.Name
	}
	return id
}

func (w *walker) iface(host, name string) string {
	id := host + "/" + name
	if w.ifcs[id] != nil {
		return id
	}
	return ""
}

func (w *walker) hostByKindName(kind, name string) string {
	for _, h := range w.g.Hosts {
		if h.Kind == kind && h.Name == name {
			return h.ID
		}
	}
	return ""
}

// hostByIP is the host whose interfaces carry ip (a pod's IP, a node's
// underlay address); pods' own addresses win over a node's bridge.
func (w *walker) hostByIP(ip netip.Addr) string {
	if !ip.IsValid() {
		return ""
	}
	for _, h := range w.g.Hosts {
		if h.Address == ip.String() || slices.Contains(h.Addresses, ip.String()) {
			return h.ID
		}
	}
	for _, h := range w.g.Hosts {
		for _, ifc := range h.Interfaces {
			for _, a := range ifc.Addrs {
				if p, err := netip.ParsePrefix(a); err == nil && p.Addr() == ip && !ip.IsLoopback() {
					return h.ID
				}
			}
		}
	}
	return ""
}

func (w *walker) sourceHost(r *trace.Result) string {
	if r.From.Netns != "" && w.hosts[r.From.Netns] != nil {
		return r.From.Netns
	}
	switch r.From.Kind {
	case "client":
		return w.hostByKindName(KindClient, "client")
	case "external":
		return w.hostByKindName(KindExternal, "external")
	case "node":
		return w.hostByKindName(KindNode, r.From.Name)
	case "pod":
		if id := w.hostByKindName(KindPod, r.From.Name); id != "" {
			return id
		}
	}
	return w.hostByIP(r.From.IP)
}

func (w *walker) nodeHost(r *trace.Result) string {
	if r.Netns != "" && w.hosts[r.Netns] != nil {
		return r.Netns
	}
	return w.hostByKindName(KindNode, r.Node)
}

func (w *walker) endpointHost(p trace.Path) string {
	if e := p.Endpoint; e != nil {
		if e.HostNetwork {
			return w.hostByKindName(KindNode, e.Node)
		}
		if id := w.hostByKindName(KindPod, e.Namespace+"/"+e.Name); id != "" {
			return id
		}
	}
	if ap, err := netip.ParseAddrPort(p.Dst); err == nil {
		return w.hostByIP(ap.Addr())
	}
	return ""
}

func sourceLabel(r *trace.Result) string {
	return fmt.Sprintf("from %s (%s) to %s", r.From.Name, r.From.IP, r.To.Addr)
}

// stepLabel is the label of a rule step that changes the packet or ends
// it: the DNAT, the mark, the MASQUERADE, as trace reports them.
func stepLabel(s trace.Step) string {
	where := s.Table + "/" + s.Chain
	switch {
	case s.DNAT != "":
		return fmt.Sprintf("DNAT to %s (%s)", s.DNAT, where)
	case s.Masquerade:
		return fmt.Sprintf("MASQUERADE (%s)", where)
	case s.Mark != "":
		return fmt.Sprintf("mark %s (%s)", s.Mark, where)
	}
	return ""
}

func routeLabel(rt *trace.Route) string {
	if rt == nil {
		return ""
	}
	l := "route out " + rt.Dev
	if rt.Via != "" {
		l += " via " + rt.Via
	}
	return l
}

// gatewayLabel is, for a path of a trace to a Gateway that ends at a data
// port, what takes it there; "" otherwise.
func gatewayLabel(r *trace.Result, p trace.Path) string {
	if g := r.Gateway; g != nil && slices.ContainsFunc(g.DataPlanes, func(d trace.DataPlane) bool { return d.Addr == p.Dst }) {
		return "Gateway " + g.Name + " data plane, user space (" + p.Dst + "): routes per request"
	}
	return ""
}

// endpointLabel is the last hop's label: the pod (or node) reached, and
// for a trace to a Gateway the data plane that takes the connection there.
func endpointLabel(r *trace.Result, p trace.Path) string {
	if l := gatewayLabel(r, p); l != "" {
		return l
	}
	if p.Endpoint != nil {
		return p.Endpoint.String() + " (" + p.Dst + ")"
	}
	return p.Dst
}
