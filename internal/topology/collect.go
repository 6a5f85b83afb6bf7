package topology

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/minikit/minikit/internal/cni"
	"github.com/minikit/minikit/internal/kubelet"
	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/netns"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
)

// Collector reads one lab: its namespaces from the kernel (netlink, inside
// each namespace) and its objects from the API. It holds no cache: every
// Collect and ReadHost reads afresh.
type Collector struct {
	st     lab.State
	client kubernetes.Interface
	gw     gwclient.Interface
}

// NewCollector returns a Collector for the lab whose state st is (lab.Load).
// gw reads the Gateway API's objects; nil (or a cluster without the CRDs)
// draws no Gateways.
func NewCollector(st lab.State, client kubernetes.Interface, gw gwclient.Interface) *Collector {
	return &Collector{st: st, client: client, gw: gw}
}

// ErrGone is wrapped by reads of a namespace that does not exist (any
// more): a pod deleted while the lab is read.
var ErrGone = errors.New("network namespace does not exist")

// nsRef is a namespace to read, with what the API says about it.
type nsRef struct {
	host Host // without interfaces and routes
	// order sorts hosts: underlay, nodes, client, external, pods.
	order int
}

// LabNotFound is the error for a lab name that names no lab: it lists the
// labs that do exist.
func LabNotFound(name string) error {
	var names []string
	for _, e := range lab.Registered() {
		names = append(names, e.Name)
	}
	if len(names) == 0 {
		return fmt.Errorf("no lab %q on this machine, and no other lab either (create one with: sudo minikit lab up --name %s)", name, name)
	}
	return fmt.Errorf("no lab %q on this machine; labs: %s", name, strings.Join(names, ", "))
}

// Collect reads the whole lab.
func (c *Collector) Collect(ctx context.Context) (*Graph, error) {
	if !netns.ExistsNamed(lab.NS(c.st.Name, "net")) {
		return nil, fmt.Errorf("reading lab %q: its underlay namespace %s does not exist (is the lab up?)", c.st.Name, lab.NS(c.st.Name, "net"))
	}
	api, err := c.readAPI(ctx, true)
	if err != nil {
		return nil, err
	}
	refs := c.refs(api)
	g := &Graph{Lab: c.st.Name, Hosts: []Host{}, Links: []Link{}}
	var read []*hostRead
	for _, r := range refs {
		hr, err := readNS(r.host)
		if errors.Is(err, ErrGone) {
			continue // a pod going away, or a lab host removed by hand
		}
		if err != nil {
			return nil, err
		}
		read = append(read, hr)
	}
	resolvePeers(read)
	for _, hr := range read {
		g.Hosts = append(g.Hosts, hr.host)
	}
	g.Links = append(links(read), vxlanLinks(read)...)
	g.Services = services(api, c.st.Name)
	g.Ingresses = ingresses(api)
	g.Gateways = gateways(api.gateway)
	g.GatewayRoutes = gatewayRoutes(api.gateway)
	return g, nil
}

// ReadHost reads one namespace (a Host.ID) again, with the links that touch
// it: the bridge links inside it and its veths' links to other hosts of the
// lab. The ui refreshes a pod's host when its Pod changes.
func (c *Collector) ReadHost(ctx context.Context, id string) (Host, []Link, error) {
	api, err := c.readAPI(ctx, false)
	if err != nil {
		return Host{}, nil, err
	}
	refs := c.refs(api)
	var self *nsRef
	for i := range refs {
		if refs[i].host.ID == id {
			self = &refs[i]
		}
	}
	if self == nil {
		return Host{}, nil, fmt.Errorf("lab %q has no host %q (a lab namespace, or the namespace of a running pod)", c.st.Name, id)
	}
	hr, err := readNS(self.host)
	if err != nil {
		return Host{}, nil, err
	}
	read := []*hostRead{hr}
	// Only the namespaces that can hold its veths' peers or its tunnels'
	// ends: for a pod its node, for the underlay every lab host, for a lab
	// host the underlay and (a node) its pods and the other nodes.
	for _, r := range refs {
		if r.host.ID == id || !neighbours(self.host, r.host, c.st.Name) {
			continue
		}
		p, err := readNS(r.host)
		if errors.Is(err, ErrGone) {
			continue
		}
		if err != nil {
			return Host{}, nil, err
		}
		read = append(read, p)
	}
	resolvePeers(read)
	var ls []Link
	for _, l := range append(links(read), vxlanLinks(read)...) {
		if strings.HasPrefix(l.A, id+"/") || strings.HasPrefix(l.B, id+"/") {
			ls = append(ls, l)
		}
	}
	return hr.host, ls, nil
}

