package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"

	"github.com/minikit/minikit/internal/controllers"
	"github.com/minikit/minikit/internal/kubelet"
	"github.com/minikit/minikit/internal/leader"
	"github.com/minikit/minikit/internal/loadbalancer"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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
	Agent       *kubelet.Agent
	Logger      *slog.Logger
	Version     string
	// DNS configures the node's cluster DNS server.
	DNS DNSConfig
	// ProxyMode is the service proxy's mode ("" is iptables).
	ProxyMode ProxyMode
	// PodNetwork is the node's pod network ("" is host-gw).
	PodNetwork PodNetwork

	// SecondaryNodeIP is the node's InternalIP of the other family (dual-stack).
	SecondaryNodeIP netip.Addr
	// SecondaryClusterCIDR is the pod network's range of the other family
	// (dual-stack), for that family's proxier (kube-proxy's --cluster-cidr
	// takes one range per family).
	SecondaryClusterCIDR netip.Prefix
	// RESTConfig is Client's configuration, for clients of other API groups.
	RESTConfig *rest.Config
}

// startNodeComponents starts what runs on every node next to its agent. Each
// start function runs its component until ctx ends, accounted in wg.
func startNodeComponents(ctx context.Context, wg *sync.WaitGroup, nc nodeContext) error {
	for _, start := range []func(context.Context, *sync.WaitGroup, nodeContext) error{startProxy, startNetpol, startIngressNode, startLoadBalancerNode, startGatewayNode} {
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
	// RESTConfig is Client's configuration, for clients of other API groups.
	RESTConfig *rest.Config
	// GatewayAPI is whether the Gateway API bundle is installed (and its
	// controller runs).
	GatewayAPI bool
	// DNS renders the coredns add-on's Corefile.
	DNS DNSConfig
	// LoopbackAPI is the API's URL when it listens on loopback only (plain
	// HTTP, no token); "" when it is TLS with a token. It decides where the
	// coredns pods run (see coreDNSObjects).
	LoopbackAPI string
}

// startServerComponents starts control-plane components beyond the core controllers.
func startServerComponents(ctx context.Context, wg *sync.WaitGroup, sc serverContext) error {
	for _, start := range []func(context.Context, *sync.WaitGroup, serverContext) error{startCoreDNSAddon, startIngressServer, startLoadBalancerServer, startGatewayServer} {
		if err := start(ctx, wg, sc); err != nil {
			return err
		}
	}
	return nil
}

// startComponents starts what runs next to the API, as clients of it like
// every other component. On every server: this server's identity lease and
// the default/kubernetes endpoints it keeps (apiserver.RunEndpointReconciler)
// and, unless disabled, this node's agent with its per-node components. On
// the one server holding the kube-system/minikit-controller-manager lease
// (package leader): the cluster's singletons, runSingletons. A server alone
// wins the lease on its first try, so it runs everything, as before HA.
func (s *Server) startComponents(token string, caPEM []byte) error {
	if err := s.cfg.LeaderElection.Validate(); err != nil {
		return err
	}
	rc := &rest.Config{Host: s.URL, QPS: 200, Burst: 400}
	if caPEM != nil {
		rc.BearerToken, rc.TLSClientConfig.CAData = token, caPEM
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	md, err := controllers.NewMetadataClient(rc)
	if err != nil {
		return err
	}
	podCIDR := s.cfg.PodCIDR
	if !podCIDR.IsValid() {
		podCIDR = netip.MustParsePrefix("10.244.0.0/16")
	}
	svcCIDR := s.cfg.ServiceCIDR
	if !svcCIDR.IsValid() {
		svcCIDR = netip.MustParsePrefix("10.96.0.0/12")
	}
	sc := serverContext{Client: client, DataDir: s.cfg.DataDir, ServiceCIDR: svcCIDR,
		ClusterCIDR: podCIDR, Logger: s.cfg.Logger, Version: s.cfg.Version, LBPool: s.cfg.LBPool,
		RESTConfig: rc, GatewayAPI: !s.cfg.DisableGatewayAPI, DNS: s.cfg.DNS}
	if caPEM == nil {
		sc.LoopbackAPI = s.URL
	}
	// Configuration errors of the singletons fail the start, on every server,
	// rather than a later term of the one that wins the lease.
	if _, err := loadbalancer.ParsePool(sc.LBPool); err != nil {
		return fmt.Errorf("--lb-pool: %w", err)
	}
	if err := installGatewayAPI(rc, s.cfg); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := s.api.RunEndpointReconciler(ctx); err != nil {
			s.log.Error("API endpoint reconciler stopped", "err", err)
		}
	}()
	identity := serverNodeName(s.cfg.NodeName)
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := leader.Run(ctx, leader.Config{Client: client, Identity: identity, Timing: s.cfg.LeaderElection, Logger: s.cfg.Logger},
			func(lctx context.Context) {
				runSingletons(lctx, sc, controllers.Config{PodCIDR: podCIDR, SecondaryPodCIDR: s.cfg.SecondaryPodCIDR, RootCA: caPEM, Metadata: md})
			})
		if err != nil {
			s.log.Error("leader election stopped", "err", err)
		}
	}()
	if !s.cfg.DisableAgent {
		nc := nodeContext{Client: client, NodeName: s.cfg.NodeName, NodeIP: s.cfg.NodeIP, SecondaryNodeIP: s.cfg.SecondaryNodeIP, DataDir: s.cfg.DataDir,
			ServiceCIDR: svcCIDR, ClusterCIDR: podCIDR, SecondaryClusterCIDR: s.cfg.SecondaryPodCIDR, Logger: s.cfg.Logger, Version: s.cfg.Version, DNS: s.cfg.DNS,
			ProxyMode: s.cfg.ProxyMode, PodNetwork: s.cfg.PodNetwork, RESTConfig: rc}
		agent, err := runNode(ctx, &wg, nc, token, map[string]string{"node-role.kubernetes.io/control-plane": ""})
		if err != nil {
			// Stop (which the caller runs next) waits for done.
			cancel()
			wg.Wait()
			close(s.done)
			return err
		}
		s.Agent = agent
		s.api.SetLocalAgent(agent.Kubelet())
	}
	go func() { wg.Wait(); close(s.done) }()
	return nil
}

// runSingletons runs the components of which the cluster runs one — the
// controllers, the ingress control plane, the LoadBalancer allocator — for
// one term of leadership: until ctx ends, and until every one has returned.
// Each term builds them anew: they rebuild their state from the API.
func runSingletons(ctx context.Context, sc serverContext, opts controllers.Config) {
	var wg sync.WaitGroup
	ctrl := controllers.New(sc.Client, sc.Logger, opts)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := ctrl.Run(ctx); err != nil && ctx.Err() == nil {
			sc.Logger.Error("controllers stopped", "component", "server", "err", err)
		}
	}()
	if err := startServerComponents(ctx, &wg, sc); err != nil {
		sc.Logger.Error("starting control-plane components", "component", "server", "err", err)
	}
	<-ctx.Done()
	wg.Wait()
}

// serverNodeName is the server's node name as the agent registers it (a
// server without an agent has one too: its identity among the servers).
func serverNodeName(name string) string {
	if name == "" {
		name, _ = os.Hostname()
	}
	return strings.ToLower(name)
}
