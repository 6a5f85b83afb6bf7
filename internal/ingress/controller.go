// Package ingress is minikit's Ingress controller, laid out as ingress-nginx on
// bare metal: a controller on every node, and in the API a NodePort Service
// ingress-nginx/ingress-nginx-controller (ports 80 and 443) whose endpoints are
// those controllers. A client reaches any node's NodePort, the service proxy
// DNATs the connection to one node's controller, and that controller matches
// the Ingress rules and proxies straight to a ready endpoint of the backend
// Service (not its ClusterIP) — the chapter's path, hop by hop.
//
// The controllers listen on the node's ports 10080 and 10443 (DefaultHTTPPort,
// DefaultHTTPSPort), as a hostNetwork ingress-nginx started with --http-port
// and --https-port: the node's ports 80 and 443 stay free, as on a kubeadm or
// kind node, where the ingress-nginx pod listens in its own network namespace
// and nothing holds them, so a hostNetwork pod can serve on port 80.
//
// The package has two halves that meet only through the API:
//   - Node (every node): watches Ingresses, IngressClasses, Services,
//     EndpointSlices and Secrets, builds the configuration (package config) on
//     every change and swaps it into the proxy (package httpproxy) atomically, writes
//     the equivalent nginx.conf (package nginxconf) under its directory, and
//     announces its listeners on its Node object.
//   - Server (control plane): creates the ingress-nginx namespace, the default
//     IngressClass "nginx" and the Service; keeps the Service's Endpoints and
//     EndpointSlices equal to the announced listeners of Ready nodes; writes
//     status.loadBalancer.ingress on the Ingresses of its class.
package ingress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/minikit/minikit/internal/fsutil"
	"github.com/minikit/minikit/internal/informer"
	"github.com/minikit/minikit/internal/ingress/config"
	"github.com/minikit/minikit/internal/ingress/httpproxy"
	"github.com/minikit/minikit/internal/ingress/nginxconf"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
)

// ListenersAnnotation is set by a node's controller on its Node: the ports it
// serves ("http=80,https=443"). The control plane turns it into endpoints.
const ListenersAnnotation = "ingress.minikit.io/listeners"

// DefaultHTTPPort and DefaultHTTPSPort are the node ports a controller listens
// on unless told: not 80 and 443, which a node leaves to its hostNetwork pods
// (the package comment says why).
const (
	DefaultHTTPPort  = 10080
	DefaultHTTPSPort = 10443
)

// servicePortHTTP and servicePortHTTPS are the ports of the
// ingress-nginx-controller Service: what a load balancer in front of the
// controllers exposes, and so where HTTPS redirects send clients.
const (
	servicePortHTTP  = 80
	servicePortHTTPS = 443
)

// debounce is how long a sync waits for more changes after the first one;
// maxDelay bounds how long a burst of changes can postpone it.
const (
	debounce = 20 * time.Millisecond
	maxDelay = 200 * time.Millisecond
)

// ControllerConfig configures a node's controller.
type ControllerConfig struct {
	Client   kubernetes.Interface
	NodeName string
	NodeIP   netip.Addr
	// HTTPPort and HTTPSPort are the node ports the controller listens on (all
	// addresses, as a hostNetwork ingress-nginx pod); 0 means DefaultHTTPPort
	// and DefaultHTTPSPort.
	HTTPPort, HTTPSPort int
	// HTTPListener and HTTPSListener, when set, are used instead of binding the
	// ports (tests); the ports announced are theirs.
	HTTPListener, HTTPSListener net.Listener
	// Dir receives nginx.conf (conf/nginx.conf) and its certificates; "" writes none.
	Dir    string
	Class  config.Class
	Logger *slog.Logger
	// Proxy tunes the data plane; its HTTPSPort (the port of HTTPS redirects)
	// defaults to 443, the Service's https port that clients are sent to.
	Proxy httpproxy.Config
}

// Controller is one node's Ingress controller (ingress-nginx's controller pod).
type Controller struct {
	cfg   ControllerConfig
	log   *slog.Logger
	proxy *httpproxy.Proxy
	certs struct{ cert, key []byte }

	factory informers.SharedInformerFactory
	ings    networkinglisters.IngressLister
	classes networkinglisters.IngressClassLister
	svcs    corelisters.ServiceLister
	slices  discoverylisters.EndpointSliceLister
	secrets corelisters.SecretLister

	kick     chan struct{}
	ready    chan struct{}
	lastConf []byte
}

