package kubelet

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/minikit/minikit/internal/cni"

	corev1 "k8s.io/api/core/v1"
)

// Pod networks: how a node reaches the pods of the others.
const (
	// PodNetworkHostGW routes each other node's pod subnet via that node's
	// InternalIP (flannel's host-gw backend): no encapsulation, but every
	// node must be on one L2 segment with the others.
	PodNetworkHostGW = "host-gw"
	// PodNetworkVXLAN encapsulates pod traffic between nodes in VXLAN on
	// UDP 8472 through the device flannel.1 (flannel's vxlan backend): it
	// works across routers, at 50 bytes of MTU per packet.
	PodNetworkVXLAN = "vxlan"
)

// Flannel's Node annotations (its kube subnet manager's): each node publishes
// its backend and, for vxlan, the MAC of its VXLAN device, which the others read
// to fill their neighbour and FDB tables.
const (
	AnnotationFlannelPrefix = "flannel.alpha.coreos.com/"
	AnnotationBackendType   = AnnotationFlannelPrefix + "backend-type"
	AnnotationBackendData   = AnnotationFlannelPrefix + "backend-data"
	AnnotationPublicIP      = AnnotationFlannelPrefix + "public-ip"
	AnnotationPublicIPOver  = AnnotationFlannelPrefix + "public-ip-overwrite"
	// AnnotationPublicIPv6 and AnnotationBackendV6Data are the IPv6
	// underlay's: an IPv6-only node publishes its IPv6 address and VTEP MAC
	// there, as flannel's vxlan backend does for its IPv6 device.
	AnnotationPublicIPv6     = AnnotationFlannelPrefix + "public-ipv6"
	AnnotationPublicIPv6Over = AnnotationFlannelPrefix + "public-ipv6-overwrite"
	AnnotationBackendV6Data  = AnnotationFlannelPrefix + "backend-v6-data"
	AnnotationSubnetManager  = AnnotationFlannelPrefix + "kube-subnet-manager"
	annotationBackendDataNil = "null"
)

// ParsePodNetwork checks a --pod-network value; "" is the default, host-gw.
func ParsePodNetwork(s string) (string, error) {
	switch s {
	case "", PodNetworkHostGW:
		return PodNetworkHostGW, nil
	case PodNetworkVXLAN:
		return PodNetworkVXLAN, nil
	}
	return "", fmt.Errorf("unknown pod network %q: want host-gw or vxlan", s)
}

// vxlanBackendData is flannel's backend-data annotation for vxlan.
type vxlanBackendData struct {
	VNI     int    `json:"VNI"`
	VtepMAC string `json:"VtepMAC"`
}

// parseBackendData reads a vxlan backend-data annotation: the VNI must be ours
// (packets of another VNI would be dropped by our device) and the MAC a unicast
// Ethernet address.
func parseBackendData(s string) (net.HardwareAddr, error) {
	return parseBackendDataOf(AnnotationBackendData, s)
}

// parseBackendDataOf reads the vxlan backend data s of annotation key (the
// IPv4 underlay's backend-data or the IPv6 one's backend-v6-data, which
// have one shape).
func parseBackendDataOf(key, s string) (net.HardwareAddr, error) {
	var d vxlanBackendData
	if err := json.Unmarshal([]byte(s), &d); err != nil {
		return nil, fmt.Errorf("parsing %s %q: %w", key, s, err)
	}
	if d.VNI != cni.VXLANVNI {
		return nil, fmt.Errorf("%s has VNI %d, this node uses VNI %d", key, d.VNI, cni.VXLANVNI)
	}
	mac, err := net.ParseMAC(d.VtepMAC)
	if err != nil || len(mac) != 6 {
		return nil, fmt.Errorf("%s has VtepMAC %q, not an Ethernet address", key, d.VtepMAC)
	}
	if mac[0]&1 != 0 || strings.Trim(mac.String(), "0:") == "" {
		return nil, fmt.Errorf("%s has VtepMAC %s, not a unicast address", key, mac)
	}
	return mac, nil
}

// backendData renders this node's vxlan backend-data annotation.
func backendData(mac net.HardwareAddr) string {
	b, _ := json.Marshal(vxlanBackendData{VNI: cni.VXLANVNI, VtepMAC: mac.String()})
	return string(b)
}

// PublicIP is the underlay address of a node as flannel picks it: the
// public-ip-overwrite annotation, else public-ip, else the InternalIP.
func PublicIP(n *corev1.Node) (netip.Addr, error) {
	for _, k := range []string{AnnotationPublicIPOver, AnnotationPublicIP} {
		if v := n.Annotations[k]; v != "" {
			ip, err := netip.ParseAddr(v)
			if err != nil || !ip.Is4() {
				return netip.Addr{}, fmt.Errorf("%s %q is not an IPv4 address", k, v)
			}
			return ip, nil
		}
	}
	ip, err := netip.ParseAddr(internalIP(n))
	if err != nil || !ip.Is4() {
		return netip.Addr{}, fmt.Errorf("node has no IPv4 InternalIP")
	}
	return ip, nil
}

// PublicIPv6 is the IPv6 underlay address of a node as flannel picks it: the
// public-ipv6-overwrite annotation, else public-ipv6, else its IPv6
// InternalIP.
func PublicIPv6(n *corev1.Node) (netip.Addr, error) {
	for _, k := range []string{AnnotationPublicIPv6Over, AnnotationPublicIPv6} {
		if v := n.Annotations[k]; v != "" {
			ip, err := netip.ParseAddr(v)
			if err != nil || !ip.Is6() || ip.Is4In6() || ip.IsLinkLocalUnicast() {
				return netip.Addr{}, fmt.Errorf("%s %q is not a global IPv6 address", k, v)
			}
			return ip, nil
		}
	}
	if ip := internalIPv6(n); ip.IsValid() {
		return ip, nil
	}
	return netip.Addr{}, fmt.Errorf("node has no IPv6 InternalIP")
}

