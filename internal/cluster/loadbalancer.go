package cluster

import (
	"context"
	"fmt"
	"sync"

	"github.com/minikit/minikit/internal/loadbalancer"
)

// startLoadBalancerServer starts the LoadBalancer address allocator (the
// service controller's half of a cloud provider) with the pool of --lb-pool.
// Without a pool it still runs, so LoadBalancer Services show why they stay
// pending.
func startLoadBalancerServer(ctx context.Context, wg *sync.WaitGroup, sc serverContext) error {
	pool, err := loadbalancer.ParsePool(sc.LBPool)
	if err != nil {
		return fmt.Errorf("--lb-pool: %w", err)
	}
	c := loadbalancer.NewController(loadbalancer.ControllerConfig{Client: sc.Client, Pool: pool, Logger: sc.Logger})
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := c.Run(ctx); err != nil && ctx.Err() == nil {
			sc.Logger.Error("load-balancer controller stopped", "err", err)
		}
	}()
	return nil
}

// startLoadBalancerNode starts the node's load-balancer speaker: it answers
// ARP (IPv4) and NDP neighbour solicitations (IPv6) on the interface holding
// the node's InternalIP for the addresses this node is elected to announce. It leaves nothing in the kernel (the answers
// come from a socket of this process), so `minikit down` has nothing to undo.
func startLoadBalancerNode(ctx context.Context, wg *sync.WaitGroup, nc nodeContext) error {
	a, err := loadbalancer.NewAnnouncer(loadbalancer.AnnouncerConfig{Client: nc.Client, NodeName: nc.NodeName,
		NodeIP: nc.NodeIP, Logger: nc.Logger})
	if err != nil {
		return err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := a.Run(ctx); err != nil && ctx.Err() == nil {
			nc.Logger.Error("load-balancer speaker stopped", "err", err)
		}
	}()
	return nil
}
