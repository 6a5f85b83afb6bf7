package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/minikit/minikit/internal/apilb"
	"github.com/minikit/minikit/internal/dns"
	"github.com/minikit/minikit/internal/iptables"
	"github.com/minikit/minikit/internal/kubelet"
	"github.com/minikit/minikit/internal/kubeproxy"
	"github.com/minikit/minikit/internal/netpol"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// AgentLBPort is the loopback port where an agent with several servers
// reaches them (k3s's agents use 6444 the same way).
const AgentLBPort = 6444

// AgentConfig is the configuration of `minikit agent`, which joins a node to a server.
type AgentConfig struct {
	// ServerURL is the server's API, or several servers' comma-separated.
	ServerURL string
	Token     string
	CAFile    string
	DataDir   string
	NodeName  string
	NodeIP    netip.Addr
	Version   string
	Logger    *slog.Logger
	// ServiceCIDR and ClusterCIDR must match the server's.
	ServiceCIDR netip.Prefix
	ClusterCIDR netip.Prefix
	// DNS configures this node's cluster DNS server.
	DNS DNSConfig
	// ProxyMode is the service proxy's mode: iptables (default) or nftables.
	ProxyMode ProxyMode
	// PodNetwork is how this node reaches other nodes' pods: host-gw
	// (default) or vxlan.
	PodNetwork PodNetwork

	// SecondaryNodeIP is the node's InternalIP of the other family on a
	// dual-stack node (--node-ip v4,v6).
	SecondaryNodeIP netip.Addr
	// SecondaryClusterCIDR is the pod range of the other family on a
	// dual-stack cluster; it must match the server's.
	SecondaryClusterCIDR netip.Prefix
}

// Agent is a running `minikit agent`.
type Agent struct {
	cancel context.CancelFunc
	done   chan struct{}
	Node   *kubelet.Agent
}

// StartAgent joins this machine to the cluster at cfg.ServerURL and runs its node agent.
func StartAgent(cfg AgentConfig) (*Agent, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DataDir == "" {
		cfg.DataDir = DefaultDataDir
	}
	addrs, err := serverAddrs(cfg.ServerURL)
	if err != nil {
		return nil, err
	}
	if cfg.Token == "" {
		return nil, fmt.Errorf("a token is required to join (the server's DATA_DIR/token)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Agent{cancel: cancel, done: make(chan struct{})}
	var wg sync.WaitGroup
	server := cfg.ServerURL
	if len(addrs) > 1 {
		// Several servers: the node's clients reach them through a local
		// failover listener, as k3s agents do (apilb); every server's
		// certificate names 127.0.0.1.
		lb, err := apilb.New(addrs, nil, cfg.Logger.With("component", "apilb"))
		if err != nil {
			cancel()
			return nil, err
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(AgentLBPort)))
		if err != nil {
			cancel()
			return nil, fmt.Errorf("listening for the API servers' failover: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			lb.Serve(ctx, ln)
		}()
		server = "https://" + ln.Addr().String()
		cfg.Logger.Info("API servers behind a local failover listener", "listen", server, "servers", addrs)
	}
	rc := &rest.Config{Host: server, BearerToken: cfg.Token, QPS: 100, Burst: 200}
	if cfg.CAFile != "" {
		rc.TLSClientConfig.CAFile = cfg.CAFile
	}
	fail := func(err error) (*Agent, error) {
		cancel()
		wg.Wait()
		return nil, err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fail(err)
	}
	if err := checkJoin(client, cfg.ServerURL, cfg.Logger); err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fail(err)
	}
	nc := nodeContext{Client: client, NodeName: cfg.NodeName, NodeIP: cfg.NodeIP, SecondaryNodeIP: cfg.SecondaryNodeIP, DataDir: cfg.DataDir,
		ServiceCIDR: cfg.ServiceCIDR, ClusterCIDR: cfg.ClusterCIDR, SecondaryClusterCIDR: cfg.SecondaryClusterCIDR, Logger: cfg.Logger, Version: cfg.Version, DNS: cfg.DNS,
		ProxyMode: cfg.ProxyMode, PodNetwork: cfg.PodNetwork, RESTConfig: rc}
	if !nc.ServiceCIDR.IsValid() {
		nc.ServiceCIDR = netip.MustParsePrefix("10.96.0.0/12")
	}
	if !nc.ClusterCIDR.IsValid() {
		nc.ClusterCIDR = netip.MustParsePrefix("10.244.0.0/16")
	}
	if a.Node, err = runNode(ctx, &wg, nc, cfg.Token, nil); err != nil {
		return fail(err)
	}
	go func() { wg.Wait(); close(a.done) }()
	return a, nil
}

// serverAddrs parses --server, one https:// URL or several comma-separated,
// into the servers' host:port (443 when the URL names none).
func serverAddrs(serverURL string) ([]string, error) {
	var addrs []string
	for _, u := range strings.Split(serverURL, ",") {
		pu, err := url.Parse(strings.TrimSpace(u))
		if err != nil || pu.Scheme != "https" || pu.Host == "" || (pu.Path != "" && pu.Path != "/") {
			return nil, fmt.Errorf("--server must be an https:// URL (or several, comma-separated): agents join over TLS with a token, got %q", u)
		}
		host := pu.Host
		if pu.Port() == "" {
			host = net.JoinHostPort(pu.Hostname(), "443")
		}
		addrs = append(addrs, host)
	}
	return addrs, nil
}

// runNode starts this machine's node agent and the per-node components.
func runNode(ctx context.Context, wg *sync.WaitGroup, nc nodeContext, token string, labels map[string]string) (*kubelet.Agent, error) {
	if nc.NodeName == "" {
		nc.NodeName, _ = os.Hostname()
	}
	nc.NodeName = strings.ToLower(nc.NodeName)
	if !nc.NodeIP.IsValid() {
		nc.NodeIP, _ = netip.ParseAddr(firstAddress())
		// An IPv6 single-stack cluster: the node's first global IPv6
		// address, as the kubelet picks the node IP of the cluster's family.
		if nc.ClusterCIDR.Addr().Is6() && !nc.SecondaryClusterCIDR.IsValid() {
			if a := firstIPv6Address(); a.IsValid() {
				nc.NodeIP = a
			}
		}
	}
	ncfg := kubelet.Config{NodeName: nc.NodeName, NodeIP: nc.NodeIP, SecondaryNodeIP: nc.SecondaryNodeIP, DataDir: agentDir(nc.DataDir),
		ClusterCIDR: nc.ClusterCIDR, Labels: labels, Version: nc.Version, Client: nc.Client, Logger: nc.Logger, Token: token,
		ResolvConf: kubeletResolvConf(nc.DNS.ResolvConf), PodNetwork: string(nc.PodNetwork)}
	if !nc.DNS.Disabled {
		// Pods resolve through the cluster DNS, per their dnsPolicy, as the kubelet sets it up.
		clusterDNS, zone := ClusterDNSIP(nc.ServiceCIDR), nc.DNS.Zone
		ncfg.PodResolvConf = func(pod *corev1.Pod, hostResolv []byte) []byte {
			return dns.ResolvConf(pod, clusterDNS, zone, hostResolv)
		}
	}
	na, err := kubelet.New(ncfg)
	if err != nil {
		return nil, err
	}
	nc.Agent = na
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := na.Run(ctx); err != nil && ctx.Err() == nil {
			nc.Logger.Error("node agent stopped", "err", err)
		}
	}()
	if err := startNodeComponents(ctx, wg, nc); err != nil {
		return nil, err
	}
	return na, nil
}

