package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minikit/minikit/internal/ctrlloop"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gwinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"
)

// NodeConfig configures a node's data plane.
type NodeConfig struct {
	Client   kubernetes.Interface
	Gateway  gwclient.Interface
	NodeName string
	// Listen opens a data port; the default listens on every address of the
	// node (as a hostNetwork proxy), where the service proxy's DNAT sends
	// LB-IP:port.
	Listen func(port int32) (net.Listener, error)
	// ListenPacket opens a UDP listener's data port; the default listens on
	// every address of the node.
	ListenPacket func(port int32) (net.PacketConn, error)
	// DialUpstream, when set, opens connections to endpoints (tests); UDP
	// sessions dial network "udp".
	DialUpstream Dialer
	Logger       *slog.Logger
}

// Node is a node's data plane: one HTTP server per TCP data port of the
// Gateways' Services (which splices the connections of TLS passthrough and
// TCP listeners itself) and one UDPRelay per UDP data port, answering from
// the current Snapshot.
type Node struct {
	cfg  NodeConfig
	log  *slog.Logger
	kube informers.SharedInformerFactory
	gw   gwinformers.SharedInformerFactory
	listers
	loop *ctrlloop.Kicked
	snap atomic.Pointer[Snapshot]

	mu      sync.Mutex // guards servers and relays
	servers map[int32]*http.Server
	relays  map[int32]*UDPRelay
}

// NewNode prepares a node's data plane; Run starts it.
func NewNode(cfg NodeConfig) (*Node, error) {
	if cfg.Client == nil || cfg.Gateway == nil {
		return nil, errors.New("gateway: clients are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Listen == nil {
		cfg.Listen = func(port int32) (net.Listener, error) { return net.Listen("tcp", ":"+strconv.Itoa(int(port))) }
	}
	if cfg.ListenPacket == nil {
		cfg.ListenPacket = func(port int32) (net.PacketConn, error) { return net.ListenPacket("udp", ":"+strconv.Itoa(int(port))) }
	}
	n := &Node{cfg: cfg, log: cfg.Logger.With("component", "gateway"), loop: ctrlloop.NewKicked(), servers: map[int32]*http.Server{}, relays: map[int32]*UDPRelay{}}
	n.kube = informers.NewSharedInformerFactory(cfg.Client, 0)
	n.gw = gwinformers.NewSharedInformerFactory(cfg.Gateway, 0)
	n.listers = newListers(n.kube, n.gw)
	n.snap.Store(&Snapshot{})
	if err := n.listers.watch(n.loop.Kick); err != nil {
		return nil, err
	}
	return n, nil
}

// Snapshot is what the data plane serves now.
func (n *Node) Snapshot() *Snapshot { return n.snap.Load() }

// Run serves until ctx ends. After its first sync it announces itself on its
// Node, so the control plane makes it an endpoint of the Gateways' Services.
func (n *Node) Run(ctx context.Context) error {
	n.kube.Start(ctx.Done())
	n.gw.Start(ctx.Done())
	defer n.kube.Shutdown()
	defer n.gw.Shutdown()
	defer n.closeAll()
	for typ, ok := range n.kube.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("gateway: cache of %v did not sync", typ)
		}
	}
	for typ, ok := range n.gw.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("gateway: cache of %v did not sync", typ)
		}
	}
	announced := false
	n.loop.Run(ctx, debounce, func(ctx context.Context) error {
		if err := n.sync(); err != nil {
			return err
		}
		if !announced {
			if err := n.announce(ctx); err != nil {
				return err
			}
			announced = true
		}
		return nil
	}, func(err error, retry time.Duration) {
		n.log.Warn("gateway data plane sync failed, retrying", "in", retry, "err", err)
	})
	return nil
}

func (n *Node) announce(ctx context.Context) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{DataPlaneAnnotation: "serving"}}})
	if _, err := n.cfg.Client.CoreV1().Nodes().Patch(ctx, n.cfg.NodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("announcing the data plane on node %s: %w", n.cfg.NodeName, err)
	}
	return nil
}

