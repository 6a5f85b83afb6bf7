package cluster

import (
	"context"
	"sync"
)

// startIngressNode starts the node side of the Ingress controller, if any (the
// Ingress issue fills this in).
func startIngressNode(ctx context.Context, wg *sync.WaitGroup, nc nodeContext) error { return nil }

// startIngressServer starts the control-plane side of the Ingress controller, if any.
func startIngressServer(ctx context.Context, wg *sync.WaitGroup, sc serverContext) error { return nil }