// NewController prepares a node's controller; Run starts it.
func NewController(cfg ControllerConfig) (*Controller, error) {
	if cfg.Client == nil || cfg.NodeName == "" {
		return nil, errors.New("ingress: a client and a node name are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HTTPListener != nil && cfg.HTTPSListener != nil {
		cfg.HTTPPort = cfg.HTTPListener.Addr().(*net.TCPAddr).Port
		cfg.HTTPSPort = cfg.HTTPSListener.Addr().(*net.TCPAddr).Port
	}
	if cfg.HTTPPort == 0 {
		cfg.HTTPPort = DefaultHTTPPort
	}
	if cfg.HTTPSPort == 0 {
		cfg.HTTPSPort = DefaultHTTPSPort
	}
	if cfg.Class == (config.Class{}) {
		cfg.Class = config.DefaultClass
	}
	n := &Controller{cfg: cfg, log: cfg.Logger.With("component", "ingress", "node", cfg.NodeName),
		kick: make(chan struct{}, 1), ready: make(chan struct{})}
	pair, certPEM, keyPEM, err := httpproxy.NewFakeCertificate()
	if err != nil {
		return nil, err
	}
	n.certs.cert, n.certs.key = certPEM, keyPEM
	popts := cfg.Proxy
	popts.Logger = n.log
	popts.DefaultCertificate = &pair
	popts.HSTS = true
	if popts.HTTPSPort == 0 {
		popts.HTTPSPort = servicePortHTTPS
	}
	n.cfg.Proxy.HTTPSPort = popts.HTTPSPort
	if n.proxy, err = httpproxy.New(popts); err != nil {
		return nil, err
	}
	n.factory = informers.NewSharedInformerFactory(cfg.Client, 0)
	n.ings = n.factory.Networking().V1().Ingresses().Lister()
	n.classes = n.factory.Networking().V1().IngressClasses().Lister()
	n.svcs = n.factory.Core().V1().Services().Lister()
	n.slices = n.factory.Discovery().V1().EndpointSlices().Lister()
	n.secrets = n.factory.Core().V1().Secrets().Lister()
	if err := informer.AddHandler(informer.OnChange(n.trigger),
		n.factory.Networking().V1().Ingresses().Informer(),
		n.factory.Networking().V1().IngressClasses().Informer(),
		n.factory.Core().V1().Services().Informer(),
		n.factory.Discovery().V1().EndpointSlices().Informer(),
		n.factory.Core().V1().Secrets().Informer(),
	); err != nil {
		return nil, err
	}
	return n, nil
}

// Proxy is the node's data plane (for tests).
func (n *Controller) Proxy() *httpproxy.Proxy { return n.proxy }

// Ready is closed once the first configuration is served and the listeners
// are announced.
func (n *Controller) Ready() <-chan struct{} { return n.ready }

func (n *Controller) trigger() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// Run serves until ctx ends, then withdraws the node's listeners from the API
// and drains the connections in flight.
func (n *Controller) Run(ctx context.Context) error {
	n.factory.Start(ctx.Done())
	if err := informer.WaitForSync(ctx, n.factory); err != nil {
		return fmt.Errorf("ingress: %w", err)
	}
	n.sync()
	var wg sync.WaitGroup
	lns, err := n.listen(ctx)
	if err != nil {
		return err
	}
	for i, ln := range lns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			serve := n.proxy.Serve
			if i == 1 {
				serve = n.proxy.ServeTLS
			}
			if err := serve(ln); err != nil && ctx.Err() == nil {
				n.log.Error("ingress listener stopped", "addr", ln.Addr(), "err", err)
			}
		}()
	}
	announcer := make(chan struct{})
	go func() {
		defer close(announcer)
		n.keepAnnounced(ctx)
	}()
	close(n.ready)
	n.log.Info("ingress controller serving", "http", n.cfg.HTTPPort, "https", n.cfg.HTTPSPort)
	n.loop(ctx)
	<-announcer

	// Withdraw first, so the service proxy stops sending new connections here,
	// then let requests in flight finish.
	wctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	n.announce(wctx, false)
	cancel()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = n.proxy.Shutdown(sctx)
	wg.Wait()
	n.factory.Shutdown()
	return err
}

// listen binds the HTTP and HTTPS ports, retrying while they are taken (another
// web server on the machine) until ctx ends.
func (n *Controller) listen(ctx context.Context) ([]net.Listener, error) {
	if n.cfg.HTTPListener != nil && n.cfg.HTTPSListener != nil {
		return []net.Listener{n.cfg.HTTPListener, n.cfg.HTTPSListener}, nil
	}
	addrs := []string{":" + strconv.Itoa(n.cfg.HTTPPort), ":" + strconv.Itoa(n.cfg.HTTPSPort)}
	var lns []net.Listener
	for _, a := range addrs {
		for {
			ln, err := net.Listen("tcp", a)
			if err == nil {
				lns = append(lns, ln)
				break
			}
			n.log.Warn("cannot listen for ingress traffic, retrying", "addr", a, "err", err)
			select {
			case <-ctx.Done():
				for _, l := range lns {
					l.Close()
				}
				return nil, ctx.Err()
			case <-time.After(5 * time.Second):
			}
		}
	}
	return lns, nil
}

// loop syncs after every burst of changes until ctx ends.
func (n *Controller) loop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.kick:
		}
		deadline := time.After(maxDelay)
	burst:
		for {
			select {
			case <-ctx.Done():
				return
			case <-n.kick:
			case <-time.After(debounce):
				break burst
			case <-deadline:
				break burst
			}
		}
		n.sync()
	}
}