// vxlanPeers computes, from the Node objects, the overlay entries this node
// wants: one per other node with a pod CIDR. Nodes that cannot be reached
// through the overlay (not in vxlan mode, a bad annotation) are left out, each
// with the reason, sorted by node name.
func vxlanPeers(self string, nodes []*corev1.Node) (peers []cni.VXLANPeer, skipped []string) {
	nodes = slices.Clone(nodes)
	slices.SortFunc(nodes, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	for _, n := range nodes {
		if n.Name == self || n.Spec.PodCIDR == "" {
			continue
		}
		skip := func(format string, args ...any) {
			skipped = append(skipped, fmt.Sprintf("node %q: ", n.Name)+fmt.Sprintf(format, args...))
		}
		cidr, err := netip.ParsePrefix(n.Spec.PodCIDR)
		if err != nil {
			skip("podCIDR %q is not a prefix", n.Spec.PodCIDR)
			continue
		}
		// An IPv6-only node (its podCIDR IPv6) is reached over its IPv6
		// underlay, with the -v6 annotations; any other over IPv4.
		v6 := cidr.Addr().Is6()
		dataKey, publicIP := AnnotationBackendData, PublicIP
		if v6 {
			dataKey, publicIP = AnnotationBackendV6Data, PublicIPv6
		}
		switch t := n.Annotations[AnnotationBackendType]; t {
		case PodNetworkVXLAN:
		case "":
			skip("has not published its pod network yet (%s)", AnnotationBackendType)
			continue
		default:
			skip("its pod network is %s, not vxlan (%s)", t, AnnotationBackendType)
			continue
		}
		mac, err := parseBackendDataOf(dataKey, n.Annotations[dataKey])
		if err != nil {
			skip("%v", err)
			continue
		}
		ip, err := publicIP(n)
		if err != nil {
			skip("%v", err)
			continue
		}
		// A dual-stack node's IPv6 pod range crosses the same IPv4 tunnel.
		peers = append(peers, cni.VXLANPeer{Subnet: cidr.Masked(), VtepMAC: mac, PublicIP: ip, Subnet6: secondaryPodCIDR(n)})
	}
	return peers, skipped
}

// hostGWRoutes computes host-gw's routes: each other node's pod CIDR via its
// InternalIP, when that address is on one of the node's connected subnets.
// A node that is not (another segment, behind a router) cannot be a gateway:
// it is left out and named in notAdjacent, sorted.
func hostGWRoutes(self string, nodes []*corev1.Node, connected []netip.Prefix) (want map[netip.Prefix]netip.Addr, notAdjacent []string) {
	want = map[netip.Prefix]netip.Addr{}
	for _, n := range nodes {
		if n.Name == self || n.Spec.PodCIDR == "" {
			continue
		}
		cidr, err1 := netip.ParsePrefix(n.Spec.PodCIDR)
		ip, err2 := netip.ParseAddr(internalIP(n))
		if err1 != nil || err2 != nil {
			continue
		}
		if connected != nil && !slices.ContainsFunc(connected, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			notAdjacent = append(notAdjacent, fmt.Sprintf("%s (%s)", n.Name, ip))
			continue
		}
		want[cidr.Masked()] = ip
		// Dual-stack: the node's IPv6 pod range via its IPv6 InternalIP.
		if c6, ip6 := secondaryPodCIDR(n), internalIPv6(n); c6.IsValid() && ip6.IsValid() &&
			(connected == nil || slices.ContainsFunc(connected, func(p netip.Prefix) bool { return p.Contains(ip6) })) {
			want[c6] = ip6
		}
	}
	slices.Sort(notAdjacent)
	return want, notAdjacent
}

// networkAnnotations are the flannel annotations this node publishes.
func (a *Agent) networkAnnotations() map[string]string {
	m := map[string]string{
		AnnotationSubnetManager: "true",
		AnnotationBackendType:   a.cfg.PodNetwork,
		AnnotationBackendData:   annotationBackendDataNil,
	}
	// An IPv6-only node's underlay is IPv6: flannel publishes its address
	// and VTEP as public-ipv6 and backend-v6-data, leaving backend-data null.
	publicKey, dataKey := AnnotationPublicIP, AnnotationBackendData
	if a.cfg.NodeIP.Is6() && !a.cfg.NodeIP.Is4In6() {
		publicKey, dataKey = AnnotationPublicIPv6, AnnotationBackendV6Data
		if a.cfg.PodNetwork == PodNetworkVXLAN {
			m[dataKey] = annotationBackendDataNil
		}
	}
	if a.cfg.NodeIP.IsValid() {
		m[publicKey] = a.cfg.NodeIP.String()
	}
	if a.cfg.PodNetwork == PodNetworkVXLAN && a.vtepMAC != nil {
		m[dataKey] = backendData(a.vtepMAC)
	}
	return m
}

// flannelChanged reports whether a Node update changed what other nodes read
// from it: its flannel annotations.
func flannelChanged(o, n *corev1.Node) bool {
	for k, v := range n.Annotations {
		if strings.HasPrefix(k, AnnotationFlannelPrefix) && o.Annotations[k] != v {
			return true
		}
	}
	for k := range o.Annotations {
		if _, ok := n.Annotations[k]; strings.HasPrefix(k, AnnotationFlannelPrefix) && !ok {
			return true
		}
	}
	return false
}