// sync builds the tables per data port, swaps the snapshot in and opens and
// closes data ports to match.
func (n *Node) sync() error {
	w, _, err := n.listers.world()
	if err != nil {
		return err
	}
	res := Compute(w)
	attached := map[int32][]Attachment{}
	ports := map[int32]int32{}
	udpPorts := map[int32]bool{}
	secure := map[int32][]ServerCert{}
	passthrough, tcp := map[int32]bool{}, map[int32]bool{}
	for _, g := range w.Gateways {
		svc := w.Services[types.NamespacedName{Namespace: g.Namespace, Name: ServiceName(g.Name)}]
		if svc == nil || svc.Labels[GatewayNameLabel] != g.Name {
			continue // the control plane has not made it yet
		}
		for _, l := range g.Spec.Listeners {
			proto := corev1.ProtocolTCP
			if l.Protocol == gatewayv1.UDPProtocolType {
				proto = corev1.ProtocolUDP
			}
			for _, p := range svc.Spec.Ports {
				if p.Port == int32(l.Port) && p.Protocol == proto {
					dp := p.TargetPort.IntVal
					if proto == corev1.ProtocolUDP {
						udpPorts[dp] = true
					} else {
						ports[dp] = p.Port
					}
					lk := ListenerKey{types.NamespacedName{Namespace: g.Namespace, Name: g.Name}, l.Name}
					attached[dp] = append(attached[dp], res.Attached[lk]...)
					switch l.Protocol {
					case gatewayv1.TCPProtocolType:
						// Spliced even when no listener on it is valid.
						tcp[dp] = true
					case gatewayv1.TLSProtocolType:
						// Spliced even when no listener on it is valid:
						// a client's connection is then closed, never
						// answered by the HTTP server.
						passthrough[dp] = true
					case gatewayv1.HTTPSProtocolType:
						// The port terminates TLS even when no listener
						// on it is valid: a client gets a failed handshake,
						// never plain HTTP on an HTTPS port.
						secure[dp] = append(secure[dp], ServerCert{Hostname: string(deref(l.Hostname, "")), Certs: res.Certificates[lk]})
					}
				}
			}
		}
	}
	tables := map[int32]*Table{}
	for dp, at := range attached {
		t, errs := BuildTable(w, at)
		for _, err := range errs {
			n.log.Warn("route match not served", "err", err)
		}
		tables[dp] = t
	}
	all, err := n.listers.slices.List(labels.Everything())
	if err != nil {
		return err
	}
	bySvc := map[types.NamespacedName][]*discoveryv1.EndpointSlice{}
	for _, s := range all {
		if name := s.Labels[discoveryv1.LabelServiceName]; name != "" {
			k := types.NamespacedName{Namespace: s.Namespace, Name: name}
			bySvc[k] = append(bySvc[k], s)
		}
	}
	n.snap.Store(&Snapshot{Tables: tables, Ports: ports, TLS: secure, Passthrough: passthrough, TCP: tcp, UDP: udpPorts,
		Endpoints: ResolveEndpoints(tables, w.Services, bySvc)})
	return errors.Join(n.serve(ports), n.serveUDP(udpPorts))
}

// serveUDP opens the UDP data ports that are new and closes those that are gone.
func (n *Node) serveUDP(ports map[int32]bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for dp, r := range n.relays {
		if !ports[dp] {
			r.Close()
			delete(n.relays, dp)
		}
	}
	for dp := range ports {
		if _, ok := n.relays[dp]; ok {
			continue
		}
		pc, err := n.cfg.ListenPacket(dp)
		if err != nil {
			errs = append(errs, fmt.Errorf("listening on UDP data port %d: %w", dp, err))
			continue
		}
		r := NewUDPRelay(UDPRelayConfig{Conn: pc, DataPort: dp, Load: n.snap.Load, Dial: n.cfg.DialUpstream, Logger: n.log})
		n.relays[dp] = r
		go func() {
			if err := r.Serve(); err != nil {
				n.log.Error("UDP data port stopped", "port", dp, "err", err)
			}
		}()
		n.log.Debug("serving UDP data port", "port", dp)
	}
	return errors.Join(errs...)
}

// serve opens the data ports that are new and closes those that are gone.
func (n *Node) serve(ports map[int32]int32) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for dp, srv := range n.servers {
		if _, ok := ports[dp]; !ok {
			srv.Close()
			delete(n.servers, dp)
		}
	}
	for dp := range ports {
		if _, ok := n.servers[dp]; ok {
			continue
		}
		ln, err := n.cfg.Listen(dp)
		if err != nil {
			errs = append(errs, fmt.Errorf("listening on data port %d: %w", dp, err))
			continue
		}
		srv := &http.Server{Handler: Handler(dp, n.snap.Load, n.cfg.DialUpstream), ReadHeaderTimeout: 60 * time.Second,
			ErrorLog: slog.NewLogLogger(n.log.Handler(), slog.LevelDebug)}
		// HTTP/1.1, and HTTP/2 with prior knowledge (h2c) for gRPC clients.
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
		n.servers[dp] = srv
		go func() {
			if err := srv.Serve(TerminateTLS(SplitPassthrough(ln, dp, n.snap.Load, n.cfg.DialUpstream, n.log), dp, n.snap.Load)); err != nil && !errors.Is(err, http.ErrServerClosed) {
				n.log.Error("data port stopped", "port", dp, "err", err)
			}
		}()
		n.log.Debug("serving data port", "port", dp)
	}
	return errors.Join(errs...)
}

func (n *Node) closeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for dp, srv := range n.servers {
		srv.Close()
		delete(n.servers, dp)
	}
	for dp, r := range n.relays {
		r.Close()
		delete(n.relays, dp)
	}
}
