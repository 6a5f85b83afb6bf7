// Package etcdserver runs an embedded etcd member inside a minikit server, for HA
// control planes the way k3s does it: the first server starts a one-member cluster
// (ClusterInit), the others join it as learners and are promoted to voters once they
// have caught up. Members talk TLS with client certificates on both ports, issued
// from the minikit cluster CA, so only holders of a certificate from that CA (the
// servers) reach the data.
//
// The member's data lives in Config.DataDir: a data dir that already holds a member
// restarts that member, whatever ClusterInit and Join say. etcd's own log (info and
// up) goes to DataDir/etcd.log; warnings and errors also go to Config.Logger.
package etcdserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/minikit/minikit/internal/store"
)

// Config describes one embedded etcd member.
type Config struct {
	// Name is the member name (the node name); unique in the cluster.
	Name string
	// DataDir holds the member's data, its certificates (pki/) and etcd.log.
	DataDir string
	// AdvertiseIP is where peers (https://IP:PeerPort) and clients
	// (https://IP:ClientPort) reach this member; clients on the node also reach it
	// at https://127.0.0.1:ClientPort.
	AdvertiseIP string
	// ClientPort and PeerPort default to 2379 and 2380.
	ClientPort, PeerPort int
	// CACertPEM and CAKeyPEM are the cluster CA (an ECDSA key, "EC PRIVATE KEY" PEM);
	// the member issues its own certificates from it under DataDir/pki.
	CACertPEM, CAKeyPEM []byte
	// ClusterInit starts a new one-member cluster.
	ClusterInit bool
	// Join lists client URLs of existing members: the member is added as a learner,
	// starts, and is promoted to a voter once caught up.
	Join   []string
	Logger *slog.Logger
}

// Tuning of the embedded member.
const (
	// maxTxnOps bounds the keys one store transaction writes (etcd's default, 128, is
	// less than a namespace deletion may touch).
	maxTxnOps = 10000
	// maxRequestBytes bounds one request (etcd's default is 1.5 MiB; 10 MiB is the most it recommends).
	maxRequestBytes = 10 << 20
	// promoteEvery is how often a learner asks to be promoted until it is.
	promoteEvery = 500 * time.Millisecond
)

// Server is a running etcd member.
type Server struct {
	cfg       Config
	etcd      *embed.Etcd
	pki       *pki
	clientURL string
	closeLog  func()
	closeOnce sync.Once
	closing   *atomic.Bool // set by Close: the listeners' errors then are expected
}

func (c *Config) validate() (net.IP, error) {
	if c.Name == "" {
		return nil, errors.New("etcd member: Name is required")
	}
	if c.DataDir == "" {
		return nil, errors.New("etcd member: DataDir is required")
	}
	ip := net.ParseIP(c.AdvertiseIP)
	if ip == nil {
		return nil, fmt.Errorf("etcd member: AdvertiseIP %q is not an IP address", c.AdvertiseIP)
	}
	if c.ClientPort == 0 {
		c.ClientPort = 2379
	}
	if c.PeerPort == 0 {
		c.PeerPort = 2380
	}
	if c.ClientPort == c.PeerPort {
		return nil, fmt.Errorf("etcd member: ClientPort and PeerPort are both %d", c.ClientPort)
	}
	if c.ClusterInit && len(c.Join) > 0 {
		return nil, errors.New("etcd member: ClusterInit and Join exclude each other")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return ip, nil
}

func hostPort(ip net.IP, port int) string { return net.JoinHostPort(ip.String(), strconv.Itoa(port)) }

func mustURL(s string) url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err) // built from a parsed IP and a port
	}
	return *u
}

// hasMember says whether dataDir holds an etcd member (its write-ahead log).
func hasMember(dataDir string) bool {
	entries, err := os.ReadDir(filepath.Join(dataDir, "member", "wal"))
	return err == nil && len(entries) > 0
}