// Stop stops the agent; pods keep running and are adopted by the next start.
func (a *Agent) Stop() {
	a.cancel()
	<-a.done
}

// agentDir is where a node agent keeps its state inside a data dir.
func agentDir(dataDir string) string { return dataDir + "/agent" }

// Down removes from this node everything minikit created in the kernel: pods and
// their sandboxes, cni0, host-gw routes, the VXLAN device and the agent's rules (kubelet.Down), and the
// service proxy's rules of both modes, whichever the node ran (kubeproxy.Cleanup
// for its chains, kubeproxy.CleanupNFT for its nftables table), the network policy
// chains and ipsets of both families (netpol.Cleanup, cleanupNetpolIPv6). It works from the data dir alone, also
// after a crash; run it in the node's network namespace, with minikit stopped.
func Down(dataDir string, log *slog.Logger) error {
	var errs []error
	if err := kubelet.Down(agentDir(dataDir), log, true); err != nil {
		errs = append(errs, err)
	}
	if err := removeNFTTable(log); err != nil {
		errs = append(errs, fmt.Errorf("removing the proxy's nftables table: %w", err))
	}
	if err := cleanupProxyIPv6(); err != nil {
		errs = append(errs, fmt.Errorf("removing the proxy's IPv6 rules: %w", err))
	}
	if err := cleanupNetpolIPv6(); err != nil {
		errs = append(errs, fmt.Errorf("removing the network policy IPv6 rules: %w", err))
	}
	if ipt, err := iptables.New(); err == nil {
		if err := kubeproxy.Cleanup(ipt); err != nil {
			errs = append(errs, fmt.Errorf("removing the proxy's rules: %w", err))
		}
		var sets netpol.IPSets
		if s, err := netpol.NewNetlinkSets(); err == nil {
			sets = s
		}
		if err := netpol.Cleanup(ipt, sets); err != nil {
			errs = append(errs, fmt.Errorf("removing the network policy rules: %w", err))
		}
	}
	return errors.Join(errs...)
}

// joinWait is how long checkJoin waits for a server that does not answer yet
// (an agent may start before its server); after it the agent starts anyway and
// its components keep retrying, as a kubelet does.
const joinWait = 30 * time.Second

// checkJoin makes one authenticated request before anything starts, so that
// credentials the server refuses (a wrong token, a server certificate the CA
// file does not vouch for) end `minikit agent` with a clear error instead of
// leaving it retrying for ever. A server that is not reachable yet is waited for.
func checkJoin(client kubernetes.Interface, server string, log *slog.Logger) error {
	deadline := time.Now().Add(joinWait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
		cancel()
		var unknownCA x509.UnknownAuthorityError
		var invalid x509.CertificateInvalidError
		var hostname x509.HostnameError
		var verify *tls.CertificateVerificationError
		switch {
		case err == nil || apierrors.IsNotFound(err):
			return nil
		case apierrors.IsUnauthorized(err):
			return fmt.Errorf("the server at %s refused the token (401 Unauthorized): use the server's DATA_DIR/token", server)
		case apierrors.IsForbidden(err):
			return fmt.Errorf("the server at %s refused this node (403 Forbidden): %w", server, err)
		case errors.As(err, &unknownCA) || errors.As(err, &invalid) || errors.As(err, &hostname) || errors.As(err, &verify):
			return fmt.Errorf("the server at %s is not the one the CA file vouches for (pass the server's DATA_DIR/tls/ca.crt with --ca-file): %w", server, err)
		}
		if time.Now().After(deadline) {
			log.Warn("server not answering; starting anyway, components will retry", "server", server, "err", err)
			return nil
		}
		log.Info("waiting for the server", "server", server, "err", err)
		time.Sleep(2 * time.Second)
	}
}
