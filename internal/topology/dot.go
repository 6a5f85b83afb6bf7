package topology

import (
	"io"
	"slices"
	"strconv"
	"strings"
)

const (
	hopColor    = "#d6336c"
	tunnelColor = "#1c7ed6" // VXLAN tunnels
)

// WriteDot writes the graph as Graphviz dot: a cluster per host with its
// interfaces as nodes, veth pairs and bridge ports as edges, the Services
// and Ingresses as a legend. Hops are drawn thick and coloured with their
// numbers; a DROP or REJECT host is filled.
func WriteDot(w io.Writer, g *Graph, hops []Hop) error {
	e := &errWriter{w: w}
	m := markHops(hops)
	e.printf("graph %s {\n", dotQ("lab "+g.Lab))
	e.printf("  graph [rankdir=TB fontname=\"Helvetica\" fontsize=11 compound=true label=%s labelloc=t];\n", dotQ("lab "+g.Lab))
	e.printf("  node [shape=box style=\"rounded,filled\" fillcolor=white fontname=\"Helvetica\" fontsize=10];\n")
	e.printf("  edge [fontname=\"Helvetica\" fontsize=9];\n")
	for _, h := range g.Hosts {
		e.printf("  subgraph %s {\n", dotQ("cluster_"+h.ID))
		label := hostTitle(h)
		if n := m.label(h.ID); n != "" {
			label = "[" + n + "] " + label
		}
		e.printf("    label=%s; id=%s; style=\"rounded,filled\"; fillcolor=%s;", dotQ(label), dotQ(h.ID), dotQ(hostFill(h.Kind)))
		if m.on(h.ID) {
			e.printf(" color=%s; penwidth=3;", dotQ(hopColor))
		}
		if v := m.verdict[h.ID]; v != "" {
			e.printf(" fillcolor=\"#ffd6d6\"; label=%s;", dotQ(label+" ✖ "+v))
		}
		e.printf("\n")
		n := 0
		for _, ifc := range h.Interfaces {
			if !drawn(ifc) {
				continue
			}
			n++
			e.printf("    %s [label=%s", dotQ(ifc.ID), dotQ(ifaceText(ifc)))
			if m.on(ifc.ID) {
				e.printf(" color=%s penwidth=3 xlabel=%s", dotQ(hopColor), dotQ(m.label(ifc.ID)))
			}
			e.printf("];\n")
		}
		if n == 0 {
			e.printf("    %s [label=%s shape=plaintext];\n", dotQ(h.ID+"/"), dotQ(h.Name))
		}
		e.printf("  }\n")
	}
	for _, l := range g.Links {
		attrs := []string{"id=" + dotQ(l.ID)}
		label := ""
		switch l.Kind {
		case "bridge":
			attrs = append(attrs, "style=dashed")
		case "vxlan":
			label = vxlanLabel(g, l)
			attrs = append(attrs, "style=dashed", "fontcolor="+dotQ(tunnelColor), "constraint=false")
			if !m.on(l.ID) {
				attrs = append(attrs, "color="+dotQ(tunnelColor), "penwidth=2")
			}
		}
		if m.on(l.ID) {
			label = strings.TrimSpace(m.label(l.ID) + " " + label)
			attrs = append(attrs, "color="+dotQ(hopColor), "penwidth=4")
		}
		if label != "" {
			attrs = append(attrs, "label="+dotQ(label))
		}
		e.printf("  %s -- %s [%s];\n", dotQ(l.A), dotQ(l.B), strings.Join(attrs, " "))
	}
	if len(g.Services)+len(g.Ingresses)+len(g.Gateways) > 0 {
		var lines []string
		for _, s := range g.Services {
			lines = append(lines, serviceLines(s)...)
		}
		for _, in := range g.Ingresses {
			lines = append(lines, ingressLines(in)...)
		}
		for _, gw := range g.Gateways {
			lines = append(lines, gatewayLines(gw, g.GatewayRoutes)...)
		}
		e.printf("  \"services\" [shape=note label=%s];\n", dotQ(strings.Join(lines, "\\l")+"\\l"))
	}
	if len(hops) > 0 {
		e.printf("  \"hops\" [shape=note color=%s label=%s];\n", dotQ(hopColor), dotQ(strings.Join(hopLegend(hops), "\\l")+"\\l"))
	}
	e.printf("}\n")
	return e.err
}

