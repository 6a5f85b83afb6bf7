// Package cluster wires minikit's components into the processes the CLI runs: the
// server (StartServer: the API, the controllers and the other singletons, and
// this node's per-node components) and the agent (StartAgent: a node that joins
// a server and runs only the per-node components: kubelet, service proxy,
// network policy, cluster DNS, ingress and the load balancer's announcer). It
// builds the real dependencies, starts them in order and stops them; nothing
// else in minikit constructs a component. What it decides from its
// configuration (defaults, flag checks, certificate hosts, addresses, the
// kubeconfig) is kept in pure functions, tested without root.
package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"

	"github.com/minikit/minikit/internal/apiserver"
	"github.com/minikit/minikit/internal/apiserver/validation"
	"github.com/minikit/minikit/internal/fsutil"
	"github.com/minikit/minikit/internal/kubeconfig"
	"github.com/minikit/minikit/internal/kubelet"
	"github.com/minikit/minikit/internal/leader"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// DefaultDataDir is where a server keeps its store, credentials and kubeconfig.
const DefaultDataDir = "/var/lib/minikit"

// ServerConfig is the configuration of `minikit server`.
type ServerConfig struct {
	DataDir     string
	Listen      string // host:port of the API; loopback means plain HTTP
	ServiceCIDR netip.Prefix
	// SecondaryServiceCIDR, of the other IP family, makes Services
	// dual-stack (--service-cidr's second value); zero is single-stack.
	SecondaryServiceCIDR netip.Prefix
	NodePortMin          int32
	NodePortMax          int32
	// AdvertiseAddress is the address other nodes and the kubernetes Service use.
	AdvertiseAddress string
	// ExtraSANs are added to the serving certificate.
	ExtraSANs []string
	Version   string
	Logger    *slog.Logger

	// DisableAgent runs the API and controllers only, with no node agent (no pods
	// run here, nothing touches the kernel), as k3s --disable-agent.
	DisableAgent bool
	// NodeName and NodeIP identify this machine's node; defaults are the hostname
	// and the first non-loopback IPv4 address.
	NodeName string
	NodeIP   netip.Addr
	// PodCIDR is the cluster's pod range; each node gets a /24 of it.
	PodCIDR netip.Prefix
	// SecondaryPodCIDR, of the other IP family, gives each node a podCIDR
	// of both families (--cluster-cidr's second value).
	SecondaryPodCIDR netip.Prefix
	// LBPool is the LoadBalancer address pool (--lb-pool): CIDRs and
	// FIRST-LAST ranges, comma-separated; empty leaves LoadBalancer Services
	// pending.
	LBPool string
	// DisableGatewayAPI leaves the Gateway API CRDs out (--gateway-api=false);
	// otherwise every server applies the bundle of GatewayAPIChannel ("" is
	// standard) at start, as k3s applies its bundled add-ons.
	DisableGatewayAPI bool
	GatewayAPIChannel string
	// DNS configures this node's cluster DNS server.
	DNS DNSConfig
	// ProxyMode is the service proxy's mode: iptables (default) or nftables.
	ProxyMode ProxyMode
	// PodNetwork is how this node reaches other nodes' pods: host-gw
	// (default) or vxlan.
	PodNetwork PodNetwork

	// Datastore is where objects live: DatastoreBolt (default) or
	// DatastoreEtcd, external (Etcd) or embedded (ClusterInit, Join).
	Datastore string
	Etcd      EtcdConfig
	// ClusterInit starts an HA control plane's first server: an etcd member
	// embedded in this server, which others join (k3s --cluster-init).
	ClusterInit bool
	// Join is the https:// URL of a server of an HA cluster to join, with
	// JoinToken (K10 form, DATA_DIR/server-token of that server) or a bare
	// token and JoinCAFile.
	Join       string
	JoinToken  string
	JoinCAFile string
	// LeaderElection times the election (kube-system/minikit-controller-manager)
	// that picks the one server running the cluster's singletons (controllers,
	// LoadBalancer allocator, ingress control plane); zero fields take
	// kube-controller-manager's defaults (15s/10s/2s). The identity is NodeName.
	LeaderElection leader.Timing

	// SecondaryNodeIP is this node's InternalIP of the other family on a
	// dual-stack node (--node-ip v4,v6).
	SecondaryNodeIP netip.Addr
}

// Server is a running minikit server.
type Server struct {
	cfg    ServerConfig
	cancel context.CancelFunc
	done   chan struct{}
	// cancelRequests ends long-running requests (watches, log streams) on Stop.
	cancelRequests context.CancelFunc
	Agent          *kubelet.Agent
	log            *slog.Logger
	store          *datastore
	token          string
	api            *apiserver.Server
	http           *http.Server
	listener       net.Listener
	URL            string
	Kubeconfig     string
}

// KubeconfigPath is where a server with this data dir writes its kubeconfig.
func KubeconfigPath(dataDir string) string { return filepath.Join(dataDir, "kubeconfig") }