// Start starts the member and returns once it serves reads as a voting member: a
// joining member is promoted first.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	ip, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger.With("component", "etcd")
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("etcd member %q: %w", cfg.Name, err)
	}
	ips := []net.IP{ip}
	if !ip.Equal(net.IPv4(127, 0, 0, 1)) {
		ips = append(ips, net.IPv4(127, 0, 0, 1))
	}
	p, err := ensurePKI(filepath.Join(cfg.DataDir, "pki"), cfg.CACertPEM, cfg.CAKeyPEM, cfg.Name, ips)
	if err != nil {
		return nil, fmt.Errorf("etcd member %q: certificates: %w", cfg.Name, err)
	}
	peerURL := "https://" + hostPort(ip, cfg.PeerPort)
	clientURL := "https://" + hostPort(ip, cfg.ClientPort)

	ec := embed.NewConfig()
	ec.Name, ec.Dir = cfg.Name, cfg.DataDir
	ec.ListenPeerUrls = []url.URL{mustURL(peerURL)}
	ec.AdvertisePeerUrls = ec.ListenPeerUrls
	ec.ListenClientUrls = []url.URL{mustURL(clientURL)}
	if len(ips) > 1 {
		ec.ListenClientUrls = append(ec.ListenClientUrls, mustURL("https://"+hostPort(ips[1], cfg.ClientPort)))
	}
	ec.AdvertiseClientUrls = []url.URL{mustURL(clientURL)}
	ec.ClientTLSInfo.CertFile, ec.ClientTLSInfo.KeyFile = p.memberCert, p.memberKey
	ec.ClientTLSInfo.TrustedCAFile, ec.ClientTLSInfo.ClientCertAuth = p.caFile, true
	ec.PeerTLSInfo = ec.ClientTLSInfo
	ec.InitialClusterToken = "minikit"
	ec.MaxTxnOps, ec.MaxRequestBytes = maxTxnOps, maxRequestBytes
	ec.AutoCompactionRetention = "0" // off: the store compacts

	restart := hasMember(cfg.DataDir)
	var joinCli *clientv3.Client
	switch {
	case restart:
		ec.InitialCluster = cfg.Name + "=" + peerURL // the write-ahead log wins
		log.Info("restarting etcd member", "name", cfg.Name, "dataDir", cfg.DataDir)
	case cfg.ClusterInit:
		ec.ClusterState = embed.ClusterStateFlagNew
		ec.InitialCluster = cfg.Name + "=" + peerURL
		log.Info("starting a new etcd cluster", "name", cfg.Name, "peer", peerURL)
	case len(cfg.Join) > 0:
		joinCli, err = clientv3.New(clientv3.Config{Endpoints: cfg.Join, TLS: p.clientTLS.Clone(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, fmt.Errorf("etcd member %q: joining %s: %w", cfg.Name, strings.Join(cfg.Join, ","), err)
		}
		defer joinCli.Close()
		initial, err := addLearner(ctx, joinCli, cfg.Name, peerURL)
		if err != nil {
			return nil, fmt.Errorf("etcd member %q: joining %s: %w", cfg.Name, strings.Join(cfg.Join, ","), err)
		}
		ec.ClusterState = embed.ClusterStateFlagExisting
		ec.InitialCluster = initial
		log.Info("joining etcd cluster as a learner", "name", cfg.Name, "peer", peerURL, "initialCluster", initial)
	default:
		return nil, fmt.Errorf("etcd member %q: %s holds no member: set ClusterInit or Join", cfg.Name, cfg.DataDir)
	}

	closing := new(atomic.Bool)
	lg, closeLog, err := newZap(filepath.Join(cfg.DataDir, "etcd.log"), log, closing)
	if err != nil {
		return nil, fmt.Errorf("etcd member %q: log: %w", cfg.Name, err)
	}
	ec.Logger = "zap"
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	e, err := embed.StartEtcd(ec)
	if err != nil {
		closeLog()
		return nil, fmt.Errorf("etcd member %q: starting (see %s): %w", cfg.Name, filepath.Join(cfg.DataDir, "etcd.log"), err)
	}
	s := &Server{cfg: cfg, etcd: e, pki: p, clientURL: clientURL, closeLog: closeLog, closing: closing}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		s.Close()
		return nil, fmt.Errorf("etcd member %q: %w", cfg.Name, err)
	case <-e.Server.StopNotify():
		s.Close()
		return nil, fmt.Errorf("etcd member %q stopped while starting (see %s)", cfg.Name, filepath.Join(cfg.DataDir, "etcd.log"))
	case <-ctx.Done():
		s.Close()
		return nil, fmt.Errorf("etcd member %q: waiting to be ready: %w", cfg.Name, ctx.Err())
	}
	if e.Server.IsLearner() {
		if err := s.promote(ctx, log); err != nil {
			s.Close()
			return nil, err
		}
	}
	log.Info("etcd member ready", "name", cfg.Name, "client", clientURL, "leader", s.IsLeader())
	return s, nil
}

// addLearner adds this member as a learner and returns etcd's initial-cluster for it.
// A member left over from an earlier attempt with the same peer URL is reused if it
// never started, and replaced if it did (its data is gone: the data dir is empty).
func addLearner(ctx context.Context, cli *clientv3.Client, name, peerURL string) (string, error) {
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	list, err := cli.MemberList(rctx)
	if err != nil {
		return "", fmt.Errorf("listing members: %w", err)
	}
	var id uint64
	for _, m := range list.Members {
		for _, u := range m.PeerURLs {
			if u != peerURL {
				continue
			}
			if m.Name == "" && m.IsLearner {
				id = m.ID
			} else if _, err := cli.MemberRemove(rctx, m.ID); err != nil {
				return "", fmt.Errorf("removing the stale member %q at %s: %w", m.Name, peerURL, err)
			}
		}
		if m.Name == name && id != m.ID && !contains(m.PeerURLs, peerURL) {
			return "", fmt.Errorf("a member named %q already exists at %s: remove it first", name, strings.Join(m.PeerURLs, ","))
		}
	}
	members := list.Members
	if id == 0 {
		resp, err := memberAddAsLearner(ctx, cli, peerURL)
		if err != nil {
			return "", err
		}
		id, members = resp.Member.ID, resp.Members
	} else if list, err = cli.MemberList(rctx); err == nil {
		members = list.Members
	}
	var parts []string
	for _, m := range members {
		n := m.Name
		if m.ID == id {
			n = name
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, n+"="+u)
		}
	}
	return strings.Join(parts, ","), nil
}

