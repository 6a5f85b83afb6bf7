package topology

import (
	"fmt"
	"html"
	"io"
	"strings"
)

// The SVG layout is minikit's own, fit for a lab's shape rather than
// general: no Graphviz binary is needed at run time, and no maintained
// pure-Go graph layout library exists to vendor (the Go ports of dot's
// layout are unmaintained). A lab is a tree with a known shape:
//
//	client ── underlay bridge (br0) ── external
//	             │        │
//	          node1     node2 ...     Services, Ingresses,
//	          eth1      eth1          the hops of a trace
//	          flannel.1┄┄flannel.1    (vxlan: the tunnel, dashed)
//	          cni0      cni0
//	          │ veth ─ pod
//	          │ veth ─ pod
//
// A routed lab's underlay holds two bridges side by side (br0, br1) and
// its router sits in a row of its own below them, between the first
// node's column and the second's, a leg up to each bridge.
//
// so every host gets a fixed place: the underlay on top between the client
// and the external host, one column per node with its uplink, its bridge,
// and its pods below it (each behind its veth on the bridge), and a side
// column listing the Services and Ingresses, and the hops of a trace. A
// column of 30 pods stays readable: one 44-pixel row per pod.

const (
	svgMargin  = 20
	colW       = 420 // a node's column
	podH       = 40
	podGap     = 8
	topH       = 96 // client, underlay, external row
	nodeHeadH  = 118
	sideW      = 420
	charW      = 6.1 // average width of an 11px sans-serif character
	ifaceH     = 18
	vethLaneW  = 140
	hostStroke = "#6b7785"
	routerRowH = 70 // a routed lab's router, between the underlay and the nodes
	routerMaxW = 240
)

type point struct{ x, y float64 }

type svgWriter struct {
	e      *errWriter
	m      hopMarks
	anchor map[string]point // interface ID → where links attach
	// underlayID is the underlay host's ID: its bridge ports are straight
	// lines, a node's run along the bridge's lane.
	underlayID string
	// routerX is where a routed lab's router is drawn, routerIDs its
	// hosts: the underlay's ports to it are drawn above its legs.
	routerX, routerW float64
	routerIDs        map[string]bool
	ulX, ulW         float64 // the underlay's box
	namesOnly        bool    // interfaces drawn with their names only
}

// nodePortX is the centre of the underlay's port to the node of column
// i: above the column, inside the underlay's box.
func (s *svgWriter) nodePortX(i int) float64 {
	cx := float64(svgMargin) + float64(i)*colW + colW/2
	if cx < s.ulX+50 {
		cx = s.ulX + 50
	}
	if cx > s.ulX+s.ulW-50 {
		cx = s.ulX + s.ulW - 50
	}
	return cx
}

