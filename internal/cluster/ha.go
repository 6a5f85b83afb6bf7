package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/minikit/minikit/internal/etcdserver"
	"github.com/minikit/minikit/internal/store"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// Datastores a server keeps its objects in.
const (
	// DatastoreBolt is one bbolt file in the data dir (the default).
	DatastoreBolt = "bolt"
	// DatastoreEtcd is an etcd cluster: external (--etcd-endpoints) or
	// embedded in the servers (--cluster-init, --join).
	DatastoreEtcd = "etcd"
)

// EtcdConfig names an external etcd and the client certificate minikit
// presents to it (kube-apiserver's --etcd-servers, --etcd-cafile,
// --etcd-certfile, --etcd-keyfile).
type EtcdConfig struct {
	Endpoints                 []string
	CAFile, CertFile, KeyFile string
}

// datastore is the store a server runs on and what must stop with it.
type datastore struct {
	store.Interface
	etcd *etcdserver.Server // the embedded member, if any
}

func (d *datastore) Close() error {
	err := d.Interface.Close()
	if d.etcd != nil {
		err = errors.Join(err, d.etcd.Close())
	}
	return err
}

// embedded reports whether the server runs an etcd member of its own.
func (c *ServerConfig) embedded() bool { return c.ClusterInit || c.Join != "" }

// checkDatastore validates the datastore flags together.
func (c *ServerConfig) checkDatastore() error {
	switch c.Datastore {
	case "", DatastoreBolt:
		if len(c.Etcd.Endpoints) > 0 {
			return errors.New("--etcd-endpoints needs --datastore etcd")
		}
	case DatastoreEtcd:
		if len(c.Etcd.Endpoints) == 0 && !c.embedded() {
			return errors.New("--datastore etcd needs --etcd-endpoints (an external etcd) or --cluster-init / --join (an etcd embedded in the servers)")
		}
	default:
		return fmt.Errorf("--datastore: unsupported value %q: supported values: %q, %q", c.Datastore, DatastoreBolt, DatastoreEtcd)
	}
	if c.ClusterInit && c.Join != "" {
		return errors.New("--cluster-init starts a new cluster and --join joins one: give one of them")
	}
	if c.embedded() && len(c.Etcd.Endpoints) > 0 {
		return errors.New("--etcd-endpoints names an external etcd; --cluster-init and --join run one embedded in the servers: give one of them")
	}
	if c.Join == "" && c.JoinToken != "" {
		return errors.New("--token is the cluster's join token: it needs --join")
	}
	for _, e := range c.Etcd.Endpoints {
		if !strings.HasPrefix(e, "https://") && !strings.HasPrefix(e, "http://") {
			return fmt.Errorf("--etcd-endpoints: %q is not an http:// or https:// URL", e)
		}
	}
	return nil
}

// memberDir is where an embedded etcd member keeps its data.
func memberDir(dataDir string) string { return filepath.Join(dataDir, "etcd") }

// hasMember reports whether dataDir already holds an etcd member (a server of
// an HA cluster restarting), which rejoins with its own data.
func hasMember(dataDir string) bool {
	wal, err := os.ReadDir(filepath.Join(memberDir(dataDir), "member", "wal"))
	return err == nil && len(wal) > 0
}

// joinSecrets fetches the cluster's shared secrets before a joining server
// prepares its credentials, and returns the etcd members to join through.
// A server that already holds a member needs none.
func (c *ServerConfig) joinSecrets(ctx context.Context, log *slog.Logger) ([]string, error) {
	if c.Join == "" || hasMember(c.DataDir) {
		return nil, nil
	}
	d, _, err := fetchBootstrap(ctx, c.Join, c.JoinToken, c.JoinCAFile)
	if err != nil {
		return nil, err
	}
	for _, r := range []struct {
		flag string
		mine *netip.Prefix
		its  string
	}{{"--service-cidr", &c.ServiceCIDR, d.ServiceCIDR}, {"--cluster-cidr", &c.PodCIDR, d.PodCIDR}} {
		if r.its == "" {
			continue
		}
		p, err := netip.ParsePrefix(r.its)
		if err != nil {
			return nil, fmt.Errorf("the cluster's %s %q: %w", r.flag, r.its, err)
		}
		if r.mine.IsValid() && *r.mine != p {
			return nil, fmt.Errorf("%s %s differs from the cluster's %s", r.flag, *r.mine, p)
		}
		*r.mine = p
	}
	if err := writeBootstrap(c.DataDir, d); err != nil {
		return nil, err
	}
	log.Info("fetched the cluster's CA, service-account key and token", "from", c.Join, "etcdMembers", d.EtcdMembers)
	return d.EtcdMembers, nil
}