// sync builds the configuration from the caches and serves it.
func (n *Controller) sync() {
	start := time.Now()
	in := config.Input{Class: n.cfg.Class}
	var err error
	if in.Ingresses, err = n.ings.List(labels.Everything()); err != nil {
		n.log.Error("listing ingresses", "err", err)
		return
	}
	in.IngressClasses, _ = n.classes.List(labels.Everything())
	in.Services, _ = n.svcs.List(labels.Everything())
	in.EndpointSlices, _ = n.slices.List(labels.Everything())
	in.Secrets, _ = n.secrets.List(labels.Everything())
	cfg := config.Build(in)
	prev := n.proxy.Config()
	n.proxy.Update(cfg)
	n.logChanges(prev, cfg)
	n.log.Debug("synced", "ingresses", len(cfg.Ingresses), "servers", len(cfg.Servers), "upstreams", len(cfg.Upstreams),
		"problems", len(cfg.Problems), "duration", time.Since(start))
	if err := n.writeConf(cfg); err != nil {
		n.log.Warn("writing nginx.conf", "err", err)
	}
}

// logChanges logs what a sync changed for traffic: upstreams whose endpoints
// changed, and configuration problems that are new.
func (n *Controller) logChanges(prev, cur *config.Config) {
	before := map[string][]string{}
	for _, up := range prev.Upstreams {
		before[up.Name] = up.Endpoints
	}
	for _, up := range cur.Upstreams {
		if old, ok := before[up.Name]; !ok || !slices.Equal(old, up.Endpoints) {
			n.log.Info("upstream endpoints", "upstream", up.Name, "endpoints", up.Endpoints)
		}
	}
	seen := map[string]bool{}
	for _, p := range prev.Problems {
		seen[p] = true
	}
	for _, p := range cur.Problems {
		if !seen[p] {
			n.log.Warn("ingress configuration problem", "problem", p)
		}
	}
}

// writeConf renders the nginx.conf of cfg into the node's directory when it
// changed, so `cat DIR/conf/nginx.conf` shows what the node serves.
func (n *Controller) writeConf(cfg *config.Config) error {
	if n.cfg.Dir == "" {
		return nil
	}
	out, err := nginxconf.Render(cfg, nginxconf.Config{
		Listen: strconv.Itoa(n.cfg.HTTPPort), ListenTLS: strconv.Itoa(n.cfg.HTTPSPort), HTTPSPort: n.cfg.Proxy.HTTPSPort,
		Prefix: n.cfg.Dir, Daemon: true, DefaultCertPEM: n.certs.cert, DefaultKeyPEM: n.certs.key,
	})
	if err != nil {
		return err
	}
	conf := out.Files[nginxconf.ConfFile]
	if bytes.Equal(conf, n.lastConf) {
		return nil
	}
	for _, d := range []string{"conf", "certs", "logs", "temp"} {
		if err := os.MkdirAll(filepath.Join(n.cfg.Dir, d), 0o700); err != nil {
			return err
		}
	}
	for name, data := range out.Files {
		if err := fsutil.WriteFileAtomic(filepath.Join(n.cfg.Dir, name), data, 0o600); err != nil {
			return err
		}
	}
	n.lastConf = conf
	return nil
}

// keepAnnounced keeps the listeners annotation on the node's Node (which the
// node agent may register after this starts, or which may be recreated) until
// ctx ends.
func (n *Controller) keepAnnounced(ctx context.Context) {
	want := fmt.Sprintf("http=%d,https=%d", n.cfg.HTTPPort, n.cfg.HTTPSPort)
	for {
		node, err := n.cfg.Client.CoreV1().Nodes().Get(ctx, n.cfg.NodeName, metav1.GetOptions{})
		if err == nil && node.Annotations[ListenersAnnotation] != want {
			n.announce(ctx, true)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(announceEvery(err)):
		}
	}
}

func announceEvery(err error) time.Duration {
	if err != nil {
		return 500 * time.Millisecond
	}
	return 10 * time.Second
}

// announce sets (or removes) the listeners annotation on the node's Node.
func (n *Controller) announce(ctx context.Context, on bool) {
	value := fmt.Sprintf("http=%d,https=%d", n.cfg.HTTPPort, n.cfg.HTTPSPort)
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, ListenersAnnotation, value))
	if !on {
		patch = []byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, ListenersAnnotation))
	}
	for {
		_, err := n.cfg.Client.CoreV1().Nodes().Patch(ctx, n.cfg.NodeName, types.MergePatchType, patch, metav1.PatchOptions{})
		if err == nil {
			return
		}
		if !on && apierrors.IsNotFound(err) {
			return
		}
		n.log.Debug("announcing ingress listeners", "err", err)
		select {
		case <-ctx.Done():
			n.log.Warn("could not update the ingress listeners annotation", "on", on, "err", err)
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Listeners parses the listeners annotation of a node: its HTTP and HTTPS ports.
func Listeners(node *corev1.Node) (httpPort, httpsPort int32, ok bool) {
	v, found := node.Annotations[ListenersAnnotation]
	if !found {
		return 0, 0, false
	}
	var h, s int32
	if _, err := fmt.Sscanf(v, "http=%d,https=%d", &h, &s); err != nil || h <= 0 || s <= 0 || h > 65535 || s > 65535 {
		return 0, 0, false
	}
	return h, s, true
}
