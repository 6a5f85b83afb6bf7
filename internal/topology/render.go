package topology

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// Drawing, shared by the dot, Mermaid and SVG renderers. Loopback
// interfaces are left out of pictures (they are in the JSON); everything
// else the kernel reports is drawn.

// drawn reports whether an interface appears in pictures.
func drawn(ifc Interface) bool { return ifc.Kind != "loopback" }

// hopMarks numbers the hops: element ID → its hop numbers (1-based), and
// the element IDs that carry a verdict.
type hopMarks struct {
	nums    map[string][]int
	verdict map[string]string
}

func markHops(hops []Hop) hopMarks {
	m := hopMarks{nums: map[string][]int{}, verdict: map[string]string{}}
	for i, h := range hops {
		m.nums[h.Element] = append(m.nums[h.Element], i+1)
		if h.Verdict != "" {
			m.verdict[h.Element] = h.Verdict
		}
	}
	return m
}

func (m hopMarks) on(id string) bool { return len(m.nums[id]) > 0 }

// label is "3" or "3,4,5" or "3-7" for an element's hop numbers.
func (m hopMarks) label(id string) string {
	ns := m.nums[id]
	if len(ns) == 0 {
		return ""
	}
	run := true
	for i := 1; i < len(ns); i++ {
		run = run && ns[i] == ns[i-1]+1
	}
	if run && len(ns) > 2 {
		return fmt.Sprintf("%d-%d", ns[0], ns[len(ns)-1])
	}
	var s []string
	for _, n := range ns {
		s = append(s, strconv.Itoa(n))
	}
	return strings.Join(s, ",")
}

// hostTitle is a host's one-line title.
func hostTitle(h Host) string {
	switch h.Kind {
	case KindUnderlay:
		return "underlay " + h.Address
	case KindRouter:
		return "router " + h.Address
	case KindNode:
		t := h.Name + " " + addressText(h)
		if c := podCIDRText(h); c != "" {
			t += " pods " + c
		}
		return t
	case KindPod:
		return h.Name + " " + addressText(h)
	}
	return h.Name + " " + addressText(h)
}

// addressText is a host's address, or in a dual-stack lab both of its
// addresses ("10.244.1.5 · fd00:10:244:1::5").
func addressText(h Host) string {
	if len(h.Addresses) > 1 {
		return strings.Join(h.Addresses, " · ")
	}
	return h.Address
}

// podCIDRText is a node's pod CIDR, or both of a dual-stack node's.
func podCIDRText(h Host) string {
	if len(h.PodCIDRs) > 1 {
		return strings.Join(h.PodCIDRs, " · ")
	}
	return h.PodCIDR
}

// ifaceText is an interface's label: name and IPv4 addresses.
func ifaceText(ifc Interface) string {
	var v4 []string
	for _, a := range ifc.Addrs {
		if !strings.Contains(a, ":") {
			v4 = append(v4, a)
		}
	}
	if len(v4) == 0 {
		return ifc.Name
	}
	return ifc.Name + " " + strings.Join(v4, " ")
}

// serviceLines describes a Service in a line or two.
func serviceLines(s Service) []string {
	l1 := s.Namespace + "/" + s.Name + " (" + s.Type + ")"
	var addrs []string
	switch {
	case len(s.ClusterIPs) > 1:
		addrs = append(addrs, s.ClusterIPs...)
	case s.ClusterIP != "":
		addrs = append(addrs, s.ClusterIP)
	}
	addrs = append(addrs, s.ExternalIPs...)
	addrs = append(addrs, s.LoadBalancerIPs...)
	if s.ExternalName != "" {
		addrs = append(addrs, s.ExternalName)
	}
	var ports []string
	for _, p := range s.Ports {
		t := strconv.Itoa(int(p.Port))
		if p.NodePort != 0 {
			t += ":" + strconv.Itoa(int(p.NodePort))
		}
		ports = append(ports, t+"/"+p.Protocol)
	}
	l2 := strings.Join(addrs, " ") + " " + strings.Join(ports, ",")
	if s.ExternalTrafficPolicy == "Local" {
		l2 += " eTP=Local"
	}
	l2 += fmt.Sprintf(" → %d endpoints", len(s.Endpoints))
	return []string{l1, strings.TrimSpace(l2)}
}

func ingressLines(in Ingress) []string {
	out := []string{in.Namespace + "/" + in.Name + " (Ingress " + in.Class + ")"}
	for _, r := range in.Rules {
		out = append(out, fmt.Sprintf("  %s%s → %s:%s", r.Host, r.Path, strings.TrimPrefix(r.Service, "svc:"), r.Port))
	}
	return out
}

// hostsByKind splits the graph's hosts for layout: the underlay, the
// nodes in order, client and external (and any other host), pods by node.
type layoutHosts struct {
	underlay *Host
	routers  []*Host // a routed lab's router
	nodes    []*Host
	others   []*Host
	pods     map[string][]*Host // by node name
	orphans  []*Host            // pods of a node that is not in the graph
}

func splitHosts(g *Graph) layoutHosts {
	lh := layoutHosts{pods: map[string][]*Host{}}
	names := map[string]bool{}
	for i := range g.Hosts {
		h := &g.Hosts[i]
		switch h.Kind {
		case KindUnderlay:
			lh.underlay = h
		case KindNode:
			lh.nodes = append(lh.nodes, h)
			names[h.Name] = true
		case KindRouter:
			lh.routers = append(lh.routers, h)
		case KindPod:
		default:
			lh.others = append(lh.others, h)
		}
	}
	for i := range g.Hosts {
		h := &g.Hosts[i]
		if h.Kind != KindPod {
			continue
		}
		if names[h.Node] {
			lh.pods[h.Node] = append(lh.pods[h.Node], h)
		} else {
			lh.orphans = append(lh.orphans, h)
		}
	}
	return lh
}

// vxlanLabel is a vxlan link's label, "VXLAN VNI 1", with the VNI of
// its A end as the kernel reports it.
func vxlanLabel(g *Graph, l Link) string {
	for _, h := range g.Hosts {
		for _, ifc := range h.Interfaces {
			if ifc.ID == l.A && ifc.VXLAN != nil {
				return fmt.Sprintf("VXLAN VNI %d", ifc.VXLAN.VNI)
			}
		}
	}
	return "VXLAN"
}

// hopLegend writes "N. label" lines.
func hopLegend(hops []Hop) []string {
	var out []string
	for i, h := range hops {
		l := h.Label
		if l == "" {
			l = h.Element
		}
		if h.Verdict != "" && !strings.HasPrefix(l, h.Verdict) {
			l = h.Verdict + ": " + l
		}
		out = append(out, fmt.Sprintf("%d. %s", i+1, l))
	}
	return out
}

// errWriter keeps the first write error, so renderers write freely and
// check once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