func neighbours(a, b Host, labName string) bool {
	switch {
	case a.Kind == KindPod:
		return b.Kind == KindNode && b.Name == a.Node
	case a.Kind == KindUnderlay:
		return b.Kind != KindPod
	case a.Kind == KindNode:
		// The other nodes: the ends of its VXLAN tunnels.
		return b.Kind == KindUnderlay || b.Kind == KindNode || (b.Kind == KindPod && b.Node == a.Name)
	default:
		return b.Kind == KindUnderlay
	}
}

// apiState is what the collector reads from the API. Never Secrets.
type apiState struct {
	nodes     []corev1.Node
	pods      []corev1.Pod
	services  []corev1.Service
	slices    []discoveryv1.EndpointSlice
	ingresses []networkingv1.Ingress
	gateway   gatewayState
}

// readAPI reads the objects; the Gateway API's only with gateways (a
// host's read needs none of them).
func (c *Collector) readAPI(ctx context.Context, gateways bool) (*apiState, error) {
	var a apiState
	nl, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading lab %q: listing nodes: %w", c.st.Name, err)
	}
	a.nodes = nl.Items
	pl, err := c.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading lab %q: listing pods: %w", c.st.Name, err)
	}
	a.pods = pl.Items
	sl, err := c.client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading lab %q: listing services: %w", c.st.Name, err)
	}
	a.services = sl.Items
	el, err := c.client.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading lab %q: listing endpointslices: %w", c.st.Name, err)
	}
	a.slices = el.Items
	il, err := c.client.NetworkingV1().Ingresses("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading lab %q: listing ingresses: %w", c.st.Name, err)
	}
	a.ingresses = il.Items
	if !gateways {
		return &a, nil
	}
	if a.gateway, err = readGateways(ctx, c.gw, c.st.Name); err != nil {
		return nil, err
	}
	return &a, nil
}

// refs lists the namespaces of the lab: the lab hosts its state names and
// the namespace of every pod that has one (host-network pods share their
// node's; a pod not started yet has none).
func (c *Collector) refs(api *apiState) []nsRef {
	var refs []nsRef
	nodes := map[string]*corev1.Node{}
	for i := range api.nodes {
		nodes[api.nodes[i].Name] = &api.nodes[i]
	}
	prefix := c.st.Name + "-"
	for _, ns := range c.st.Namespaces {
		h, ok := strings.CutPrefix(ns, prefix)
		if !ok {
			continue
		}
		host := Host{ID: ns, Name: h, Address: c.st.Addresses[h]}
		order := 0
		switch {
		case h == "net":
			host.Kind = KindUnderlay
			host.Address = c.st.Subnet
			if c.st.Subnet2 != "" {
				host.Address += "," + c.st.Subnet2 // a routed lab's second segment
			}
		case h == lab.Router:
			// Its address is its legs', read from the kernel (readNS).
			host.Kind = KindRouter
		case h == lab.Client:
			host.Kind, order = KindClient, 1000
		case h == lab.External:
			host.Kind, order = KindExternal, 1001
		case strings.HasPrefix(h, "node"):
			host.Kind = KindNode
			order, _ = strconv.Atoi(strings.TrimPrefix(h, "node"))
			if n := nodes[h]; n != nil {
				host.PodCIDR = n.Spec.PodCIDR
				if len(n.Spec.PodCIDRs) > 1 {
					host.PodCIDRs = n.Spec.PodCIDRs
				}
				if a := internalIP(n); a != "" {
					host.Address = a
				}
				if as := internalIPs(n); len(as) > 1 {
					host.Addresses = as
				}
			}
		default:
			continue
		}
		refs = append(refs, nsRef{host: host, order: order})
	}
	for i := range api.pods {
		p := &api.pods[i]
		n := nodes[p.Spec.NodeName]
		if n == nil || p.Spec.HostNetwork {
			continue
		}
		sb, err := kubelet.PodSandboxName(n, p.UID)
		if err != nil {
			continue
		}
		h := Host{ID: sb, Kind: KindPod, Name: p.Namespace + "/" + p.Name, Node: p.Spec.NodeName,
			Phase: string(p.Status.Phase), Address: p.Status.PodIP, Labels: p.Labels}
		if len(p.Status.PodIPs) > 1 {
			for _, ip := range p.Status.PodIPs {
				h.Addresses = append(h.Addresses, ip.IP)
			}
		}
		if ref := metav1.GetControllerOf(p); ref != nil {
			h.Owner = ref.Kind + "/" + ref.Name
		}
		refs = append(refs, nsRef{order: 2000, host: h})
	}
	sort.SliceStable(refs, func(i, j int) bool {
		a, b := refs[i], refs[j]
		if a.order != b.order {
			return a.order < b.order
		}
		if a.host.Node != b.host.Node {
			return nodeLess(a.host.Node, b.host.Node)
		}
		return a.host.Name < b.host.Name
	})
	return refs
}