// openDatastore opens the server's store: bbolt, an external etcd, or an
// embedded etcd member started (or joined) here. advertise is the address
// the member's peers and clients use.
func (c *ServerConfig) openDatastore(ctx context.Context, advertise string, members []string, log *slog.Logger) (*datastore, error) {
	switch {
	case c.embedded():
		caPEM, err := os.ReadFile(filepath.Join(c.DataDir, "tls", "ca.crt"))
		if err != nil {
			return nil, fmt.Errorf("an embedded etcd needs the cluster CA: %w", err)
		}
		caKey, err := os.ReadFile(filepath.Join(c.DataDir, "tls", "ca.key"))
		if err != nil {
			return nil, fmt.Errorf("an embedded etcd needs the cluster CA's key: %w", err)
		}
		ecfg := etcdserver.Config{Name: serverNodeName(c.NodeName), DataDir: memberDir(c.DataDir), AdvertiseIP: advertise,
			CACertPEM: caPEM, CAKeyPEM: caKey, ClusterInit: c.ClusterInit, Join: members, Logger: c.Logger}
		member, err := startMember(ctx, ecfg, log)
		if err != nil {
			return nil, fmt.Errorf("starting the embedded etcd: %w", err)
		}
		scfg := member.StoreConfig()
		scfg.Logger = c.Logger
		st, err := store.OpenEtcd(ctx, scfg)
		if err != nil {
			member.Close()
			return nil, err
		}
		log.Info("datastore: embedded etcd", "member", ecfg.Name, "endpoints", scfg.Endpoints)
		return &datastore{Interface: st, etcd: member}, nil
	case c.Datastore == DatastoreEtcd:
		st, err := store.OpenEtcd(ctx, store.EtcdConfig{Endpoints: c.Etcd.Endpoints, CAFile: c.Etcd.CAFile,
			CertFile: c.Etcd.CertFile, KeyFile: c.Etcd.KeyFile, Logger: c.Logger})
		if err != nil {
			return nil, err
		}
		log.Info("datastore: etcd", "endpoints", c.Etcd.Endpoints)
		return &datastore{Interface: st}, nil
	default:
		st, err := store.OpenBolt(filepath.Join(c.DataDir, "minikit.db"), 0)
		if err != nil {
			return nil, err
		}
		return &datastore{Interface: st}, nil
	}
}

// joinRetry bounds how long a joining member waits for the cluster to accept
// it: etcd refuses a new member while one added just before is not yet
// healthy, and holds one learner at a time, so servers started together
// join one after the other.
const joinRetry = 2 * time.Minute

func startMember(ctx context.Context, cfg etcdserver.Config, log *slog.Logger) (*etcdserver.Server, error) {
	deadline := time.Now().Add(joinRetry)
	for {
		m, err := etcdserver.Start(ctx, cfg)
		if err == nil || len(cfg.Join) == 0 || time.Now().After(deadline) ||
			!(errors.Is(err, rpctypes.ErrUnhealthy) || errors.Is(err, rpctypes.ErrTooManyLearners)) {
			return m, err
		}
		log.Info("the etcd cluster cannot take a member yet; retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// bootstrapData is what this server hands a joining one.
func (s *Server) bootstrapData() (bootstrapData, error) {
	d := bootstrapData{Token: s.token, ServiceCIDR: s.cfg.ServiceCIDR.String(), PodCIDR: s.cfg.PodCIDR.String()}
	for _, f := range []struct {
		dst  *string
		path string
	}{{&d.CACert, filepath.Join(s.cfg.DataDir, "tls", "ca.crt")}, {&d.CAKey, filepath.Join(s.cfg.DataDir, "tls", "ca.key")},
		{&d.SAKey, filepath.Join(s.cfg.DataDir, "sa.key")}} {
		b, err := os.ReadFile(f.path)
		if err != nil {
			return d, err
		}
		*f.dst = string(b)
	}
	d.EtcdMembers = s.store.etcd.StoreConfig().Endpoints
	return d, nil
}
