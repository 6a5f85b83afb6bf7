// Package topology reads a lab's network as it is — from the kernel of every
// namespace the lab owns and from the API — and draws it: JSON (the model
// below), Graphviz dot, Mermaid and SVG. It never reports what minikit meant
// to create: an interface deleted by hand is missing from the picture.
//
// The collector (collect.go) enters each namespace once (netns.DoPath) for
// a netlink handle and reads links, addresses and main-table routes; veth
// peers are matched across namespaces by ifindex and confirmed with the
// namespace ids each namespace gives the others (RTM_GETNSID). A VXLAN
// device's tunnels are read the same way, never assumed: its FDB entries
// (AF_BRIDGE neighbours) name the underlay address each VTEP MAC lives at,
// and the lab host holding that address is the tunnel's other end. PathOf
// (path.go) lays a `minikit trace` path over the graph as hops. Stable
// (stable.go) removes what differs each time a lab is made, for pictures
// kept in the repository.
//
// The SVG layout (svg.go) is written here for a lab's known shape, not
// general graph layout: no Graphviz binary is needed at run time, and no
// maintained pure-Go graph layout library is available to vendor (the Go
// ports of Graphviz's dot layout are unmaintained experiments). dot and
// Mermaid output leave layout to those tools.
//
// This file is the model: the contract between the collector, the
// renderers, `minikit lab graph` and `minikit ui`.
package topology

// Host kinds.
const (
	KindUnderlay = "underlay" // the lab's underlay bridge namespace (LAB-net)
	// KindRouter is a routed lab's router namespace (LAB-router): a leg
	// on each underlay segment, forwarding between them.
	KindRouter   = "router"
	KindNode     = "node"     // a node's namespace (LAB-nodeN)
	KindClient   = "client"   // the lab's client host
	KindExternal = "external" // the lab's external host
	KindPod      = "pod"      // a pod's network namespace (kubelet.PodSandboxName)
)

// Graph is one lab at one moment.
type Graph struct {
	Lab string `json:"lab"`
	// Hosts are the lab's network namespaces, sorted: underlay, router
	// (a routed lab's), nodes, client, external, then pods by node,
	// namespace and name.
	Hosts []Host `json:"hosts"`
	// Links are the edges: a veth pair between two hosts ("veth"), an
	// interface enslaved to a bridge in the same host ("bridge"), or a
	// VXLAN tunnel between two nodes' VXLAN devices ("vxlan", from the
	// kernel's FDB entries: the device sends to the other node's address).
	Links []Link `json:"links"`
	// Services and Ingresses from the API (never Secrets or their data).
	Services  []Service `json:"services"`
	Ingresses []Ingress `json:"ingresses"`
	// Gateways and their routes (HTTPRoutes, GRPCRoutes, TLSRoutes) from
	// the API; empty when the Gateway API's CRDs are not installed
	// (minikit up --gateway-api=false).
	Gateways      []Gateway      `json:"gateways"`
	GatewayRoutes []GatewayRoute `json:"gatewayRoutes"`
}

// Host is one network namespace.
type Host struct {
	// ID is the namespace's name under /run/netns (LAB-node1,
	// mk-89871e-e45bf0b814); unique in a Graph.
	ID    string `json:"id"`
	Kind  string `json:"kind"`
	Name  string `json:"name"`           // node1, client, external, net; a pod's NAMESPACE/NAME
	Node  string `json:"node,omitempty"` // a pod's node
	Phase string `json:"phase,omitempty"`
	// Address is the host's main address: a node's, client's or external's
	// underlay address, a pod's IP.
	Address string `json:"address,omitempty"`
	// Addresses are, in a dual-stack lab, all of a node's InternalIPs or a
	// pod's podIPs, the primary (Address) first; empty when there is one.
	Addresses []string `json:"addresses,omitempty"`
	PodCIDR   string   `json:"podCIDR,omitempty"` // nodes
	// PodCIDRs are a dual-stack node's pod CIDRs of both families, the
	// primary (PodCIDR) first; empty when there is one.
	PodCIDRs []string          `json:"podCIDRs,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"` // pods
	// Owner is a pod's controller, KIND/NAME (ReplicaSet/web-5d9f8c7b6).
	Owner      string      `json:"owner,omitempty"`
	Interfaces []Interface `json:"interfaces"`
	Routes     []Route     `json:"routes"`
}

