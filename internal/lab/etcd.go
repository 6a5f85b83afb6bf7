package lab

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/minikit/minikit/internal/etcdserver"
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
	if err := os.WriteFile(etcdClientFile(dir)+".tmp", b, 0o600); err != nil {
		return err
	}
	if err := os.Rename(etcdClientFile(dir)+".tmp", etcdClientFile(dir)); err != nil {
		return err
	}
	log.Info("external etcd serving", "endpoints", sc.Endpoints)
	<-ctx.Done()
	return nil
}

// ensureEtcdCA loads or creates the etcd CA in dir (ECDSA P-256, as the
// cluster CA).
func ensureEtcdCA(dir string) ([]byte, []byte, error) {
	certPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	c, cerr := os.ReadFile(certPath)
	k, kerr := os.ReadFile(keyPath)
	if cerr == nil && kerr == nil {
		return c, k, nil
	}
	if !errors.Is(cerr, os.ErrNotExist) && cerr != nil {
		return nil, nil, cerr
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: "minikit-lab-etcd-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(10 * 365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the etcd CA: %w", err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	c = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	k = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	if err := os.WriteFile(keyPath, k, 0o600); err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(certPath, c, 0o644); err != nil {
		return nil, nil, err
	}
	return c, k, nil
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
	var c etcdClient
	if err := json.Unmarshal([]byte(b), &c); err != nil || len(c.Endpoints) == 0 {
		return nil, fmt.Errorf("reading %s: no endpoints (%v)", etcdClientFile(dir), err)
	}
	return []string{"--datastore", "etcd", "--etcd-endpoints", c.Endpoints[0],
		"--etcd-cafile", c.CAFile, "--etcd-certfile", c.CertFile, "--etcd-keyfile", c.KeyFile}, nil
}