// StartServer opens the store, starts the API and writes the kubeconfig. It returns
// once the API accepts connections.
func StartServer(cfg ServerConfig) (*Server, error) {
	plan, err := cfg.plan()
	if err != nil {
		return nil, err
	}
	vcfg, host, loopback := plan.validation, plan.host, plan.loopback
	log := cfg.Logger.With("component", "server")
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating data dir: %w", err)
	}
	members, err := cfg.joinSecrets(context.Background(), log)
	if err != nil {
		return nil, err
	}
	if cfg.Join != "" {
		// The joiner's ranges are now the cluster's.
		vcfg.ServiceCIDR = cfg.ServiceCIDR
	}
	token, err := ensureToken(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	var creds *credentials
	if !loopback {
		// Pods run host commands as root: an unauthenticated API off loopback would be
		// remote root. Off loopback, minikit always serves TLS and requires the token.
		hosts := cfg.servingHosts(host, localAddresses(host))
		if creds, err = ensureTLS(cfg.DataDir, hosts); err != nil {
			return nil, fmt.Errorf("preparing TLS for %s (required when listening off loopback): %w", cfg.Listen, err)
		}
	}
	first := firstAddress
	if cfg.ServiceCIDR.Addr().Is6() && !cfg.SecondaryServiceCIDR.IsValid() {
		// An IPv6 single-stack cluster's kubernetes Service needs an IPv6
		// endpoint.
		first = func() string {
			if a := firstIPv6Address(); a.IsValid() {
				return a.String()
			}
			return firstAddress()
		}
	}
	adv := cfg.advertiseAddress(host, loopback, first)
	st, err := cfg.openDatastore(context.Background(), adv, members, log)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("listening on %s: %w", cfg.Listen, err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	saKey, err := ensureServiceAccountKey(cfg.DataDir)
	if err != nil {
		ln.Close()
		st.Close()
		return nil, err
	}
	apiCfg := apiserver.Config{Store: st, Validation: vcfg, Logger: cfg.Logger, AdvertiseAddress: adv,
		Port: int32(port), Version: cfg.Version, ServiceAccountKey: saKey, Identity: serverNodeName(cfg.NodeName)}
	if !loopback {
		apiCfg.Token = token
	}
	apiCfg.NodeToken = token
	api, err := apiserver.New(apiCfg)
	if err != nil {
		ln.Close()
		st.Close()
		return nil, err
	}
	s := &Server{cfg: cfg, log: log, store: st, api: api, listener: ln, token: token}
	baseCtx, cancelBase := context.WithCancel(context.Background())
	s.cancelRequests = cancelBase
	// The API's own limits (header, body, idle and stream-write timeouts) bound
	// slow clients; see apiserver.Limits.
	s.http = api.HTTPServer()
	s.http.BaseContext = func(net.Listener) context.Context { return baseCtx }
	s.http.ErrorLog = slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug)
	if cfg.embedded() {
		// An HA server hands the cluster's secrets to servers that join it.
		s.http.Handler = bootstrapHandler(s.http.Handler, creds.caPEM, token, s.bootstrapData)
		path := filepath.Join(cfg.DataDir, "server-token")
		if err := fsutil.WriteFileAtomic(path, []byte(JoinToken(creds.caPEM, token)+"\n"), 0o600); err != nil {
			ln.Close()
			st.Close()
			return nil, fmt.Errorf("writing the join token: %w", err)
		}
		log.Info("other servers join with: minikit server --join https://"+net.JoinHostPort(adv, strconv.Itoa(port))+" --token-file "+path, "etcd", "embedded")
	}
	if creds != nil {
		s.http.TLSConfig = &tls.Config{Certificates: []tls.Certificate{creds.cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
		s.URL = apiURL(host, port, true)
		go s.serve(func() error { return s.http.ServeTLS(ln, "", "") })
	} else {
		s.URL = apiURL(host, port, false)
		go s.serve(func() error { return s.http.Serve(ln) })
	}
	s.Kubeconfig = KubeconfigPath(cfg.DataDir)
	var caPEM []byte
	if creds != nil {
		caPEM = creds.caPEM
	}
	if err := kubeconfig.Write(s.Kubeconfig, serverKubeconfig(s.URL, token, caPEM), 0o600, -1, -1); err != nil {
		s.Stop(context.Background())
		return nil, err
	}
	log.Info("API server listening", "url", s.URL, "kubeconfig", s.Kubeconfig, "data-dir", cfg.DataDir)
	if err := s.startComponents(token, caPEM); err != nil {
		s.Stop(context.Background())
		return nil, err
	}
	return s, nil
}

// serverPlan is what StartServer decides from its configuration alone,
// before it touches the disk or the network.
type serverPlan struct {
	host     string // --listen's host
	loopback bool   // plain HTTP without a token; anything else is TLS with one
	// validation is the API's object validation, with the configured ranges.
	validation validation.Config
}

// plan fills in cfg's defaults and checks its flags together.
func (cfg *ServerConfig) plan() (serverPlan, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DataDir == "" {
		cfg.DataDir = DefaultDataDir
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:6443"
	}
	vcfg := validation.DefaultConfig()
	if cfg.ServiceCIDR.IsValid() {
		vcfg.ServiceCIDR = cfg.ServiceCIDR
	}
	vcfg.SecondaryServiceCIDR = cfg.SecondaryServiceCIDR
	if cfg.NodePortMin != 0 {
		vcfg.NodePortMin, vcfg.NodePortMax = cfg.NodePortMin, cfg.NodePortMax
	}
	host, _, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return serverPlan{}, fmt.Errorf("parsing --listen %q: %w", cfg.Listen, err)
	}
	loopback := isLoopback(host)
	if err := cfg.checkDatastore(); err != nil {
		return serverPlan{}, err
	}
	if cfg.embedded() && loopback {
		return serverPlan{}, fmt.Errorf("--cluster-init and --join need --listen off loopback (got %s): the other servers join this one over TLS", cfg.Listen)
	}
	if !cfg.ServiceCIDR.IsValid() {
		cfg.ServiceCIDR = vcfg.ServiceCIDR
	}
	if !cfg.PodCIDR.IsValid() {
		cfg.PodCIDR = netip.MustParsePrefix("10.244.0.0/16")
	}
	return serverPlan{host: host, loopback: loopback, validation: vcfg}, nil
}

// servingHosts are the names and addresses the serving certificate must
// hold for a server listening on host: loopback, host itself, --tls-san,
// the advertise address, the machine's addresses (local, when host is a
// wildcard), and the kubernetes Service's cluster IP and DNS names, which
// pods dial (rest.InClusterConfig), as kube-apiserver's certificate allows.
func (cfg *ServerConfig) servingHosts(host string, local []string) []string {
	hosts := append([]string{"127.0.0.1", "localhost", host}, cfg.ExtraSANs...)
	if cfg.AdvertiseAddress != "" {
		hosts = append(hosts, cfg.AdvertiseAddress)
	}
	hosts = append(hosts, local...)
	return append(hosts, kubernetesServiceIP(cfg.ServiceCIDR).String(), "kubernetes", "kubernetes.default",
		"kubernetes.default.svc", "kubernetes.default.svc.cluster.local")
}

// advertiseAddress is the address other nodes, etcd peers and the
// kubernetes Service use: --advertise-address, else the node IP (off
// loopback), else the listen host, else (a wildcard) first().
func (cfg *ServerConfig) advertiseAddress(host string, loopback bool, first func() string) string {
	switch {
	case cfg.AdvertiseAddress != "":
		return cfg.AdvertiseAddress
	case cfg.NodeIP.IsValid() && !loopback:
		return cfg.NodeIP.String()
	case isWildcard(host):
		return first()
	}
	return host
}

// apiURL is the URL of the API listening on host:port; a wildcard listener
// is reached on 127.0.0.1.
func apiURL(host string, port int, tls bool) string {
	if isWildcard(host) {
		host = "127.0.0.1"
	}
	scheme := "http"
	if tls {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port))
}

