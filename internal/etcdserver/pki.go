package etcdserver

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
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

func parseCA(certPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, nil, errors.New("CACertPEM: no CERTIFICATE block")
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("CACertPEM: %w", err)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, nil, errors.New("CAKeyPEM: no PEM block")
	}
	var key *ecdsa.PrivateKey
	switch kb.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(kb.Bytes)
	case "PRIVATE KEY":
		var k any
		if k, err = x509.ParsePKCS8PrivateKey(kb.Bytes); err == nil {
			var ok bool
			if key, ok = k.(*ecdsa.PrivateKey); !ok {
				err = errors.New("not an ECDSA key")
			}
		}
	default:
		err = fmt.Errorf("PEM block %q, want \"EC PRIVATE KEY\"", kb.Type)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("CAKeyPEM: %w", err)
	}
	if !ca.IsCA {
		return nil, nil, errors.New("CACertPEM: not a CA certificate")
	}
	return ca, key, nil
}

// ensurePKI issues (or keeps, if still valid for the same CA and hosts) the member and
// client certificates.
func ensurePKI(dir string, caPEM, caKeyPEM []byte, name string, ips []net.IP) (*pki, error) {
	ca, caKey, err := parseCA(caPEM, caKeyPEM)
	if err != nil {
		return nil, err
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
	if err := writeFile(p.caFile, caPEM); err != nil {
		return nil, err
	}
	hosts := []string{"localhost", name}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	if err := ensureCert(p.memberCert, p.memberKey, "etcd-member-"+name, hosts, ips, usage, ca, caKey); err != nil {
		return nil, err
	}
	if err := ensureCert(p.clientCert, p.clientKey, "minikit-etcd-client", nil, nil, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, ca, caKey); err != nil {
		return nil, err
	}
	pair, err := tls.LoadX509KeyPair(p.clientCert, p.clientKey)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	p.clientTLS = &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}
	return p, nil
}

func ensureCert(certPath, keyPath, cn string, hosts []string, ips []net.IP, usage []x509.ExtKeyUsage, ca *x509.Certificate, caKey *ecdsa.PrivateKey) error {
	if pair, err := tls.LoadX509KeyPair(certPath, keyPath); err == nil {
		if c, err := x509.ParseCertificate(pair.Certificate[0]); err == nil && certFits(c, ca, hosts, ips) {
			return nil
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"minikit"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  usage,
		DNSNames:     hosts,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("issuing etcd certificate %s: %w", cn, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})); err != nil {
		return err
	}
	return writeFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// certFits says whether c was issued by ca, is valid for a day more and names every
// host and IP.
func certFits(c, ca *x509.Certificate, hosts []string, ips []net.IP) bool {
	if c.CheckSignatureFrom(ca) != nil || c.NotAfter.Before(time.Now().Add(24*time.Hour)) {
		return false
	}
	for _, h := range hosts {
		if c.VerifyHostname(h) != nil {
			return false
		}
	}
	for _, ip := range ips {
		found := false
		for _, have := range c.IPAddresses {
			found = found || have.Equal(ip)
		}
		if !found {
			return false
		}
	}
	return true
}

func writeFile(path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
