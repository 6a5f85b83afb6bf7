package cluster

import (
	"context"
	"sync"

	"github.com/minikit/minikit/internal/iptables"
	"github.com/minikit/minikit/internal/netpol"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// startNetpol starts the node's NetworkPolicy enforcer: informers for
// NetworkPolicies, Pods and Namespaces feed it, and it writes its filter
// chains and ipsets in the node's network namespace.
func startNetpol(ctx context.Context, wg *sync.WaitGroup, nc nodeContext) error {
	log := nc.Logger.With("component", "netpol")
	ipt, err := iptables.New()
	if err != nil {
		log.Warn("no iptables: network policies will not be enforced on this node", "err", err)
		return nil
	}
	sets, err := netpol.NewNetlinkSets()
	if err != nil {
		log.Warn("no ipsets: network policies will not be enforced on this node", "err", err)
		return nil
	}
	factory := informers.NewSharedInformerFactory(nc.Client, 0)
	polInf := factory.Networking().V1().NetworkPolicies()
	podInf := factory.Core().V1().Pods()
	nsInf := factory.Core().V1().Namespaces()
	e := netpol.New(netpol.Config{NodeName: nc.NodeName, Logger: nc.Logger}, ipt, sets, netpol.Listers{
		Policies: polInf.Lister(), Pods: podInf.Lister(), Namespaces: nsInf.Lister(),
	})
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { e.OnChange() },
		UpdateFunc: func(_, _ any) { e.OnChange() },
		DeleteFunc: func(any) { e.OnChange() },
	}
	for _, inf := range []cache.SharedIndexInformer{polInf.Informer(), podInf.Informer(), nsInf.Informer()} {
		inf.AddEventHandler(h)
	}
	factory.Start(ctx.Done())
	wg.Add(1)
	go func() {
		defer wg.Done()
		go func() {
			if cache.WaitForCacheSync(ctx.Done(), polInf.Informer().HasSynced, podInf.Informer().HasSynced, nsInf.Informer().HasSynced) {
				e.SetInitialized()
			}
		}()
		e.Run(ctx)
		factory.Shutdown()
	}()
	return nil
}