// WriteSVG writes the graph as a standalone SVG document. Every host is a
// <g class="host host-KIND" data-id=HOSTID>, every interface a <g
// class="iface" data-id=IFACEID>, every link a <path class="link
// link-KIND" data-id=LINKID>; hops add the class "hop" and a numbered
// badge, and the host that drops or rejects is filled red.
func WriteSVG(w io.Writer, g *Graph, hops []Hop) error {
	s := &svgWriter{e: &errWriter{w: w}, m: markHops(hops), anchor: map[string]point{}}
	lh := splitHosts(g)
	cols := len(lh.nodes)
	if len(lh.orphans) > 0 {
		cols++
	}
	if cols == 0 {
		cols = 1
	}
	nodesW := float64(cols) * colW
	topW := nodesW
	if topW < 880 {
		topW = 880
	}
	if len(lh.routers) > 0 && topW < 1000 {
		topW = 1000 // room for the router between node1's port and node2's
	}
	maxPods := len(lh.orphans)
	for _, n := range lh.nodes {
		if p := len(lh.pods[n.Name]); p > maxPods {
			maxPods = p
		}
	}
	nodeY := float64(svgMargin + topH + 60)
	if len(lh.routers) > 0 {
		nodeY += routerRowH
	}
	colH := nodeHeadH + float64(maxPods)*(podH+podGap) + 20
	side := sideLines(g, hops)
	height := nodeY + colH + svgMargin
	if h := float64(svgMargin) + float64(len(side))*15 + 40; h > height {
		height = h
	}
	width := svgMargin + topW + 30 + sideW + svgMargin

	s.e.printf(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	s.e.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="Helvetica, Arial, sans-serif" font-size="11">`+"\n", width, height, width, height)
	s.e.printf(`<title>lab %s</title>`+"\n", esc(g.Lab))
	s.e.printf(`<style>.host>rect.box{stroke:%s;stroke-width:1.2}.link{fill:none;stroke:#8a96a3;stroke-width:1.5}.link-bridge{stroke-dasharray:4 3}path.hop{stroke:%s;stroke-width:4}.iface>rect{fill:#fff;stroke:#8a96a3}.iface.hop>rect{stroke:%s;stroke-width:2.5;fill:#fdebf1}.badge circle{fill:%s}.badge text{fill:#fff;font-weight:bold;font-size:10px}.verdict>rect.box{fill:#ffd6d6!important}.sub{fill:#56606b;font-size:10px}%s</style>`+"\n", hostStroke, hopColor, hopColor, hopColor, tunnelStyle(g))
	s.e.printf(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")

	// Hosts first (they set the anchors), then links, then badges on top.
	var body strings.Builder
	hostsOut := &errWriter{w: &body}
	if lh.underlay != nil {
		s.underlayID = lh.underlay.ID
	}
	hs := &svgWriter{e: hostsOut, m: s.m, anchor: s.anchor, underlayID: s.underlayID}
	x0 := float64(svgMargin)
	y0 := float64(svgMargin)
	var client, external []*Host
	for _, h := range lh.others {
		if h.Kind == KindExternal {
			external = append(external, h)
		} else {
			client = append(client, h)
		}
	}
	ulX, ulW := x0+240, topW-480
	// The router's place: below the underlay, between the first node's
	// column and the second's (node1 is on the first segment, the others
	// on the second), inside the underlay's width.
	hs.ulX, hs.ulW = ulX, ulW
	left, right := hs.nodePortX(0)+45, hs.nodePortX(1)-45
	hs.routerW = routerMaxW
	if right-left-20 < hs.routerW {
		hs.routerW = right - left - 20
	}
	if hs.routerW < 120 {
		hs.routerW = 120
	}
	hs.routerX = (left+right)/2 - hs.routerW/2
	hs.routerIDs = map[string]bool{}
	for _, r := range lh.routers {
		hs.routerIDs[r.ID] = true
	}
	if lh.underlay != nil {
		hs.underlay(lh.underlay, ulX, y0, ulW, topH, lh)
	}
	for i, h := range client {
		hs.smallHost(h, x0, y0+float64(i)*(topH+10), 200, topH, "right")
	}
	for i, h := range external {
		hs.smallHost(h, x0+topW-200, y0+float64(i)*(topH+10), 200, topH, "left")
	}
	for i, r := range lh.routers {
		hs.router(r, hs.routerX+float64(i)*(hs.routerW+10), y0+topH+40)
	}
	for i, n := range lh.nodes {
		hs.nodeColumn(n, lh.pods[n.Name], x0+float64(i)*colW+10, nodeY, colW-20, colH)
	}
	if len(lh.orphans) > 0 {
		hs.nodeColumn(nil, lh.orphans, x0+float64(len(lh.nodes))*colW+10, nodeY, colW-20, colH)
	}
	// Hosts, then the links over them (they attach to interfaces' edges
	// and cross no interface), the hops' links last, then the badges.
	s.e.printf("%s", body.String())
	var hopLinks []Link
	for _, l := range g.Links {
		if s.m.on(l.ID) {
			hopLinks = append(hopLinks, l)
			continue
		}
		s.link(l)
	}
	for _, l := range hopLinks {
		s.link(l)
	}
	for _, l := range g.Links {
		if p, ok := s.anchor[l.ID+"#label"]; ok && l.Kind == "vxlan" {
			s.e.printf(`<text class="tunnel-label" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", p.x, p.y, esc(vxlanLabel(g, l)))
		}
	}
	s.badges(g)
	s.side(side, x0+topW+30, y0)
	s.e.printf("</svg>\n")
	return s.e.err
}

// tunnelStyle is the style of VXLAN links and their labels, for a graph
// that has any (other pictures stay as they were).
func tunnelStyle(g *Graph) string {
	for _, l := range g.Links {
		if l.Kind == "vxlan" {
			return fmt.Sprintf(".link-vxlan{stroke:%s;stroke-width:2;stroke-dasharray:6 3}.tunnel-label{fill:%s;font-size:9px;font-weight:bold;paint-order:stroke;stroke:#fff;stroke-width:3}", tunnelColor, tunnelColor)
		}
	}
	return ""
}

func esc(s string) string { return html.EscapeString(s) }

// fit cuts s to at most w pixels.
func fit(s string, w float64) string {
	n := int(w / charW)
	r := []rune(s)
	if len(r) <= n || n < 2 {
		return s
	}
	return string(r[:n-1]) + "…"
}

func (s *svgWriter) hostOpen(h *Host, x, y, w, hh float64) {
	cls := "host host-" + h.Kind
	if s.m.on(h.ID) {
		cls += " hop-host"
	}
	if s.m.verdict[h.ID] != "" {
		cls += " verdict"
	}
	s.e.printf(`<g class="%s" data-id="%s">`, cls, esc(h.ID))
	stroke := ""
	if s.m.on(h.ID) {
		stroke = fmt.Sprintf(` style="stroke:%s;stroke-width:3"`, hopColor)
	}
	s.e.printf(`<rect class="box" x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="8" fill="%s"%s/>`, x, y, w, hh, hostFill(h.Kind), stroke)
	s.e.printf(`<title>%s</title>`, esc(h.ID+" "+hostTitle(*h)))
	s.anchor[h.ID] = point{x + w - 4, y + 4}
}

func (s *svgWriter) text(x, y float64, cls, t string, w float64) {
	c := ""
	if cls != "" {
		c = ` class="` + cls + `"`
	}
	s.e.printf(`<text x="%.1f" y="%.1f"%s>%s</text>`, x, y, c, esc(fit(t, w)))
}

// iface draws an interface box and records where links attach (at is
// "top", "bottom", "left", "right" or "center").
func (s *svgWriter) iface(ifc Interface, x, y, w float64, at string) {
	cls := "iface iface-" + ifc.Kind
	if s.m.on(ifc.ID) {
		cls += " hop"
	}
	s.e.printf(`<g class="%s" data-id="%s"><rect x="%.1f" y="%.1f" width="%.1f" height="%d" rx="3"/>`, cls, esc(ifc.ID), x, y, w, ifaceH)
	t := ifaceText(ifc)
	if w < 60 || s.namesOnly {
		t = ifc.Name // a pod's or the router's: the addresses are on its title line
	}
	s.text(x+4, y+13, "", t, w-8)
	s.e.printf(`<title>%s</title></g>`, esc(fmt.Sprintf("%s %s mtu %d %s", ifc.ID, ifc.Kind, ifc.MTU, ifc.State)))
	// Links attach at the side given; a bridge port's link to its bridge
	// at the opposite side ("#in").
	p := point{x + w/2, y + ifaceH/2}
	in := p
	switch at {
	case "top":
		p.y, in.y = y, y+ifaceH
	case "bottom":
		p.y, in.y = y+ifaceH, y
	case "left":
		p.x, in.x = x, x+w
	case "right":
		p.x, in.x = x+w, x
	}
	s.anchor[ifc.ID] = p
	s.anchor[ifc.ID+"#in"] = in
	s.anchor[ifc.ID+"#badge"] = point{x + w - 12, y}
	s.anchor[ifc.ID+"#l"] = point{x, y + ifaceH/2}
	s.anchor[ifc.ID+"#r"] = point{x + w, y + ifaceH/2}
}

// routerLeg is where a router's i-th leg is drawn (x, width).
func (s *svgWriter) routerLeg(i int) (float64, float64) {
	w := (s.routerW - 40) / 2.0 // the host's badge stays clear at the top right
	return s.routerX + 6 + float64(i)*(w+6), w
}

// router draws a routed lab's router: its legs side by side, each
// attached at the top to its port on the underlay, and its title.
func (s *svgWriter) router(h *Host, x, y float64) {
	s.hostOpen(h, x, y, s.routerW, 58)
	// The legs on top, where the links from the underlay come in; the
	// title below them.
	s.text(x+8, y+38, "", "router "+strings.ReplaceAll(h.Address, ",", " · "), s.routerW-16)
	s.text(x+8, y+51, "sub", "netns "+h.ID, s.routerW-16)
	s.namesOnly = true
	defer func() { s.namesOnly = false }()
	i := 0
	for _, ifc := range h.Interfaces {
		if !drawn(ifc) {
			continue
		}
		lx, lw := s.routerLeg(i)
		s.iface(ifc, lx+(x-s.routerX), y+6, lw, "top")
		i++
	}
	s.e.printf("</g>\n")
}

func (s *svgWriter) underlay(h *Host, x, y, w, hh float64, lh layoutHosts) {
	s.hostOpen(h, x, y, w, hh)
	s.text(x+10, y+16, "", "underlay bridge (netns "+h.ID+") "+h.Address, w-20)
	// Ports: to the client on the left, the external host on the right,
	// the nodes along the bottom above their columns.
	nodeCol := map[string]int{}
	for i, n := range lh.nodes {
		nodeCol[n.ID] = i
	}
	var left, right, rest []Interface
	var bottom, toRouter []Interface
	var bridges []Interface
	for _, ifc := range h.Interfaces {
		if !drawn(ifc) {
			continue
		}
		peer := hostOf(ifc.PeerID)
		switch {
		case ifc.Kind == "bridge":
			bridges = append(bridges, ifc)
		case ifc.PeerID != "" && strings.HasSuffix(peer, "-client"):
			left = append(left, ifc)
		case ifc.PeerID != "" && strings.HasSuffix(peer, "-external"):
			right = append(right, ifc)
		case ifc.PeerID != "" && s.routerIDs[peer]:
			toRouter = append(toRouter, ifc)
		case ifc.PeerID != "":
			if _, ok := nodeCol[peer]; ok {
				bottom = append(bottom, ifc)
				continue
			}
			rest = append(rest, ifc)
		default:
			rest = append(rest, ifc)
		}
	}
	// Bridges side by side (a routed lab's two segments), between the
	// client's and the external host's ports.
	if n := float64(len(bridges)); n > 0 {
		bw := (w - 220 - 10*(n-1)) / n
		if bw > 180 {
			bw = 180
		}
		bx := x + w/2 - (n*bw+10*(n-1))/2
		for i, b := range bridges {
			s.iface(b, bx+float64(i)*(bw+10), y+30, bw, "center")
		}
	}
	// The ports to the router above its legs (p-router0 to its eth1, ...).
	for i, ifc := range toRouter {
		lx, lw := s.routerLeg(i)
		s.iface(ifc, lx, y+hh-ifaceH-6, lw, "bottom")
	}
	for i, ifc := range left {
		s.iface(ifc, x+6, y+30+float64(i)*(ifaceH+4), 90, "left")
	}
	for i, ifc := range right {
		s.iface(ifc, x+w-96, y+30+float64(i)*(ifaceH+4), 90, "right")
	}
	for _, ifc := range bottom {
		cx := s.nodePortX(nodeCol[hostOf(ifc.PeerID)])
		s.iface(ifc, cx-45, y+hh-ifaceH-6, 90, "bottom")
	}
	for i, ifc := range rest {
		s.iface(ifc, x+6+float64(i)*96, y+hh-2*ifaceH-12, 90, "center")
	}
	s.e.printf("</g>\n")
}

// smallHost is the client or the external host: a box with its
// interfaces, the one towards the underlay on side.
func (s *svgWriter) smallHost(h *Host, x, y, w, hh float64, side string) {
	s.hostOpen(h, x, y, w, hh)
	s.text(x+10, y+16, "", h.Name+" "+addressText(*h), w-20)
	s.text(x+10, y+30, "sub", "netns "+h.ID, w-20)
	i := 0
	for _, ifc := range h.Interfaces {
		if !drawn(ifc) {
			continue
		}
		at := "center"
		if ifc.PeerID != "" {
			at = side
		}
		s.iface(ifc, x+10, y+40+float64(i)*(ifaceH+4), w-20, at)
		i++
	}
	s.e.printf("</g>\n")
}

// nodeColumn draws a node (n may be nil for pods of a node that is not
// in the graph) with its pods inside its box: the uplink on top, the
// bridge below it, and per pod its veth in a lane on the bridge's side and
// the pod's own box to the right.
func (s *svgWriter) nodeColumn(n *Host, pods []*Host, x, y, w, hh float64) {
	var ports []Interface // bridge ports, drawn next to their pod
	if n != nil {
		s.hostOpen(n, x, y, w, hh)
		s.text(x+10, y+16, "", n.Name+" "+addressText(*n), w-20)
		sub := "netns " + n.ID
		if c := podCIDRText(*n); c != "" {
			sub += " · pods " + c
		}
		s.text(x+10, y+30, "sub", sub, w-20)
		iy := y + 40
		var bridge []Interface
		for _, ifc := range n.Interfaces {
			if !drawn(ifc) {
				continue
			}
			switch {
			case ifc.Master != "":
				ports = append(ports, ifc)
			case ifc.Kind == "bridge":
				bridge = append(bridge, ifc)
			default:
				at := "center"
				if ifc.PeerID != "" && hostOf(ifc.PeerID) == s.underlayID {
					at = "top"
				}
				if ifc.VXLAN != nil {
					// Narrower: its tunnels to the next column run
					// beside it, labelled in the gap.
					s.iface(ifc, x+40, iy, w-80, at)
				} else {
					s.iface(ifc, x+10, iy, w-20, at)
				}
				iy += ifaceH + 4
			}
		}
		for _, b := range bridge {
			s.iface(b, x+10, iy, w-20, "bottom")
			s.anchor[b.ID] = point{x + 24, iy + ifaceH}
			iy += ifaceH + 4
		}
	} else {
		s.e.printf(`<g class="orphans"><rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="8" fill="none" stroke="%s" stroke-dasharray="4 3"/>`, x, y, w, hh, hostStroke)
		s.text(x+10, y+16, "", "pods of nodes not read", w-20)
	}
	// Ports by the pod they lead to.
	byPeer := map[string]Interface{}
	var loose []Interface
	for _, p := range ports {
		if p.PeerID != "" {
			byPeer[hostOf(p.PeerID)] = p
		} else {
			loose = append(loose, p)
		}
	}
	py := y + nodeHeadH
	for _, p := range pods {
		if port, ok := byPeer[p.ID]; ok {
			s.iface(port, x+30, py+11, vethLaneW-20, "left")
			s.anchor[port.ID+"#pod"] = point{x + 30 + vethLaneW - 20, py + 11 + ifaceH/2}
			delete(byPeer, p.ID)
		}
		s.pod(p, x+vethLaneW+20, py, w-vethLaneW-30)
		py += podH + podGap
	}
	for _, id := range sortedKeys(byPeer) {
		loose = append(loose, byPeer[id])
	}
	for _, port := range loose {
		s.iface(port, x+30, py+11, vethLaneW-20, "left")
		s.anchor[port.ID+"#pod"] = point{x + 30 + vethLaneW - 20, py + 11 + ifaceH/2}
		py += podH + podGap
	}
	s.e.printf("</g>\n")
}

func (s *svgWriter) pod(h *Host, x, y, w float64) {
	s.hostOpen(h, x, y, w, podH)
	i := 0
	for _, ifc := range h.Interfaces {
		if !drawn(ifc) {
			continue
		}
		s.iface(ifc, x+6+float64(i)*52, y+podH-ifaceH-4, 44, "left")
		s.anchor[ifc.ID] = point{x, y + podH - ifaceH/2 - 4}
		i++
	}
	s.text(x+8, y+14, "", h.Name, w-16)
	s.text(x+8+float64(i)*52, y+podH-9, "sub", addressText(*h)+" "+h.Phase, w-16-float64(i)*52)
	s.e.printf("</g>\n")
}

// link draws a link between its interfaces' anchors: a veth pair as a
// line (an elbow when the ends are not aligned), a bridge port as a path
// along the bridge's lane.
func (s *svgWriter) link(l Link) {
	a, okA := s.anchor[l.A]
	b, okB := s.anchor[l.B]
	if !okA || !okB {
		return
	}
	if pa, ok := s.anchor[l.A+"#pod"]; ok && l.Kind == "veth" {
		a = pa
	}
	if pb, ok := s.anchor[l.B+"#pod"]; ok && l.Kind == "veth" {
		b = pb
	}
	if l.Kind == "bridge" && hostOf(l.B) == s.underlayID {
		a = s.anchor[l.A+"#in"]
	}
	cls := "link link-" + l.Kind
	if s.m.on(l.ID) {
		cls += " hop"
	}
	var d string
	switch {
	case l.Kind == "vxlan":
		// From the side of one VXLAN device to the facing side of the
		// other: straight between neighbouring columns, an arch over the
		// columns between them otherwise.
		if a.x > b.x {
			a, b = s.anchor[l.B+"#r"], s.anchor[l.A+"#l"]
		} else {
			a, b = s.anchor[l.A+"#r"], s.anchor[l.B+"#l"]
		}
		if b.x-a.x <= colW || a.y != b.y {
			d = fmt.Sprintf("M%.1f %.1f L%.1f %.1f", a.x, a.y, b.x, b.y)
			s.anchor[l.ID+"#label"] = point{(a.x + b.x) / 2, (a.y+b.y)/2 - 10}
		} else {
			h := 26.0
			d = fmt.Sprintf("M%.1f %.1f C%.1f %.1f %.1f %.1f %.1f %.1f", a.x, a.y, a.x+60, a.y-h, b.x-60, b.y-h, b.x, b.y)
			s.anchor[l.ID+"#label"] = point{(a.x + b.x) / 2, a.y - h*0.75 - 4}
		}
	case l.Kind == "bridge" && hostOf(l.B) != s.underlayID:
		// Port a (a veth in the lane) up the bridge's lane to b (the bridge).
		d = fmt.Sprintf("M%.1f %.1f H%.1f V%.1f", a.x, a.y, b.x, b.y)
	case a.x == b.x || a.y == b.y:
		d = fmt.Sprintf("M%.1f %.1f L%.1f %.1f", a.x, a.y, b.x, b.y)
	default:
		my := (a.y + b.y) / 2
		d = fmt.Sprintf("M%.1f %.1f V%.1f H%.1f V%.1f", a.x, a.y, my, b.x, b.y)
	}
	s.e.printf(`<path class="%s" data-id="%s" d="%s"/>`+"\n", cls, esc(l.ID), d)
	if s.m.on(l.ID) {
		s.anchor[l.ID] = point{(a.x + b.x) / 2, (a.y + b.y) / 2}
	}
}

// badges puts each hop's numbers on its element.
func (s *svgWriter) badges(g *Graph) {
	for _, id := range sortedKeys(s.m.nums) {
		p, ok := s.anchor[id+"#badge"]
		if !ok {
			if p, ok = s.anchor[id]; !ok {
				continue
			}
		}
		label := s.m.label(id)
		w := 8 + 6.5*float64(len(label))
		if w < 16 {
			w = 16
		}
		fill := ""
		if s.m.verdict[id] != "" {
			fill = ` style="fill:#b00020"`
		}
		s.e.printf(`<g class="badge" data-for="%s"><rect x="%.1f" y="%.1f" width="%.1f" height="16" rx="8"%s fill="%s"/><text x="%.1f" y="%.1f" text-anchor="middle" fill="#fff" font-size="10" font-weight="bold">%s</text></g>`+"\n",
			esc(id), p.x-w/2, p.y-8, w, fill, hopColor, p.x, p.y+4, esc(label))
	}
}

// sideLines is the side column: the trace's hops, the Services, the
// Ingresses, the Gateways with their routes.
type sideLine struct {
	text, cls, id string
}

func sideLines(g *Graph, hops []Hop) []sideLine {
	var out []sideLine
	if len(hops) > 0 {
		out = append(out, sideLine{text: "Trace", cls: "head"})
		for i, l := range hopLegend(hops) {
			cls := "hopline"
			if hops[i].Verdict != "" {
				cls = "verdictline"
			}
			out = append(out, sideLine{text: l, cls: cls})
		}
		out = append(out, sideLine{})
	}
	if len(g.Services) > 0 {
		out = append(out, sideLine{text: "Services", cls: "head"})
		for _, sv := range g.Services {
			ls := serviceLines(sv)
			out = append(out, sideLine{text: ls[0], id: sv.ID}, sideLine{text: "  " + ls[1], cls: "sub", id: sv.ID})
		}
		out = append(out, sideLine{})
	}
	if len(g.Ingresses) > 0 {
		out = append(out, sideLine{text: "Ingresses", cls: "head"})
		for _, in := range g.Ingresses {
			for j, l := range ingressLines(in) {
				cls := ""
				if j > 0 {
					cls = "sub"
				}
				out = append(out, sideLine{text: l, cls: cls, id: in.ID})
			}
		}
	}
	if len(g.Gateways) > 0 {
		if len(g.Ingresses) > 0 {
			out = append(out, sideLine{})
		}
		out = append(out, sideLine{text: "Gateways", cls: "head"})
		for _, gw := range g.Gateways {
			for j, l := range gatewayLines(gw, g.GatewayRoutes) {
				cls := ""
				if j > 0 {
					cls = "sub"
				}
				out = append(out, sideLine{text: l, cls: cls, id: gw.ID})
			}
		}
	}
	return wrapSide(out)
}

// wrapSide breaks the side column's long lines at spaces (continuations
// indented), so that nothing is cut.
func wrapSide(lines []sideLine) []sideLine {
	w := float64(sideW)
	max := int(w / charW)
	var out []sideLine
	for _, l := range lines {
		if l.cls == "head" || len([]rune(l.text)) <= max {
			out = append(out, l)
			continue
		}
		// The line's own indentation is kept, and its continuations are
		// indented further.
		body := strings.TrimLeft(l.text, " ")
		indent := l.text[:len(l.text)-len(body)]
		words := strings.Split(body, " ")
		cur := ""
		for _, w := range words {
			if cur != "" && len([]rune(cur))+1+len([]rune(w)) > max {
				out = append(out, sideLine{text: cur, cls: l.cls, id: l.id})
				cur = indent + "    " + w
				continue
			}
			if cur == "" {
				cur = indent + w
			} else {
				cur += " " + w
			}
		}
		out = append(out, sideLine{text: cur, cls: l.cls, id: l.id})
	}
	return out
}

func (s *svgWriter) side(lines []sideLine, x, y float64) {
	s.e.printf(`<g class="side">`)
	open := ""
	for i, l := range lines {
		if l.id != open {
			if open != "" {
				s.e.printf(`</g>`)
			}
			if l.id != "" {
				cls := "service"
				if strings.HasPrefix(l.id, "ing:") {
					cls = "ingress"
				} else if strings.HasPrefix(l.id, "gw:") {
					cls = "gateway"
				}
				s.e.printf(`<g class="%s" data-id="%s">`, cls, esc(l.id))
			}
			open = l.id
		}
		ty := y + 14 + float64(i)*15
		switch l.cls {
		case "head":
			s.e.printf(`<text x="%.1f" y="%.1f" font-weight="bold" font-size="12">%s</text>`, x, ty, esc(l.text))
		case "hopline":
			s.e.printf(`<text x="%.1f" y="%.1f" fill="%s">%s</text>`, x, ty, hopColor, esc(fit(l.text, sideW)))
		case "verdictline":
			s.e.printf(`<text x="%.1f" y="%.1f" fill="#b00020" font-weight="bold">%s</text>`, x, ty, esc(fit(l.text, sideW)))
		case "sub":
			s.text(x, ty, "sub", l.text, sideW)
		default:
			s.text(x, ty, "", l.text, sideW)
		}
	}
	if open != "" {
		s.e.printf(`</g>`)
	}
	s.e.printf("</g>\n")
}
