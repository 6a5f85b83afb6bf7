package cluster

import (
	"context"
	"sync"

	"github.com/minikit/minikit/internal/iptables"
	"github.com/minikit/minikit/internal/netpol"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// startNetpol starts the node's NetworkPolicy enforcer: informers for
// NetworkPolicies, Pods and Namespaces feed it, and it writes its filter
// chains and ipsets in the node's network namespace. A dual-stack node (an
// IPv6 InternalIP beside the IPv4 one, as for the proxy) runs a second
// enforcer for IPv6 that writes ip6tables; an IPv6 single-stack node runs
// that one alone; an IPv4 node removes what an IPv6 enforcer of an earlier
// start left.
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
	listers := netpol.Listers{Policies: polInf.Lister(), Pods: podInf.Lister(), Namespaces: nsInf.Lister()}
	enforcers := []*netpol.Enforcer{netpol.New(netpol.Config{NodeName: nc.NodeName, Logger: nc.Logger}, ipt, sets, listers)}
	switch {
	case isIPv6(nc.NodeIP) && !nc.SecondaryNodeIP.IsValid():
		// An IPv6 single-stack node: its pods have IPv6 addresses alone,
		// so the IPv6 enforcer is the only one.
		enforcers = nil
		if err := netpol.Cleanup(ipt, sets); err != nil {
			log.Warn("removing the IPv4 network policy rules of an earlier start", "err", err)
		}
		if e6 := newNetpolIPv6(nc, listers); e6 != nil {
			enforcers = append(enforcers, e6)
		}
	case isIPv6(nc.SecondaryNodeIP):
		if e6 := newNetpolIPv6(nc, listers); e6 != nil {
			enforcers = append(enforcers, e6)
		}
	default:
		if err := cleanupNetpolIPv6(); err != nil {
			log.Warn("removing the IPv6 network policy rules of an earlier dual-stack start", "err", err)
		}
	}
	h := cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) {
			for _, e := range enforcers {
				e.OnChange()
			}
		},
		UpdateFunc: func(_, _ any) {
			for _, e := range enforcers {
				e.OnChange()
			}
		},
		DeleteFunc: func(any) {
			for _, e := range enforcers {
				e.OnChange()
			}
		},
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
				for _, e := range enforcers {
					e.SetInitialized()
				}
			}
		}()
		var run sync.WaitGroup
		for _, e := range enforcers {
			run.Add(1)
			go func() {
				defer run.Done()
				e.Run(ctx)
			}()
		}
		run.Wait()
		factory.Shutdown()
	}()
	return nil
}

// newNetpolIPv6 is the IPv6 enforcer of a dual-stack node, with ip6tables
// and a netlink handle of its own; nil (logged) when the node lacks them.
func newNetpolIPv6(nc nodeContext, l netpol.Listers) *netpol.Enforcer {
	log := nc.Logger.With("component", "netpol")
	ipt6, err := iptables.NewIPv6()
	if err != nil {
		log.Warn("no ip6tables: network policies will not be enforced over IPv6 on this node", "err", err)
		return nil
	}
	sets, err := netpol.NewNetlinkSets()
	if err != nil {
		log.Warn("no ipsets: network policies will not be enforced over IPv6 on this node", "err", err)
		return nil
	}
	return netpol.New(netpol.Config{NodeName: nc.NodeName, Logger: nc.Logger, Family: corev1.IPv6Protocol}, ipt6, sets, l)
}

// cleanupNetpolIPv6 removes the IPv6 enforcer's ip6tables chains and
// KUBE-NP6-* ipsets: for a node started without IPv6, and for minikit down.
func cleanupNetpolIPv6() error {
	ipt6, err := iptables.NewIPv6()
	if err != nil {
		return nil // no ip6tables: nothing of ours in it
	}
	var sets netpol.IPSets
	if s, err := netpol.NewNetlinkSets(); err == nil {
		sets = s
	}
	return netpol.CleanupFamily(ipt6, sets, corev1.IPv6Protocol)
}