// dotQ quotes a dot ID. A "\l" already in s (left-justified line breaks
// the caller wants) is kept.
func dotQ(s string) string {
	s = strings.ReplaceAll(s, `"`, `\"`)
	s = strings.ReplaceAll(s, "\n", `\n`)
	return `"` + s + `"`
}

func hostFill(kind string) string {
	switch kind {
	case KindUnderlay:
		return "#eef2f7"
	case KindNode:
		return "#e8f3ec"
	case KindPod:
		return "#fff8e6"
	case KindRouter:
		return "#f7efe4"
	case KindClient, KindExternal:
		return "#eeeaf7"
	}
	return "#f4f4f4"
}

// WriteMermaid writes the graph as a Mermaid flowchart: a subgraph per
// host, its interfaces inside, links as edges; hops are coloured, with
// their numbers on the edges and interfaces.
func WriteMermaid(w io.Writer, g *Graph, hops []Hop) error {
	e := &errWriter{w: w}
	m := markHops(hops)
	ids := map[string]string{}
	id := func(s string) string {
		if v, ok := ids[s]; ok {
			return v
		}
		v := "n" + strconv.Itoa(len(ids))
		ids[s] = v
		return v
	}
	e.printf("flowchart TB\n")
	e.printf("  %%%% lab %s\n", g.Lab)
	var styled []string
	for _, h := range g.Hosts {
		label := hostTitle(h)
		if n := m.label(h.ID); n != "" {
			label = "[" + n + "] " + label
		}
		if v := m.verdict[h.ID]; v != "" {
			label += " ✖ " + v
		}
		e.printf("  subgraph %s[%s]\n", id(h.ID), mmQ(label))
		n := 0
		for _, ifc := range h.Interfaces {
			if !drawn(ifc) {
				continue
			}
			n++
			t := ifaceText(ifc)
			if l := m.label(ifc.ID); l != "" {
				t = "[" + l + "] " + t
				styled = append(styled, id(ifc.ID))
			}
			e.printf("    %s[%s]\n", id(ifc.ID), mmQ(t))
		}
		if n == 0 {
			e.printf("    %s[%s]\n", id(h.ID+"/"), mmQ(h.Name))
		}
		e.printf("  end\n")
		if m.on(h.ID) {
			styled = append(styled, id(h.ID))
		}
	}
	var hopLinks, tunnels []int
	for i, l := range g.Links {
		arrow := "---"
		label := ""
		switch l.Kind {
		case "bridge":
			arrow = "-.-"
		case "vxlan":
			arrow, label = "-.-", vxlanLabel(g, l)
			tunnels = append(tunnels, i)
		}
		if n := m.label(l.ID); n != "" {
			label = strings.TrimSpace(n + " " + label)
			hopLinks = append(hopLinks, i)
		}
		if label != "" {
			e.printf("  %s %s|%s| %s\n", id(l.A), arrow, mmQ(label), id(l.B))
		} else {
			e.printf("  %s %s %s\n", id(l.A), arrow, id(l.B))
		}
	}
	if len(g.Services)+len(g.Ingresses)+len(g.Gateways) > 0 {
		var lines []string
		for _, s := range g.Services {
			lines = append(lines, serviceLines(s)...)
		}
		for _, in := range g.Ingresses {
			lines = append(lines, ingressLines(in)...)
		}
		for _, gw := range g.Gateways {
			lines = append(lines, gatewayLines(gw, g.GatewayRoutes)...)
		}
		e.printf("  services[%s]\n", mmQ(strings.Join(lines, "<br/>")))
	}
	if len(hops) > 0 {
		e.printf("  hops[%s]\n", mmQ(strings.Join(hopLegend(hops), "<br/>")))
		styled = append(styled, "hops")
	}
	for _, s := range styled {
		e.printf("  style %s stroke:%s,stroke-width:3px\n", s, hopColor)
	}
	for _, i := range tunnels {
		if !slices.Contains(hopLinks, i) {
			e.printf("  linkStyle %d stroke:%s,stroke-width:2px,stroke-dasharray:6 3\n", i, tunnelColor)
		}
	}
	for _, i := range hopLinks {
		e.printf("  linkStyle %d stroke:%s,stroke-width:4px\n", i, hopColor)
	}
	return e.err
}

// mmQ quotes a Mermaid label; quotes inside become #quot;.
func mmQ(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, "#quot;") + `"`
}
