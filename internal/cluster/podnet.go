package cluster

import "github.com/minikit/minikit/internal/kubelet"

// PodNetwork is --pod-network: how each node reaches the other nodes' pods.
type PodNetwork string

const (
	// PodNetworkHostGW routes each node's pod subnet via the node's address
	// (flannel's host-gw; the default): the nodes must share one L2 segment.
	PodNetworkHostGW PodNetwork = kubelet.PodNetworkHostGW
	// PodNetworkVXLAN is flannel's vxlan backend: pod traffic between nodes
	// travels in VXLAN (UDP 8472) through the device flannel.1.
	PodNetworkVXLAN PodNetwork = kubelet.PodNetworkVXLAN
)

// ParsePodNetwork checks a --pod-network value; "" is the default, host-gw.
func ParsePodNetwork(s string) (PodNetwork, error) {
	p, err := kubelet.ParsePodNetwork(s)
	return PodNetwork(p), err
}