// nodeLess orders node2 before node10.
func nodeLess(a, b string) bool {
	na, ea := strconv.Atoi(strings.TrimPrefix(a, "node"))
	nb, eb := strconv.Atoi(strings.TrimPrefix(b, "node"))
	if ea == nil && eb == nil && na != nb {
		return na < nb
	}
	return a < b
}

func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// internalIPs are all of a node's InternalIPs, one per family in a
// dual-stack cluster.
func internalIPs(n *corev1.Node) []string {
	var out []string
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			out = append(out, a.Address)
		}
	}
	return out
}

// hostRead is one namespace as read, with what peer resolution needs.
type hostRead struct {
	host  Host
	links []netlink.Link // by Interface, same order
}

// readNS reads a namespace's links, addresses and main-table IPv4 routes
// from inside it.
func readNS(h Host) (*hostRead, error) {
	path := netns.NetNSPath(h.ID)
	if !netns.IsNamespaceFile(path) {
		return nil, fmt.Errorf("reading %s: %w", h.ID, ErrGone)
	}
	var nh *netlink.Handle
	err := netns.DoPath(path, func() error {
		var err error
		nh, err = netlink.NewHandle(unix.NETLINK_ROUTE)
		return err
	})
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.EINVAL) {
			return nil, fmt.Errorf("reading %s: %w", h.ID, ErrGone)
		}
		return nil, fmt.Errorf("reading namespace %s: %w", h.ID, err)
	}
	defer nh.Close()
	lks, err := cni.RetryDump(nh.LinkList)
	if err != nil {
		return nil, fmt.Errorf("listing links of %s: %w", h.ID, err)
	}
	sort.Slice(lks, func(i, j int) bool { return lks[i].Attrs().Index < lks[j].Attrs().Index })
	addrs, err := cni.RetryDump(func() ([]netlink.Addr, error) { return nh.AddrList(nil, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("listing addresses of %s: %w", h.ID, err)
	}
	byIndex := map[int][]string{}
	// The kernel dumps IPv4 addresses before IPv6 ones, as `ip addr` shows.
	for _, fam := range []int{4, 6} {
		for _, a := range addrs {
			if a.IPNet == nil || (a.IP.To4() != nil) != (fam == 4) {
				continue
			}
			ones, _ := a.Mask.Size()
			ip, _ := netip.AddrFromSlice(a.IP)
			byIndex[a.LinkIndex] = append(byIndex[a.LinkIndex], netip.PrefixFrom(ip.Unmap(), ones).String())
		}
	}
	names := map[int]string{}
	for _, l := range lks {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	hr := &hostRead{host: h}
	hr.host.Interfaces = []Interface{}
	for _, l := range lks {
		at := l.Attrs()
		ifc := Interface{
			ID: h.ID + "/" + at.Name, Name: at.Name, Index: at.Index, Kind: kindOf(l),
			MTU: at.MTU, State: operState(at.OperState), Master: names[at.MasterIndex], Addrs: byIndex[at.Index],
		}
		switch {
		case len(at.HardwareAddr) > 0:
			ifc.MAC = at.HardwareAddr.String()
		case ifc.Kind == "loopback":
			ifc.MAC = "00:00:00:00:00:00" // netlink leaves it empty; ip shows it
		}
		if vx, ok := l.(*netlink.Vxlan); ok {
			if ifc.VXLAN, err = readVXLAN(nh, vx); err != nil {
				return nil, fmt.Errorf("reading VXLAN device %s of %s: %w", at.Name, h.ID, err)
			}
		}
		hr.host.Interfaces = append(hr.host.Interfaces, ifc)
		hr.links = append(hr.links, l)
	}
	if h.Kind == KindRouter && h.Address == "" {
		hr.host.Address = legAddrs(hr.host.Interfaces)
	}
	routes, err := cni.RetryDump(func() ([]netlink.Route, error) {
		return nh.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return nil, fmt.Errorf("listing routes of %s: %w", h.ID, err)
	}
	hr.host.Routes = []Route{}
	for _, r := range routes {
		rt := Route{Dst: "default", Dev: names[r.LinkIndex], Protocol: r.Protocol.String()}
		if r.Dst != nil {
			if ones, _ := r.Dst.Mask.Size(); ones != 0 || !r.Dst.IP.IsUnspecified() {
				rt.Dst = r.Dst.String()
			}
		}
		if r.Gw != nil {
			rt.Gateway = r.Gw.String()
		}
		if r.Src != nil {
			rt.Src = r.Src.String()
		}
		if r.Scope != netlink.SCOPE_UNIVERSE {
			rt.Scope = scopeName(r.Scope)
		}
		if r.Type != unix.RTN_UNICAST && r.Type != 0 {
			rt.Type = routeType(r.Type)
		}
		hr.host.Routes = append(hr.host.Routes, rt)
	}
	return hr, nil
}

// readVXLAN reads a VXLAN device's VNI, port and local address, and its
// FDB entries that have a destination (`bridge fdb show dev IFNAME`: the
// AF_BRIDGE neighbours of the device, "self" entries of the device's own
// table).
func readVXLAN(nh *netlink.Handle, vx *netlink.Vxlan) (*VXLAN, error) {
	out := &VXLAN{VNI: vx.VxlanId, Port: vx.Port, FDB: []FDBEntry{}}
	if vx.SrcAddr != nil && !vx.SrcAddr.IsUnspecified() {
		out.Local = vx.SrcAddr.String()
	}
	idx := vx.Attrs().Index
	fdb, err := cni.RetryDump(func() ([]netlink.Neigh, error) { return nh.NeighList(idx, unix.AF_BRIDGE) })
	if err != nil {
		return nil, fmt.Errorf("listing its fdb: %w", err)
	}
	for _, n := range fdb {
		if n.LinkIndex != idx || n.IP == nil || n.IP.IsUnspecified() {
			continue
		}
		e := FDBEntry{Dst: n.IP.String()}
		if len(n.HardwareAddr) > 0 {
			e.MAC = n.HardwareAddr.String()
		}
		out.FDB = append(out.FDB, e)
	}
	return out, nil
}

// legAddrs is a router's address: its legs' IPv4 addresses, in interface
// order, comma-separated (as `lab status` shows it).
func legAddrs(ifcs []Interface) string {
	var out []string
	for _, ifc := range ifcs {
		if ifc.Kind == "loopback" {
			continue
		}
		for _, a := range ifc.Addrs {
			if p, err := netip.ParsePrefix(a); err == nil && p.Addr().Is4() {
				out = append(out, p.Addr().String())
			}
		}
	}
	return strings.Join(out, ",")
}

// kindOf is the link's kind as `ip -d link` shows it (linkinfo's
// info_kind), "loopback" for lo and "device" for a link without a kind.
func kindOf(l netlink.Link) string {
	if l.Attrs().EncapType == "loopback" {
		return "loopback"
	}
	if _, ok := l.(*netlink.Device); ok {
		return "device"
	}
	return l.Type()
}

// operState names states as iproute2 does.
func operState(s netlink.LinkOperState) string {
	switch s {
	case netlink.OperNotPresent:
		return "NOTPRESENT"
	case netlink.OperDown:
		return "DOWN"
	case netlink.OperLowerLayerDown:
		return "LOWERLAYERDOWN"
	case netlink.OperTesting:
		return "TESTING"
	case netlink.OperDormant:
		return "DORMANT"
	case netlink.OperUp:
		return "UP"
	}
	return "UNKNOWN"
}

func scopeName(s netlink.Scope) string {
	switch s {
	case netlink.SCOPE_LINK:
		return "link"
	case netlink.SCOPE_HOST:
		return "host"
	case netlink.SCOPE_SITE:
		return "site"
	case netlink.SCOPE_NOWHERE:
		return "nowhere"
	}
	return strconv.Itoa(int(s))
}

func routeType(t int) string {
	switch t {
	case unix.RTN_LOCAL:
		return "local"
	case unix.RTN_BROADCAST:
		return "broadcast"
	case unix.RTN_BLACKHOLE:
		return "blackhole"
	case unix.RTN_UNREACHABLE:
		return "unreachable"
	case unix.RTN_PROHIBIT:
		return "prohibit"
	case unix.RTN_THROW:
		return "throw"
	}
	return strconv.Itoa(t)
}

// resolvePeers sets PeerID on every veth whose peer is in one of the read
// namespaces. A veth reports its peer's ifindex and the peer namespace's id
// as this namespace numbers it (link-netnsid); ids are per namespace, so
// the candidates (a veth with that ifindex whose own peer ifindex is ours)
// are confirmed by asking this namespace for each candidate's id
// (RTM_GETNSID by fd). Most candidates are unique, so this costs a few
// netlink requests per namespace, not one per pair of namespaces.
func resolvePeers(read []*hostRead) {
	type vref struct {
		hr *hostRead
		i  int
	}
	byIndex := map[int][]vref{}
	for _, hr := range read {
		for i, l := range hr.links {
			if _, ok := l.(*netlink.Veth); ok {
				byIndex[l.Attrs().Index] = append(byIndex[l.Attrs().Index], vref{hr, i})
			}
		}
	}
	for _, hr := range read {
		var pending []int
		for i, l := range hr.links {
			if _, ok := l.(*netlink.Veth); ok && l.Attrs().ParentIndex != 0 {
				pending = append(pending, i)
			}
		}
		if len(pending) == 0 {
			continue
		}
		ids := nsIDs{self: hr.host.ID}
		for _, i := range pending {
			at := hr.links[i].Attrs()
			for _, cand := range byIndex[at.ParentIndex] {
				if cand.hr.links[cand.i].Attrs().ParentIndex != at.Index {
					continue
				}
				same := cand.hr == hr
				if (at.NetNsID < 0) != same {
					continue
				}
				if !same && ids.of(cand.hr.host.ID) != at.NetNsID {
					continue
				}
				hr.host.Interfaces[i].PeerID = cand.hr.host.Interfaces[cand.i].ID
				break
			}
		}
		ids.close()
	}
}

// nsIDs asks one namespace for the ids it gives other namespaces.
type nsIDs struct {
	self string
	h    *netlink.Handle
	err  error
	memo map[string]int
}

func (n *nsIDs) of(other string) int {
	if n.memo == nil {
		n.memo = map[string]int{}
		n.err = netns.DoPath(netns.NetNSPath(n.self), func() error {
			var err error
			n.h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
			return err
		})
	}
	if id, ok := n.memo[other]; ok {
		return id
	}
	id := -2
	if n.err == nil {
		if f, err := os.Open(netns.NetNSPath(other)); err == nil {
			if got, err := n.h.GetNetNsIdByFd(int(f.Fd())); err == nil {
				id = got
			}
			f.Close()
		}
	}
	n.memo[other] = id
	return id
}

func (n *nsIDs) close() {
	if n.h != nil {
		n.h.Close()
	}
}

// links turns resolved peers and bridge ports into edges: one per veth
// pair (A the side in the host sorted first), one per bridge port.
func links(read []*hostRead) []Link {
	pos := map[string]int{}
	for i, hr := range read {
		pos[hr.host.ID] = i
	}
	var ls []Link
	for i, hr := range read {
		for _, ifc := range hr.host.Interfaces {
			if ifc.Master != "" {
				ls = append(ls, Link{ID: ifc.ID + "--" + hr.host.ID + "/" + ifc.Master, Kind: "bridge", A: ifc.ID, B: hr.host.ID + "/" + ifc.Master})
			}
			if ifc.PeerID == "" {
				continue
			}
			peerHost, _, _ := strings.Cut(ifc.PeerID, "/")
			j, ok := pos[peerHost]
			if !ok || j < i || (j == i && ifc.PeerID < ifc.ID) {
				continue // drawn from the other side
			}
			ls = append(ls, Link{ID: ifc.ID + "--" + ifc.PeerID, Kind: "veth", A: ifc.ID, B: ifc.PeerID})
		}
	}
	if ls == nil {
		ls = []Link{}
	}
	return ls
}

// vxlanLinks are the tunnels: for every FDB entry of a VXLAN device, a
// link to the VXLAN device (same VNI) of the host whose underlay address
// is the entry's destination, preferring the one whose MAC the entry
// names. Both ends of a tunnel usually have an entry for the other: one
// link per pair of devices, A in the host sorted first.
func vxlanLinks(read []*hostRead) []Link {
	type dev struct {
		host Host
		ifc  Interface
		pos  int
	}
	byAddr := map[string][]dev{} // underlay address → VXLAN devices of the host that has it
	var devs []dev
	for i, hr := range read {
		var vx []Interface
		var addrs []string
		for _, ifc := range hr.host.Interfaces {
			if ifc.VXLAN != nil {
				vx = append(vx, ifc)
				continue
			}
			for _, a := range ifc.Addrs {
				if p, err := netip.ParsePrefix(a); err == nil {
					addrs = append(addrs, p.Addr().String())
				}
			}
		}
		for _, ifc := range vx {
			d := dev{hr.host, ifc, i}
			devs = append(devs, d)
			for _, a := range addrs {
				byAddr[a] = append(byAddr[a], d)
			}
		}
	}
	seen := map[string]bool{}
	ls := []Link{}
	for _, d := range devs {
		for _, e := range d.ifc.VXLAN.FDB {
			var to *dev
			for i, c := range byAddr[e.Dst] {
				if c.host.ID == d.host.ID || c.ifc.VXLAN.VNI != d.ifc.VXLAN.VNI {
					continue
				}
				if to == nil || (e.MAC != "" && c.ifc.MAC == e.MAC) {
					to = &byAddr[e.Dst][i]
				}
			}
			if to == nil {
				continue // a destination outside the lab, or a host not read
			}
			a, b := d, *to
			if b.pos < a.pos {
				a, b = b, a
			}
			id := a.ifc.ID + "--" + b.ifc.ID
			if seen[id] {
				continue
			}
			seen[id] = true
			ls = append(ls, Link{ID: id, Kind: "vxlan", A: a.ifc.ID, B: b.ifc.ID})
		}
	}
	sort.SliceStable(ls, func(i, j int) bool { return ls[i].ID < ls[j].ID })
	return ls
}

func services(api *apiState, labName string) []Service {
	podHost := map[string]string{} // namespace/name → host ID
	ipHost := map[string]string{}
	nodes := map[string]*corev1.Node{}
	for i := range api.nodes {
		nodes[api.nodes[i].Name] = &api.nodes[i]
	}
	for i := range api.pods {
		p := &api.pods[i]
		var id string
		if n := nodes[p.Spec.NodeName]; n != nil {
			if p.Spec.HostNetwork {
				id = "" // the node's host, below
			} else if sb, err := kubelet.PodSandboxName(n, p.UID); err == nil {
				id = sb
			}
		}
		if id == "" {
			continue
		}
		podHost[p.Namespace+"/"+p.Name] = id
		if p.Status.PodIP != "" {
			ipHost[p.Status.PodIP] = id
		}
		for _, ip := range p.Status.PodIPs {
			ipHost[ip.IP] = id
		}
	}
	for i := range api.nodes {
		// Endpoints without a pod (the API server's, host DNS) are the
		// node's own address.
		for _, a := range internalIPs(&api.nodes[i]) {
			ipHost[a] = lab.NS(labName, api.nodes[i].Name)
		}
	}
	hostNetwork := map[string]string{} // namespace/name → node
	for _, p := range api.pods {
		if p.Spec.HostNetwork {
			hostNetwork[p.Namespace+"/"+p.Name] = p.Spec.NodeName
		}
	}
	eps := map[string][]string{} // namespace/service → host IDs
	for _, s := range api.slices {
		svc := s.Labels[discoveryv1.LabelServiceName]
		if svc == "" {
			continue
		}
		key := s.Namespace + "/" + svc
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			var id string
			if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
				ref := e.TargetRef.Namespace + "/" + e.TargetRef.Name
				if e.TargetRef.Namespace == "" {
					ref = s.Namespace + "/" + e.TargetRef.Name
				}
				id = podHost[ref]
				if n, ok := hostNetwork[ref]; ok {
					id = lab.NS(labName, n) // a host-network pod is its node's host
				}
			}
			if id == "" && len(e.Addresses) > 0 {
				id = ipHost[e.Addresses[0]]
			}
			if id != "" {
				eps[key] = append(eps[key], id)
			}
		}
	}
	out := []Service{}
	for _, s := range api.services {
		sv := Service{ID: "svc:" + s.Namespace + "/" + s.Name, Namespace: s.Namespace, Name: s.Name, Type: string(s.Spec.Type),
			ClusterIP: s.Spec.ClusterIP, ExternalIPs: s.Spec.ExternalIPs, ExternalName: s.Spec.ExternalName,
			ExternalTrafficPolicy: string(s.Spec.ExternalTrafficPolicy), Ports: []ServicePort{}}
		if sv.ClusterIP == corev1.ClusterIPNone {
			sv.ClusterIP = "None"
		} else if len(s.Spec.ClusterIPs) > 1 {
			sv.ClusterIPs = s.Spec.ClusterIPs
		}
		for _, in := range s.Status.LoadBalancer.Ingress {
			if in.IP != "" {
				sv.LoadBalancerIPs = append(sv.LoadBalancerIPs, in.IP)
			}
		}
		for _, p := range s.Spec.Ports {
			sv.Ports = append(sv.Ports, ServicePort{Name: p.Name, Protocol: string(p.Protocol), Port: p.Port,
				TargetPort: p.TargetPort.String(), NodePort: p.NodePort})
		}
		e := eps[s.Namespace+"/"+s.Name]
		sort.Strings(e)
		sv.Endpoints = dedup(e)
		out = append(out, sv)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func dedup(s []string) []string {
	out := []string{}
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

func ingresses(api *apiState) []Ingress {
	out := []Ingress{}
	for _, in := range api.ingresses {
		ing := Ingress{ID: "ing:" + in.Namespace + "/" + in.Name, Namespace: in.Namespace, Name: in.Name, Rules: []IngressRule{}}
		if in.Spec.IngressClassName != nil {
			ing.Class = *in.Spec.IngressClassName
		}
		for _, a := range in.Status.LoadBalancer.Ingress {
			if a.IP != "" {
				ing.Addresses = append(ing.Addresses, a.IP)
			} else if a.Hostname != "" {
				ing.Addresses = append(ing.Addresses, a.Hostname)
			}
		}
		backend := func(b *networkingv1.IngressBackend) (string, string) {
			if b == nil || b.Service == nil {
				return "", ""
			}
			port := b.Service.Port.Name
			if port == "" {
				port = strconv.Itoa(int(b.Service.Port.Number))
			}
			return "svc:" + in.Namespace + "/" + b.Service.Name, port
		}
		if svc, port := backend(in.Spec.DefaultBackend); svc != "" {
			ing.Rules = append(ing.Rules, IngressRule{Path: "(default)", Service: svc, Port: port})
		}
		for _, r := range in.Spec.Rules {
			if r.HTTP == nil {
				continue
			}
			for _, p := range r.HTTP.Paths {
				svc, port := backend(&p.Backend)
				if svc == "" {
					continue
				}
				path := p.Path
				if path == "" {
					path = "/"
				}
				ing.Rules = append(ing.Rules, IngressRule{Host: r.Host, Path: path, Service: svc, Port: port})
			}
		}
		out = append(out, ing)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
