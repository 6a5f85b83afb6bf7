package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/minikit/minikit/internal/etcdserver"
	"github.com/minikit/minikit/internal/fsutil"
	"github.com/minikit/minikit/internal/pki"
)

// EtcdHost is the key of the external etcd's process in a lab's state: with
// --datastore etcd a lab runs a one-member etcd cluster on its external host,
// a machine outside the cluster as an external etcd is, and the server stores
// its objects there (--datastore etcd --etcd-endpoints … with client
// certificates), as kube-apiserver does with an external etcd.
const EtcdHost = "etcd"

// EtcdClientPort is the external etcd's client port.
const EtcdClientPort = 2379

// etcdClient is what RunEtcd writes for the servers: the client URL and the
// files of the client certificate minikit presents to etcd.
type etcdClient struct {
	Endpoints []string `json:"endpoints"`
	CAFile    string   `json:"caFile"`
	CertFile  string   `json:"certFile"`
	KeyFile   string   `json:"keyFile"`
}

func etcdClientFile(dir string) string { return filepath.Join(dir, "client.json") }

// RunEtcd runs the lab's external etcd in dir (a CA of its own, separate from
// the cluster's as kubeadm's etcd CA is; the member; client.json) until ctx
// ends.
func RunEtcd(ctx context.Context, dir string, ip netip.Addr, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	caPEM, keyPEM, err := ensureEtcdCA(dir)
	if err != nil {
		return err
	}
	m, err := etcdserver.Start(ctx, etcdserver.Config{Name: EtcdHost, DataDir: filepath.Join(dir, "member"),
		AdvertiseIP: ip.String(), ClientPort: EtcdClientPort, CACertPEM: caPEM, CAKeyPEM: keyPEM, ClusterInit: true, Logger: log})
	if err != nil {
		return err
	}
	defer m.Close()
	sc := m.StoreConfig()
	b, err := json.Marshal(etcdClient{Endpoints: sc.Endpoints, CAFile: sc.CAFile, CertFile: sc.CertFile, KeyFile: sc.KeyFile})
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(etcdClientFile(dir), b, 0o600); err != nil {
		return err
	}
	log.Info("external etcd serving", "endpoints", sc.Endpoints)
	<-ctx.Done()
	return nil
}

// ensureEtcdCA loads or creates the etcd CA in dir (ECDSA P-256, as the
// cluster CA) and returns its certificate and key PEM.
func ensureEtcdCA(dir string) ([]byte, []byte, error) {
	ca, err := pki.LoadOrCreateCA(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"), "minikit-lab-etcd-ca")
	if err != nil {
		return nil, nil, err
	}
	return ca.CertPEM(), ca.KeyPEM(), nil
}

// startEtcd starts the external etcd on the external host and returns the
// server flags that use it.
func (l *Lab) startEtcd(ctx context.Context) ([]string, error) {
	dir := filepath.Join(l.cfg.Dir, EtcdHost)
	if err := l.startAs(EtcdHost, External, "external etcd", l.cfg.Binary, "__lab-etcd",
		"--dir", dir, "--address", l.Addr(External).String()); err != nil {
		return nil, err
	}
	b, err := waitFile(ctx, etcdClientFile(dir))
	if err != nil {
		return nil, fmt.Errorf("waiting for the external etcd: %w (see %s)", err, filepath.Join(l.cfg.Dir, EtcdHost+".log"))
	}
	return etcdServerFlags([]byte(b), etcdClientFile(dir))
}

// etcdServerFlags are the server flags that use the external etcd that
// client.json (at path) describes.
func etcdServerFlags(clientJSON []byte, path string) ([]string, error) {
	var c etcdClient
	if err := json.Unmarshal(clientJSON, &c); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(c.Endpoints) == 0 {
		return nil, fmt.Errorf("reading %s: no endpoints", path)
	}
	return []string{"--datastore", "etcd", "--etcd-endpoints", c.Endpoints[0],
		"--etcd-cafile", c.CAFile, "--etcd-certfile", c.CertFile, "--etcd-keyfile", c.KeyFile}, nil
}