// memberAddAsLearner adds the learner, waiting while etcd refuses for a reason that
// passes: a member that joined just now is not yet counted healthy, and only one
// learner at a time may catch up (servers joining together take turns).
func memberAddAsLearner(ctx context.Context, cli *clientv3.Client, peerURL string) (*clientv3.MemberAddResponse, error) {
	tick := time.NewTicker(promoteEvery)
	defer tick.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		resp, err := cli.MemberAddAsLearner(rctx, []string{peerURL})
		cancel()
		if err == nil {
			return resp, nil
		}
		if !errors.Is(err, rpctypes.ErrUnhealthy) && !errors.Is(err, rpctypes.ErrTooManyLearners) {
			return nil, fmt.Errorf("adding learner %s: %w", peerURL, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("adding learner %s (last answer: %v): %w", peerURL, err, ctx.Err())
		case <-tick.C:
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// promote asks the voting members to promote this learner until they do; they refuse
// until it has caught up with the leader's log.
func (s *Server) promote(ctx context.Context, log *slog.Logger) error {
	id := uint64(s.etcd.Server.MemberID())
	var voters []string
	for _, m := range s.etcd.Server.Cluster().Members() {
		if !m.IsLearner {
			voters = append(voters, m.ClientURLs...)
		}
	}
	if len(voters) == 0 {
		return fmt.Errorf("etcd member %q: no voting member to promote this learner", s.cfg.Name)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: voters, TLS: s.pki.clientTLS.Clone(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("etcd member %q: promoting: %w", s.cfg.Name, err)
	}
	defer cli.Close()
	tick := time.NewTicker(promoteEvery)
	defer tick.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		_, err := cli.MemberPromote(rctx, id)
		cancel()
		if err == nil || errors.Is(err, rpctypes.ErrMemberNotLearner) {
			log.Info("etcd learner promoted to voting member", "name", s.cfg.Name)
			return nil
		}
		log.Debug("etcd learner not promoted yet", "name", s.cfg.Name, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd member %q: waiting to be promoted from learner (last answer: %v): %w", s.cfg.Name, err, ctx.Err())
		case <-s.etcd.Server.StopNotify():
			return fmt.Errorf("etcd member %q stopped while waiting to be promoted (see %s)", s.cfg.Name, filepath.Join(s.cfg.DataDir, "etcd.log"))
		case <-tick.C:
		}
	}
}

// ClientURL is this member's advertised client URL.
func (s *Server) ClientURL() string { return s.clientURL }

// StoreConfig is how a store reaches the cluster: every voting member's client URL,
// this member's first, and this member's client certificate.
func (s *Server) StoreConfig() store.EtcdConfig {
	eps := []string{s.clientURL}
	for _, m := range s.etcd.Server.Cluster().Members() {
		if m.IsLearner {
			continue
		}
		for _, u := range m.ClientURLs {
			if u != s.clientURL {
				eps = append(eps, u)
			}
		}
	}
	return store.EtcdConfig{
		Endpoints: eps,
		CAFile:    s.pki.caFile, CertFile: s.pki.clientCert, KeyFile: s.pki.clientKey,
		TLS:    s.pki.clientTLS.Clone(),
		Logger: s.cfg.Logger, MaxTxnOps: maxTxnOps, MaxRequestBytes: maxRequestBytes,
	}
}

// ClientTLS is the client TLS configuration for this cluster (minikit's certificate).
func (s *Server) ClientTLS() *tls.Config { return s.pki.clientTLS.Clone() }

// IsLeader says whether this member is the raft leader now.
func (s *Server) IsLeader() bool {
	return s.etcd.Server.Leader() == s.etcd.Server.MemberID()
}

// Close stops the member; it stays in the cluster (RemoveMember takes it out).
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.closing.Store(true)
		s.etcd.Close()
		s.closeLog()
	})
	return nil
}

// RemoveMember removes the member called name from the cluster cfg reaches. A removed
// member's data dir cannot be restarted: delete it before joining again.
func RemoveMember(ctx context.Context, cfg store.EtcdConfig, name string) error {
	cli, err := store.NewEtcdClient(cfg)
	if err != nil {
		return fmt.Errorf("removing etcd member %q: %w", name, err)
	}
	defer cli.Close()
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	list, err := cli.MemberList(rctx)
	if err != nil {
		return fmt.Errorf("removing etcd member %q: listing members at %s: %w", name, strings.Join(cfg.Endpoints, ","), err)
	}
	for _, m := range list.Members {
		if m.Name == name {
			if _, err := cli.MemberRemove(rctx, m.ID); err != nil {
				return fmt.Errorf("removing etcd member %q: %w", name, err)
			}
			return nil
		}
	}
	return fmt.Errorf("removing etcd member %q: %w", name, store.ErrNotFound)
}
