package cluster

import (
	"context"
	"sync"
)

// startLoadBalancerServer starts the LoadBalancer allocator (the LoadBalancer issue
// fills this in).
func startLoadBalancerServer(ctx context.Context, wg *sync.WaitGroup, sc serverContext) error { return nil }

// startLoadBalancerNode starts the node side of LoadBalancer announcement.
func startLoadBalancerNode(ctx context.Context, wg *sync.WaitGroup, nc nodeContext) error { return nil }