// Interface is one link in a host, as `ip -j -d link` and `ip -j addr` show it.
type Interface struct {
	ID     string   `json:"id"` // HOSTID/IFNAME
	Name   string   `json:"name"`
	Index  int      `json:"index"`
	Kind   string   `json:"kind"` // veth, bridge, vxlan, dummy, loopback, device
	MAC    string   `json:"mac,omitempty"`
	MTU    int      `json:"mtu"`
	State  string   `json:"state"`            // operstate: UP, DOWN, UNKNOWN
	Master string   `json:"master,omitempty"` // the bridge's name in this host
	Addrs  []string `json:"addrs,omitempty"`  // CIDR, IPv4 then IPv6, in kernel order
	PeerID string   `json:"peer,omitempty"`   // a veth's peer interface ID (in any lab host)
	// VXLAN is a VXLAN device's tunnel, as `ip -d link` and `bridge fdb
	// show dev IFNAME` show it.
	VXLAN *VXLAN `json:"vxlan,omitempty"`
}

// VXLAN is a VXLAN device's VNI, UDP port, local address and the FDB
// entries that send its frames to other hosts' underlay addresses.
type VXLAN struct {
	VNI   int    `json:"vni"`
	Port  int    `json:"port"`
	Local string `json:"local,omitempty"`
	// FDB is the device's forwarding entries with a destination, in
	// kernel order: a VTEP MAC and the underlay address it lives at.
	FDB []FDBEntry `json:"fdb"`
}

// FDBEntry is one `bridge fdb` entry of a VXLAN device.
type FDBEntry struct {
	MAC string `json:"mac,omitempty"`
	Dst string `json:"dst"`
}

// Route is one route of the main table, as `ip -j route` shows it.
type Route struct {
	Dst      string `json:"dst"` // "default" or CIDR
	Gateway  string `json:"gateway,omitempty"`
	Dev      string `json:"dev,omitempty"`
	Src      string `json:"src,omitempty"`
	Protocol string `json:"protocol,omitempty"` // kernel, boot, static, or a number
	Scope    string `json:"scope,omitempty"`
	// Type is a route's type when it is not unicast (blackhole,
	// unreachable, prohibit, throw), as `ip -j route` shows it.
	Type string `json:"type,omitempty"`
}

// Link is an edge.
type Link struct {
	ID   string `json:"id"`   // A + "--" + B
	Kind string `json:"kind"` // veth, bridge, vxlan
	// A and B are interface IDs; for "bridge" A is the port, B the
	// bridge; for "vxlan" the two VXLAN devices, A in the host sorted first.
	A string `json:"a"`
	B string `json:"b"`
}

// Service is a Service with its addresses, read from the API.
type Service struct {
	ID        string `json:"id"` // svc:NAMESPACE/NAME
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Type      string `json:"type"`
	ClusterIP string `json:"clusterIP,omitempty"`
	// ClusterIPs are a dual-stack Service's cluster IPs of both families,
	// the primary (ClusterIP) first; empty when it has one.
	ClusterIPs            []string      `json:"clusterIPs,omitempty"`
	ExternalIPs           []string      `json:"externalIPs,omitempty"`
	LoadBalancerIPs       []string      `json:"loadBalancerIPs,omitempty"`
	ExternalName          string        `json:"externalName,omitempty"`
	ExternalTrafficPolicy string        `json:"externalTrafficPolicy,omitempty"`
	Ports                 []ServicePort `json:"ports"`
	// Endpoints are the host IDs of the ready pods behind it (EndpointSlices).
	Endpoints []string `json:"endpoints"`
}

// ServicePort is one port of a Service.
type ServicePort struct {
	Name       string `json:"name,omitempty"`
	Protocol   string `json:"protocol"`
	Port       int32  `json:"port"`
	TargetPort string `json:"targetPort"`
	NodePort   int32  `json:"nodePort,omitempty"`
}