func isWildcard(host string) bool { return host == "" || host == "0.0.0.0" || host == "::" }

func (s *Server) serve(fn func() error) {
	if err := fn(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.log.Error("API server stopped", "err", err)
	}
}

// Stop shuts the API down and closes the store.
func (s *Server) Stop(ctx context.Context) error {
	if s.cancel != nil {
		s.cancel()
		select {
		case <-s.done:
		case <-ctx.Done():
		}
	}
	s.cancelRequests()
	err := s.http.Shutdown(ctx)
	if cerr := s.store.Close(); err == nil {
		err = cerr
	}
	return err
}

// serverKubeconfig is the kubeconfig a server writes into its data dir, as
// k3s writes its own: cluster minikit, user minikit-admin, context minikit in
// namespace default. Off loopback (caPEM set) it carries the CA and the token
// the API then requires; on loopback the API is plain HTTP without one.
func serverKubeconfig(url, token string, caPEM []byte) *clientcmdapi.Config {
	p := kubeconfig.Params{Cluster: "minikit", User: "minikit-admin", Context: "minikit", Namespace: "default", Server: url, CA: caPEM}
	if caPEM != nil {
		p.Token = token
	}
	return kubeconfig.New(p)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// localAddresses lists the machine's addresses for the certificate when listening
// on all of them.
func localAddresses(host string) []string {
	if !isWildcard(host) {
		return nil
	}
	var out []string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			out = append(out, ipn.IP.String())
		}
	}
	return out
}

// firstIPv6Address is the machine's first global unicast IPv6 address
// (invalid when it has none).
func firstIPv6Address() netip.Addr {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() == nil && ipn.IP.IsGlobalUnicast() {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
				return ip
			}
		}
	}
	return netip.Addr{}
}

func firstAddress() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
			return ipn.IP.String()
		}
	}
	return "127.0.0.1"
}
