package cluster

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/minikit/minikit/iptables"
	"github.com/minikit/minikit/proxy"
	"github.com/minikit/minikit/proxy/nfacct"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// proxyDebugAddr is where the proxy's debug endpoint listens inside the node's
// network namespace (kube-proxy's metrics port): /rules, /stats, /healthz and
// /metrics.
const proxyDebugAddr = "127.0.0.1:10249"

// startProxy starts the node's service proxy: informers for Services,
// EndpointSlices and this Node feed the proxier, which writes kube-proxy's
// iptables rules in the node's network namespace.
func startProxy(ctx context.Context, wg *sync.WaitGroup, nc nodeContext) error {
	log := nc.Logger.With("component", "proxy")
	ipt, err := iptables.New()
	if err != nil {
		log.Warn("no iptables: services will not work on this node", "err", err)
		return nil
	}
	cfg := proxy.Config{
		NodeName: nc.NodeName, NodeIP: nc.NodeIP, ClusterCIDR: nc.ClusterCIDR, Logger: nc.Logger,
		NFAcct: nfacct.Netlink{},
	}
	if nc.Agent != nil {
		cfg.RouteLocalnet = nc.Agent.EnsureRouteLocalnet
	}
	p, err := proxy.New(cfg, ipt)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(nc.Client, 0)
	svcInf := factory.Core().V1().Services().Informer()
	sliceInf := factory.Discovery().V1().EndpointSlices().Informer()
	nodeInf := factory.Core().V1().Nodes().Informer()
	svcInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { withObj(o, p.OnServiceUpdate) },
		UpdateFunc: func(_, o any) { withObj(o, p.OnServiceUpdate) },
		DeleteFunc: func(o any) { withObj(o, p.OnServiceDelete) },
	})
	sliceInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { withObj(o, p.OnEndpointSliceUpdate) },
		UpdateFunc: func(_, o any) { withObj(o, p.OnEndpointSliceUpdate) },
		DeleteFunc: func(o any) { withObj(o, p.OnEndpointSliceDelete) },
	})
	nodeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { withObj(o, func(n *corev1.Node) { nodeAddress(n, nc.NodeName, p) }) },
		UpdateFunc: func(_, o any) { withObj(o, func(n *corev1.Node) { nodeAddress(n, nc.NodeName, p) }) },
	})
	factory.Start(ctx.Done())

	srv := &http.Server{Handler: withProcessMetrics(p.Handler(), p.WriteMetrics), ReadHeaderTimeout: 5 * time.Second}
	if ln, err := net.Listen("tcp", proxyDebugAddr); err != nil {
		log.Warn("proxy debug endpoint not available", "addr", proxyDebugAddr, "err", err)
	} else {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("proxy debug endpoint", "err", err)
			}
		}()
	}

	wg.Add(1)
	go func() {
		defer wg.Done()
		defer srv.Close()
		go func() {
			if cache.WaitForCacheSync(ctx.Done(), svcInf.HasSynced, sliceInf.HasSynced) {
				p.SetInitialized()
			}
		}()
		p.Run(ctx)
		factory.Shutdown()
	}()
	return nil
}

// withObj calls f with o, unwrapping informer tombstones.
func withObj[T any](o any, f func(T)) {
	if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = t.Obj
	}
	if v, ok := o.(T); ok {
		f(v)
	}
}

func nodeAddress(n *corev1.Node, self string, p *proxy.Proxier) {
	if n.Name != self {
		return
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() {
				p.SetNodeIP(ip)
			}
			return
		}
	}
}
