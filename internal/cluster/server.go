// Package cluster wires minikit's components into the processes the CLI runs: the
// server (API + controllers + this node's agent) and, later, the agent. It builds
// the real dependencies, starts them in order and stops them; nothing else in
// minikit constructs a component.
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
	NodePortMin int32
	NodePortMax int32
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
	// LBPool is the LoadBalancer address pool (--lb-pool): CIDRs and
	// FIRST-LAST ranges, comma-separated; empty leaves LoadBalancer Services
	// pending.
	LBPool string
	// DNS configures this node's cluster DNS server.
	DNS DNSOptions
	// ProxyMode is the service proxy's mode: iptables (default) or nftables.
	ProxyMode ProxyMode
	// PodNetwork is how this node reaches other nodes' pods: host-gw
	// (default) or vxlan.
	PodNetwork PodNetwork

	// Datastore is where objects live: DatastoreBolt (default) or
	// DatastoreEtcd, external (Etcd) or embedded (ClusterInit, Join).
	Datastore string
	Etcd      EtcdOptions
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
	if cfg.NodePortMin != 0 {
		vcfg.NodePortMin, vcfg.NodePortMax = cfg.NodePortMin, cfg.NodePortMax
	}
	log := cfg.Logger.With("component", "server")
	host, portStr, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("parsing --listen %q: %w", cfg.Listen, err)
	}
	loopback := isLoopback(host)
	if err := cfg.checkDatastore(); err != nil {
		return nil, err
	}
	if cfg.embedded() && loopback {
		return nil, fmt.Errorf("--cluster-init and --join need --listen off loopback (got %s): the other servers join this one over TLS", cfg.Listen)
	}
	if !cfg.ServiceCIDR.IsValid() {
		cfg.ServiceCIDR = vcfg.ServiceCIDR
	}
	if !cfg.PodCIDR.IsValid() {
		cfg.PodCIDR = netip.MustParsePrefix("10.244.0.0/16")
	}
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
		hosts := append([]string{"127.0.0.1", "localhost", host}, cfg.ExtraSANs...)
		if cfg.AdvertiseAddress != "" {
			hosts = append(hosts, cfg.AdvertiseAddress)
		}
		hosts = append(hosts, localAddresses(host)...)
		// Pods reach the API as the kubernetes Service (rest.InClusterConfig
		// dials its cluster IP), and by its DNS names, as kube-apiserver's
		// certificate allows.
		hosts = append(hosts, kubernetesServiceIP(cfg.ServiceCIDR).String(), "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local")
		if creds, err = ensureTLS(cfg.DataDir, hosts); err != nil {
			return nil, fmt.Errorf("preparing TLS for %s (required when listening off loopback): %w", cfg.Listen, err)
		}
	}
	adv := cfg.AdvertiseAddress
	if adv == "" && cfg.NodeIP.IsValid() && !loopback {
		adv = cfg.NodeIP.String()
	}
	if adv == "" {
		adv = host
		if host == "" || host == "0.0.0.0" || host == "::" {
			adv = firstAddress()
		}
	}
	st, err := cfg.openDatastore(context.Background(), adv, members, log)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("listening on %s: %w", cfg.Listen, err)
	}
	port, _ := strconv.Atoi(portStr)
	if p := ln.Addr().(*net.TCPAddr).Port; p != 0 {
		port = p
	}
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
	urlHost := net.JoinHostPort(host, strconv.Itoa(port))
	if host == "" || host == "0.0.0.0" || host == "::" {
		urlHost = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
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
		s.URL = "https://" + urlHost
		go s.serve(func() error { return s.http.ServeTLS(ln, "", "") })
	} else {
		s.URL = "http://" + urlHost
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
	if host != "" && host != "0.0.0.0" && host != "::" {
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

func firstAddress() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
			return ipn.IP.String()
		}
	}
	return "127.0.0.1"
}
