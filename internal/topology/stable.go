package topology

import (
	"net/netip"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Stable returns a copy of g and hops without the details that differ each
// time the same lab is made, for pictures kept in the repository: the lab's
// name becomes "lab"; pods are named by their owner and an ordinal (by node,
// then address: hostnames-1, hostnames-2), their hosts "pod.NAMESPACE.NAME",
// and a node's veth to a pod "veth-NAME"; MAC addresses, interface indexes,
// IPv6 link-local addresses (made from the MACs), the VTEP MACs of
// VXLAN FDB entries, hash labels
// (pod-template-hash, controller-revision-hash) and a ReplicaSet owner's
// template hash are left out; and the
// addresses the API allocates at random are replaced by their role: a
// ClusterIP outside the service range's static band (its first 256
// addresses, where the cluster's own and user-chosen ones are) becomes
// "clusterIP(NS/NAME)", pods on a node get the node's pod addresses in
// the order of their names (who got the lower one is a race), KUBE-SEP
// chains (hashes of those addresses) become "KUBE-SEP-…", a NodePort above the NodePort range's static band
// (30000-30085, KEP-3668) becomes 0 and ":PORT" in hop labels
// ":nodePort(NS/NAME)".
func Stable(g *Graph, hops []Hop) (*Graph, []Hop) {
	out := &Graph{Lab: "lab", Hosts: []Host{}, Links: []Link{}, Services: []Service{}, Ingresses: append([]Ingress{}, g.Ingresses...),
		Gateways: append([]Gateway{}, g.Gateways...), GatewayRoutes: append([]GatewayRoute{}, g.GatewayRoutes...)}
	hostID := map[string]string{}
	ifName := map[string]string{} // old interface ID → new name
	prefix := g.Lab + "-"

	// Pod names: owner + ordinal, in (node, address) order.
	type podRef struct {
		i    int
		base string
	}
	groups := map[string][]podRef{}
	for i, h := range g.Hosts {
		if h.Kind != KindPod {
			if id, ok := strings.CutPrefix(h.ID, prefix); ok {
				hostID[h.ID] = "lab-" + id
			} else {
				hostID[h.ID] = h.ID
			}
			continue
		}
		ns, name, _ := strings.Cut(h.Name, "/")
		base := ownerBase(h.Owner, name)
		groups[ns+"/"+base] = append(groups[ns+"/"+base], podRef{i, base})
	}
	podName := map[int]string{}
	for _, key := range sortedKeys(groups) {
		refs := groups[key]
		sort.SliceStable(refs, func(a, b int) bool {
			ha, hb := g.Hosts[refs[a].i], g.Hosts[refs[b].i]
			if ha.Node != hb.Node {
				return nodeLess(ha.Node, hb.Node)
			}
			return addrLess(ha.Address, hb.Address)
		})
		ns, _, _ := strings.Cut(key, "/")
		for n, r := range refs {
			name := r.base
			if g.Hosts[r.i].Owner != "" && !strings.HasPrefix(g.Hosts[r.i].Owner, "StatefulSet/") {
				name += "-" + strconv.Itoa(n+1)
			}
			podName[r.i] = ns + "/" + name
			hostID[g.Hosts[r.i].ID] = "pod." + ns + "." + name
		}
	}
	// Pods on a node get their node's set of addresses in the order of
	// their stable names: which of two pods started at once got the lower
	// address is a race, not part of the picture.
	addr := map[string]string{}
	byNode := map[string][]int{}
	for i, h := range g.Hosts {
		if h.Kind == KindPod && h.Address != "" {
			byNode[h.Node] = append(byNode[h.Node], i)
		}
	}
	for _, idx := range byNode {
		var addrs []string
		for _, i := range idx {
			addrs = append(addrs, g.Hosts[i].Address)
		}
		sort.Slice(addrs, func(a, b int) bool { return addrLess(addrs[a], addrs[b]) })
		sort.Slice(idx, func(a, b int) bool { return podName[idx[a]] < podName[idx[b]] })
		for n, i := range idx {
			addr[g.Hosts[i].Address] = addrs[n]
		}
	}
	// A node's veth to a pod is named after the pod.
	for _, h := range g.Hosts {
		for _, ifc := range h.Interfaces {
			ifName[ifc.ID] = ifc.Name
		}
	}
	for i, h := range g.Hosts {
		if h.Kind != KindPod {
			continue
		}
		for _, ifc := range h.Interfaces {
			if ifc.PeerID != "" {
				_, short, _ := strings.Cut(podName[i], "/")
				ifName[ifc.PeerID] = "veth-" + short
			}
		}
	}
	ifID := func(old string) string {
		if old == "" {
			return ""
		}
		h, _, _ := strings.Cut(old, "/")
		nh, ok := hostID[h]
		if !ok {
			return old
		}
		n, ok := ifName[old]
		if !ok {
			_, n, _ = strings.Cut(old, "/")
		}
		return nh + "/" + n
	}
	for i, h := range g.Hosts {
		nh := h
		nh.ID = hostID[h.ID]
		if h.Kind == KindPod {
			nh.Name = podName[i]
			if kind, _, ok := strings.Cut(h.Owner, "/"); ok {
				_, name, _ := strings.Cut(h.Name, "/")
				nh.Owner = kind + "/" + ownerBase(h.Owner, name) // without the template hash
			}
		}
		if len(h.Labels) > 0 {
			nh.Labels = map[string]string{}
			for k, v := range h.Labels {
				if k != "pod-template-hash" && k != "controller-revision-hash" {
					nh.Labels[k] = v
				}
			}
		}
		nh.Address = renumber(h.Address, addr)
		nh.Addresses = nil
		for _, a := range h.Addresses {
			nh.Addresses = append(nh.Addresses, renumber(a, addr))
		}
		nh.Interfaces = nil
		for _, ifc := range h.Interfaces {
			ni := ifc
			ni.ID, ni.Name, ni.PeerID = ifID(ifc.ID), ifName[ifc.ID], ifID(ifc.PeerID)
			ni.MAC, ni.Index = "", 0
			ni.Addrs = nil
			for _, a := range ifc.Addrs {
				if !strings.HasPrefix(a, "fe80:") {
					ni.Addrs = append(ni.Addrs, renumber(a, addr))
				}
			}
			if ni.Master != "" {
				ni.Master = ifName[h.ID+"/"+ni.Master]
			}
			if ifc.VXLAN != nil {
				vx := *ifc.VXLAN
				vx.FDB = []FDBEntry{}
				for _, e := range ifc.VXLAN.FDB {
					vx.FDB = append(vx.FDB, FDBEntry{Dst: e.Dst}) // the VTEP MACs are random
				}
				ni.VXLAN = &vx
			}
			nh.Interfaces = append(nh.Interfaces, ni)
		}
		nh.Routes = append([]Route(nil), h.Routes...)
		for j := range nh.Routes {
			if d := nh.Routes[j].Dev; d != "" {
				nh.Routes[j].Dev = ifName[h.ID+"/"+d]
			}
			nh.Routes[j].Src = renumber(nh.Routes[j].Src, addr)
		}
		out.Hosts = append(out.Hosts, nh)
	}
	sort.SliceStable(out.Hosts, func(i, j int) bool {
		a, b := out.Hosts[i], out.Hosts[j]
		if a.Kind != KindPod || b.Kind != KindPod {
			return false // the collector's order of lab hosts stands
		}
		if a.Node != b.Node {
			return nodeLess(a.Node, b.Node)
		}
		return a.Name < b.Name
	})
	linkID := map[string]string{}
	for _, l := range g.Links {
		nl := Link{Kind: l.Kind, A: ifID(l.A), B: ifID(l.B)}
		nl.ID = nl.A + "--" + nl.B
		linkID[l.ID] = nl.ID
		out.Links = append(out.Links, nl)
	}
	sort.SliceStable(out.Links, func(i, j int) bool { return out.Links[i].ID < out.Links[j].ID })

	// Allocated addresses, by their role; hop labels say the same.
	var repl []string
	for _, s := range g.Services {
		ns := s
		who := s.Namespace + "/" + s.Name
		if a, err := netip.ParseAddr(s.ClusterIP); err == nil && !staticClusterIP(a) {
			ns.ClusterIP = "clusterIP(" + who + ")"
			repl = append(repl, s.ClusterIP, ns.ClusterIP)
		}
		ns.ClusterIPs = nil
		for i, ip := range s.ClusterIPs {
			if a, err := netip.ParseAddr(ip); err == nil && !staticClusterIP(a) {
				if i == 0 {
					ip = ns.ClusterIP
				} else {
					n := "clusterIP(" + who + ", " + map[bool]string{true: "IPv6", false: "IPv4"}[a.Is6()] + ")"
					repl = append(repl, ip, n)
					ip = n
				}
			}
			ns.ClusterIPs = append(ns.ClusterIPs, ip)
		}
		ns.Ports = append([]ServicePort(nil), s.Ports...)
		for i, p := range ns.Ports {
			if p.NodePort > nodePortStaticMax {
				ns.Ports[i].NodePort = 0
				repl = append(repl, ":"+strconv.Itoa(int(p.NodePort)), ":nodePort("+who+")")
			}
		}
		ns.Endpoints = []string{}
		for _, e := range s.Endpoints {
			if id, ok := hostID[e]; ok {
				e = id
			}
			ns.Endpoints = append(ns.Endpoints, e)
		}
		sort.Strings(ns.Endpoints)
		out.Services = append(out.Services, ns)
	}
	for _, old := range sortedKeys(ifName) {
		// A veth's hash name in a label ("veth node2 vethc81f33c5 → ...").
		if _, oldName, _ := strings.Cut(old, "/"); ifName[old] != oldName {
			repl = append(repl, " "+oldName+" ", " "+ifName[old]+" ")
		}
	}
	r := strings.NewReplacer(repl...)
	var nh []Hop
	for _, h := range hops {
		n := h
		switch h.Kind {
		case "host":
			if id, ok := hostID[h.Element]; ok {
				n.Element = id
			}
		case "interface":
			n.Element = ifID(h.Element)
		case "link":
			if id, ok := linkID[h.Element]; ok {
				n.Element = id
			}
		}
		label := r.Replace(stablePods(h.Label, g, podName) + " ")
		label = sepChain.ReplaceAllString(strings.TrimSuffix(label, " "), "KUBE-SEP-…")
		n.Label = renumber(label, addr)
		nh = append(nh, n)
	}
	return out, nh
}

// sepChain is a KUBE-SEP chain's name: a hash of the endpoint's address.
var sepChain = regexp.MustCompile(`KUBE-SEP-[A-Z0-9]{16}`)

var ipv4 = regexp.MustCompile(`\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b`)

// renumber replaces every IPv4 address in s that addr maps.
func renumber(s string, addr map[string]string) string {
	if len(addr) == 0 {
		return s
	}
	return ipv4.ReplaceAllStringFunc(s, func(a string) string {
		if n, ok := addr[a]; ok {
			return n
		}
		return a
	})
}

// nodePortStaticMax is the top of the NodePort range's static band: the
// API hands out ports above it at random, below it only when asked.
const nodePortStaticMax = 30085

// staticClusterIP reports whether a ClusterIP is in the service range's
// static band (its first 256 addresses: the API server's, the DNS
// server's, and those a manifest asks for), not allocated at random.
func staticClusterIP(a netip.Addr) bool {
	if a.Is6() {
		// A dual-stack lab's IPv6 service CIDR: every address in it is
		// allocated, none fixed (the lab's DNS address is IPv4).
		return !netip.MustParsePrefix("fd00:10:96::/112").Contains(a)
	}
	svc := netip.MustParsePrefix("10.96.0.0/12")
	if !svc.Contains(a) {
		return true
	}
	b := a.As4()
	return b[1] == 96 && b[2] == 0
}

// stablePods replaces pod names in a hop label ("pod default/web-5d9f-x2
// on node2") with their stable names.
func stablePods(label string, g *Graph, podName map[int]string) string {
	for i, h := range g.Hosts {
		if n, ok := podName[i]; ok && strings.Contains(label, h.Name) {
			label = strings.ReplaceAll(label, h.Name, n)
		}
	}
	return label
}

// ownerBase is the stable part of a pod's name: its Deployment's name for a
// ReplicaSet's pod (the ReplicaSet's name less its template hash), the
// DaemonSet's or Job's name, else the pod's own name.
func ownerBase(owner, pod string) string {
	kind, name, ok := strings.Cut(owner, "/")
	if !ok {
		return pod
	}
	switch kind {
	case "ReplicaSet":
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			return name[:i]
		}
		return name
	case "DaemonSet", "Job":
		return name
	}
	return pod
}

func addrLess(a, b string) bool {
	pa, ea := netip.ParseAddr(a)
	pb, eb := netip.ParseAddr(b)
	if ea == nil && eb == nil {
		return pa.Less(pb)
	}
	return a < b
}
