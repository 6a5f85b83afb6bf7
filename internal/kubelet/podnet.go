package kubelet

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/minikit/minikit/internal/cni"
	"github.com/minikit/minikit/internal/netns"
)

// Network is what the agent uses of the node's pod network: the kernel side
// effects of package cni, behind one interface so that pod sync, adoption
// and the network's resync run against a stateful fake in tests without
// root. Calls for one pod come from its worker only; node-wide calls from
// the Run loop.
type Network interface {
	// EnsureBridge creates or repairs cni0 with the podCIDR's gateway address.
	EnsureBridge() error
	// EnsureBridgeRouteLocalnet lets 127.0.0.1:hostPort reach pods (hostPorts).
	EnsureBridgeRouteLocalnet() error
	// DeleteUDPConntrack forgets the UDP flows to dst:port (a zero dst: any).
	DeleteUDPConntrack(dst netip.Addr, port uint16) error
	// WatchPodNetwork calls kick when a route, the VXLAN device or an entry
	// on it is deleted, until done is closed.
	WatchPodNetwork(done <-chan struct{}, kick func(), onErr func(error)) error

	// ConnectedPrefixes are the node's on-link subnets (host-gw's reach).
	ConnectedPrefixes() ([]netip.Prefix, error)
	// SyncRoutes converges the host-gw routes: pod CIDR -> node IP.
	SyncRoutes(want map[netip.Prefix]netip.Addr) (changed []string, err error)
	// EnsureVXLAN creates or repairs the VXLAN device sending from local.
	EnsureVXLAN(local netip.Addr) (mac net.HardwareAddr, created bool, err error)
	// SyncVXLANPeers converges the VXLAN routes, neighbour and FDB entries.
	SyncVXLANPeers(peers []cni.VXLANPeer) (changed []string, err error)
	// DeleteVXLAN removes the VXLAN device, reporting whether there was one.
	DeleteVXLAN() (removed bool, err error)

	// SetupPod creates or repairs a pod's netns, its veth on the bridge and
	// its IP; PodOK reports whether all of it is intact, or the first thing
	// wrong ("netns missing" when the namespace itself is gone); TeardownPod
	// removes it, missing pieces being no error.
	SetupPod(p cni.PodNet) error
	PodOK(p cni.PodNet) (ok bool, problem string)
	TeardownPod(netns string) error
	// Sandboxes lists the pod network namespaces whose names start with prefix.
	Sandboxes(prefix string) ([]string, error)

	// The pod's UTS and mount namespaces (a hostNetwork pod has only these),
	// with its /etc/hosts, /etc/resolv.conf and volumes bind-mounted.
	PodNamespacesExist(name string) bool
	CreatePodNamespaces(name, hostname, resolvConf, hosts string, binds []cni.Bind) error
	DeletePodNamespaces(name string) error
}

// cniNetwork is the kernel's pod network, package cni's: what an agent uses
// when its Config has no Network.
type cniNetwork struct{ node *cni.Network }

// newCNINetwork builds the node's cni0 network for podCIDR. As flannel
// does, the pods' MTU (cni0, veths, eth0) is the underlay's, and with vxlan
// the VXLAN device's, 50 bytes less for the outer headers (70 over an IPv6
// underlay); a switch of pod
// network changes the running pods' MTU in place.
func (a *Agent) newCNINetwork(podCIDR netip.Prefix) (Network, error) {
	n := &cni.Network{HostNS: a.cfg.HostNS, Bridge: "cni0", PodCIDR: podCIDR, SecondaryPodCIDR: a.secondaryPodCIDR, Log: a.log, SysctlRecord: sysctlRecord(a.cfg.DataDir)}
	if mtu, err := n.UnderlayMTU(a.cfg.NodeIP); err == nil {
		n.MTU = mtu
		if a.cfg.PodNetwork == PodNetworkVXLAN {
			n.MTU = mtu - cni.VXLANOverheadOf(a.cfg.NodeIP)
		}
	} else if a.cfg.PodNetwork == PodNetworkVXLAN {
		return nil, fmt.Errorf("finding the MTU of the link with the node IP %s: %w", a.cfg.NodeIP, err)
	} else {
		a.log.Warn("pods get the kernel's default MTU: no link holds the node IP", "nodeIP", a.cfg.NodeIP, "err", err)
	}
	return cniNetwork{n}, nil
}

func (c cniNetwork) EnsureBridge() error              { return c.node.EnsureBridge() }
func (c cniNetwork) EnsureBridgeRouteLocalnet() error { return c.node.EnsureBridgeRouteLocalnet() }
func (c cniNetwork) DeleteUDPConntrack(dst netip.Addr, port uint16) error {
	return c.node.DeleteUDPConntrack(dst, port)
}
func (c cniNetwork) WatchPodNetwork(done <-chan struct{}, kick func(), onErr func(error)) error {
	return c.node.WatchPodNetwork(done, kick, onErr)
}
func (c cniNetwork) ConnectedPrefixes() ([]netip.Prefix, error) { return c.node.ConnectedPrefixes() }
func (c cniNetwork) SyncRoutes(want map[netip.Prefix]netip.Addr) ([]string, error) {
	return c.node.SyncRoutes(want)
}
func (c cniNetwork) EnsureVXLAN(local netip.Addr) (net.HardwareAddr, bool, error) {
	return c.node.EnsureVXLAN(local, c.node.MTU)
}
func (c cniNetwork) SyncVXLANPeers(peers []cni.VXLANPeer) ([]string, error) {
	return c.node.SyncVXLANPeers(peers)
}
func (c cniNetwork) DeleteVXLAN() (bool, error) { return c.node.DeleteVXLAN() }
func (c cniNetwork) SetupPod(p cni.PodNet) error {
	_, err := c.node.SetupPod(p)
	return err
}
func (c cniNetwork) PodOK(p cni.PodNet) (bool, string)         { return c.node.PodOK(p) }
func (c cniNetwork) TeardownPod(name string) error             { return c.node.TeardownPod(name) }
func (c cniNetwork) Sandboxes(prefix string) ([]string, error) { return netns.ListNamed(prefix) }
func (c cniNetwork) PodNamespacesExist(name string) bool       { return cni.PodNamespacesExist(name) }
func (c cniNetwork) DeletePodNamespaces(name string) error     { return cni.DeletePodNamespaces(name) }
func (c cniNetwork) CreatePodNamespaces(name, hostname, resolvConf, hosts string, binds []cni.Bind) error {
	return cni.CreatePodNamespacesWith(name, hostname, resolvConf, hosts, binds)
}
