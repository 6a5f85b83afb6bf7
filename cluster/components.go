package cluster

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"

	"github.com/minikit/minikit/node"

	"k8s.io/client-go/kubernetes"
)

// nodeContext is what the per-node components (service proxy, cluster DNS,
// ingress) get from the wiring, on the server's node and on every agent's node.
type nodeContext struct {
	Client      kubernetes.Interface
	NodeName    string
	NodeIP      netip.Addr
	DataDir     string // this node's data dir
	ServiceCIDR netip.Prefix
	ClusterCIDR netip.Prefix
	Agent       *node.Agent
	Logger      *slog.Logger
	Version     string
	// DNS configures the node's cluster DNS server.
	DNS DNSOptions
	// ProxyMode is the service proxy's mode ("" is iptables).
	ProxyMode ProxyMode
	// PodNetwork is the node's pod network ("" is host-gw).
	PodNetwork PodNetwork
}

// startNodeComponents starts what runs on every node next to its agent. Each
// start function runs its component until ctx ends, accounted in wg.
func startNodeComponents(ctx context.Context, wg *sync.WaitGroup, nc nodeContext) error {
	for _, start := range []func(context.Context, *sync.WaitGroup, nodeContext) error{startProxy, startNetpol, startDNS, startIngressNode, startLoadBalancerNode} {
		if err := start(ctx, wg, nc); err != nil {
			return err
		}
	}
	return nil
}

// serverContext is what control-plane components (controllers) get.
type serverContext struct {
	Client      kubernetes.Interface
	DataDir     string
	ServiceCIDR netip.Prefix
	ClusterCIDR netip.Prefix
	Logger      *slog.Logger
	Version     string
	// LBPool is --lb-pool: the LoadBalancer address pool, a comma-separated
	// list of CIDRs and FIRST-LAST ranges ("" = none).
	LBPool string
}

// startServerComponents starts control-plane components beyond the core controllers.
func startServerComponents(ctx context.Context, wg *sync.WaitGroup, sc serverContext) error {
	for _, start := range []func(context.Context, *sync.WaitGroup, serverContext) error{startIngressServer, startLoadBalancerServer} {
		if err := start(ctx, wg, sc); err != nil {
			return err
		}
	}
	return nil
}