// Ingress is an Ingress with its rules, read from the API.
type Ingress struct {
	ID        string        `json:"id"` // ing:NAMESPACE/NAME
	Namespace string        `json:"namespace"`
	Name      string        `json:"name"`
	Class     string        `json:"class,omitempty"`
	Addresses []string      `json:"addresses,omitempty"`
	Rules     []IngressRule `json:"rules"`
}

// IngressRule is one host/path → service:port.
type IngressRule struct {
	Host    string `json:"host,omitempty"`
	Path    string `json:"path"`
	Service string `json:"service"` // svc:NAMESPACE/NAME
	Port    string `json:"port"`
}

// Gateway is a Gateway with its listeners, read from the API.
type Gateway struct {
	ID        string `json:"id"` // gw:NAMESPACE/NAME
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Class     string `json:"class"`
	// Addresses are status.addresses' values (the address the
	// LoadBalancer stub gave the Gateway's Service).
	Addresses []string `json:"addresses,omitempty"`
	// Programmed is the status of the Gateway's Programmed condition:
	// True, False, or "" when it has none yet.
	Programmed string            `json:"programmed,omitempty"`
	Listeners  []GatewayListener `json:"listeners"`
}

// GatewayListener is one listener of a Gateway.
type GatewayListener struct {
	Name     string `json:"name"`
	Protocol string `json:"protocol"` // HTTP, HTTPS, TLS, ...
	Port     int32  `json:"port"`
	Hostname string `json:"hostname,omitempty"`
	// AttachedRoutes is status.listeners[].attachedRoutes.
	AttachedRoutes int32 `json:"attachedRoutes"`
}

// GatewayRoute is an HTTPRoute, GRPCRoute or TLSRoute, read from the API.
type GatewayRoute struct {
	// ID is KIND:NAMESPACE/NAME with KIND httproute, grpcroute or tlsroute.
	ID        string        `json:"id"`
	Kind      string        `json:"kind"` // HTTPRoute, GRPCRoute, TLSRoute
	Namespace string        `json:"namespace"`
	Name      string        `json:"name"`
	Hostnames []string      `json:"hostnames,omitempty"`
	Parents   []RouteParent `json:"parents"`
	Rules     []RouteRule   `json:"rules"`
}

// RouteParent is one parentRef of a route with what status says of it.
type RouteParent struct {
	Gateway string `json:"gateway"` // gw:NAMESPACE/NAME
	// SectionName and Port narrow the parentRef to listeners.
	SectionName string `json:"sectionName,omitempty"`
	Port        int32  `json:"port,omitempty"`
	// Accepted and ResolvedRefs are the statuses of the conditions of the
	// route's status.parents entry for this parent ("" without one).
	Accepted     string `json:"accepted,omitempty"`
	ResolvedRefs string `json:"resolvedRefs,omitempty"`
	// Reason is the reason of the first of those two that is not True.
	Reason string `json:"reason,omitempty"`
}

// RouteRule is one rule of a route: its matches summarised (as Ingress
// rules are: "/api", "PathPrefix /api, header x-env=canary"; a GRPCRoute's
// "service/method"; "" for a TLSRoute or a rule without matches) and its
// backends.
type RouteRule struct {
	Name     string         `json:"name,omitempty"`
	Matches  []string       `json:"matches,omitempty"`
	Backends []RouteBackend `json:"backends"`
}

// RouteBackend is one backendRef: a Service port and its weight.
type RouteBackend struct {
	Service string `json:"service"` // svc:NAMESPACE/NAME
	Port    int32  `json:"port,omitempty"`
	Weight  int32  `json:"weight"`
	// Kind is the backendRef's group/kind when it is not a core Service.
	Kind string `json:"kind,omitempty"`
}

// Hop is one step of a traced packet drawn over the graph: the element it
// is at (a host, interface or link ID) and what happens there.
type Hop struct {
	Element string `json:"element"`
	Kind    string `json:"kind"`              // host, interface, link
	Label   string `json:"label"`             // "DNAT to 10.244.1.2:8080", "MASQUERADE", "route out eth1", "veth", "pod"
	Verdict string `json:"verdict,omitempty"` // DROP or REJECT where the path ends
}
