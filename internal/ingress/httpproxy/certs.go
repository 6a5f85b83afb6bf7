package httpproxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
	"time"
)

// FakeCertificateName is the subject of the default certificate, as ingress-nginx
// names its own: a client that sees it knows no Secret matched its SNI name.
const FakeCertificateName = "Kubernetes Ingress Controller Fake Certificate"

// NewFakeCertificate makes the self-signed default certificate served for names
// no Ingress has a certificate for (ingress-nginx's "fake certificate"). It also
// returns the PEM encodings, for nginx.conf.
func NewFakeCertificate() (tls.Certificate, []byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, nil, err
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: FakeCertificateName, Organization: []string{"Acme Co"}},
		DNSNames:     []string{"ingress.local"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, nil, fmt.Errorf("creating the default certificate: %w", err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return tls.Certificate{}, nil, nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	return pair, certPEM, keyPEM, err
}

// getCertificate picks the certificate by SNI from the current table: the
// server's own, else the default one. Certificates change with the table, so a
// rotated Secret is served from the next handshake on.
func (p *Proxy) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	t := p.table.Load()
	name := strings.ToLower(strings.TrimSuffix(hello.ServerName, "."))
	if name != "" {
		if s := t.cfg.Server(name); s.TLS != nil && s.TLS.Certificate != nil && s.Host != "_" {
			return s.TLS.Certificate, nil
		}
	}
	return p.fakeCert, nil
}
