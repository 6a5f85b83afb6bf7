package etcdserver

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/minikit/minikit/internal/fsutil"
	minipki "github.com/minikit/minikit/internal/pki"
)

// pki is this member's TLS material under DataDir/pki, issued by the cluster CA.
// member.crt serves both ports and is the member's client certificate towards its
// peers; client.crt is what minikit's store presents to etcd.
type pki struct {
	dir                   string
	caFile                string
	memberCert, memberKey string
	clientCert, clientKey string
	clientTLS             *tls.Config
}

// ensurePKI issues (or keeps, if still valid for the same CA and hosts) the member and
// client certificates.
func ensurePKI(dir string, caPEM, caKeyPEM []byte, name string, ips []net.IP) (*pki, error) {
	if len(caPEM) == 0 {
		return nil, fmt.Errorf("CACertPEM: no CA certificate")
	}
	ca, err := minipki.ParseCA(caPEM, caKeyPEM)
	if err != nil {
		return nil, fmt.Errorf("CACertPEM, CAKeyPEM: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{
		dir:        dir,
		caFile:     filepath.Join(dir, "ca.crt"),
		memberCert: filepath.Join(dir, "member.crt"), memberKey: filepath.Join(dir, "member.key"),
		clientCert: filepath.Join(dir, "client.crt"), clientKey: filepath.Join(dir, "client.key"),
	}
	if old, err := os.ReadFile(p.caFile); err != nil || !bytes.Equal(old, caPEM) {
		if err := fsutil.WriteFileAtomic(p.caFile, caPEM, 0o600); err != nil {
			return nil, err
		}
	}
	hosts := []string{"localhost", name}
	for _, ip := range ips {
		hosts = append(hosts, ip.String())
	}
	if _, err := ca.EnsurePair(p.memberCert, p.memberKey, minipki.CertConfig{CommonName: "etcd-member-" + name, Hosts: hosts,
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, fmt.Errorf("issuing the etcd member certificate: %w", err)
	}
	pair, err := ca.EnsurePair(p.clientCert, p.clientKey, minipki.CertConfig{CommonName: "minikit-etcd-client",
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		return nil, fmt.Errorf("issuing the etcd client certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	p.clientTLS = &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}
	return p, nil
}
