// Package pki is minikit's certificate authority: it creates a CA, issues
// serving and client certificates with their SANs from it, and reads and
// writes certificates and keys as PEM files. The API server's CA and serving
// certificate (cluster), each embedded etcd member's certificates
// (etcdserver) and a lab's external etcd CA (lab) all come from here, so they
// share one key type and one file format.
//
// client-go's cert and keyutil packages do the standard parts (the
// self-signed CA, PEM encoding and parsing of certificates and keys); they
// have no function that signs a certificate with a CA, so Issue is written
// here, as kubeadm's pkiutil writes its own.
//
// Keys are ECDSA P-256 in "EC PRIVATE KEY" (SEC 1) PEM files, certificates
// "CERTIFICATE" PEM: the formats minikit has always written, so existing data
// directories load unchanged. Certificates are valid for ten years and
// backdated an hour, to tolerate clocks that differ between lab hosts.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"time"

	"github.com/minikit/minikit/internal/fsutil"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// Organization is the subject organization of every certificate minikit issues.
const Organization = "minikit"

const (
	validity = 10 * 365 * 24 * time.Hour
	backdate = time.Hour
	// renewBefore is how long before expiry a certificate counts as
	// expiring: EnsurePair re-issues it then.
	renewBefore = 24 * time.Hour
)

// CA is a certificate authority: its certificate and key, and their PEM.
type CA struct {
	Cert            *x509.Certificate
	Key             crypto.Signer
	certPEM, keyPEM []byte
}

// CertPEM is the CA certificate, PEM-encoded.
func (ca *CA) CertPEM() []byte { return ca.certPEM }

// KeyPEM is the CA key, PEM-encoded.
func (ca *CA) KeyPEM() []byte { return ca.keyPEM }

// NewKey generates a key of the type minikit uses, ECDSA P-256.
func NewKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

// NewCA creates a self-signed CA named cn.
func NewCA(cn string) (*CA, error) {
	key, err := NewKey()
	if err != nil {
		return nil, err
	}
	c, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: cn, Organization: []string{Organization},
		NotBefore: time.Now().Add(-backdate)}, key)
	if err != nil {
		return nil, fmt.Errorf("creating CA %s: %w", cn, err)
	}
	keyPEM, err := EncodeKey(key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: c, Key: key, certPEM: EncodeCert(c), keyPEM: keyPEM}, nil
}

// ParseCA parses a CA certificate and its key, checking that the
// certificate is a CA's and the key is its own.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	c, err := ParseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("the CA certificate: %w", err)
	}
	if !c.IsCA {
		return nil, errors.New("the CA certificate: not a CA certificate")
	}
	key, err := ParseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("the CA key: %w", err)
	}
	if !publicKeysEqual(c.PublicKey, key.Public()) {
		return nil, errors.New("the CA key does not belong to the CA certificate")
	}
	return &CA{Cert: c, Key: key, certPEM: certPEM, keyPEM: keyPEM}, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ea, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ea.Equal(b)
}

// LoadOrCreateCA reads the CA at certPath and keyPath, or creates one named
// cn and writes it there when either file is missing. A CA that exists but
// does not parse is an error, never silently replaced: every certificate and
// kubeconfig handed out trusts it.
func LoadOrCreateCA(certPath, keyPath, cn string) (*CA, error) {
	cb, cerr := os.ReadFile(certPath)
	kb, kerr := os.ReadFile(keyPath)
	switch {
	case cerr == nil && kerr == nil:
		ca, err := ParseCA(cb, kb)
		if err != nil {
			return nil, fmt.Errorf("reading the CA %s: %w", certPath, err)
		}
		return ca, nil
	case cerr != nil && !errors.Is(cerr, fs.ErrNotExist):
		return nil, fmt.Errorf("reading the CA: %w", cerr)
	case kerr != nil && !errors.Is(kerr, fs.ErrNotExist):
		return nil, fmt.Errorf("reading the CA: %w", kerr)
	}
	ca, err := NewCA(cn)
	if err != nil {
		return nil, err
	}
	if err := writePEMPair(certPath, keyPath, ca.certPEM, ca.keyPEM); err != nil {
		return nil, err
	}
	return ca, nil
}

// CertConfig is a certificate to issue.
type CertConfig struct {
	CommonName string
	// Hosts are the subject alternative names: IP literals become IP SANs,
	// anything else a DNS name.
	Hosts []string
	// Usages are the extended key usages: x509.ExtKeyUsageServerAuth for a
	// server, ExtKeyUsageClientAuth for a client, both for an etcd member.
	Usages []x509.ExtKeyUsage
}

// Issue creates a key and a certificate for it signed by ca.
func (ca *CA) Issue(cfg CertConfig) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := NewKey()
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cfg.CommonName, Organization: []string{Organization}},
		NotBefore:    now.Add(-backdate),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  cfg.Usages,
	}
	for _, h := range cfg.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("issuing certificate %s: %w", cfg.CommonName, err)
	}
	c, err := x509.ParseCertificate(der)
	return c, key, err
}

// Fits reports whether c was issued by ca, stays valid for another day and
// names every one of hosts.
func (ca *CA) Fits(c *x509.Certificate, hosts []string) bool {
	if c.CheckSignatureFrom(ca.Cert) != nil || c.NotAfter.Before(time.Now().Add(renewBefore)) {
		return false
	}
	for _, h := range hosts {
		if c.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// EnsurePair returns the certificate and key at certPath and keyPath,
// issuing and writing a new pair when they are missing, unreadable, or do
// not fit cfg (see Fits). A pair that fits is kept, so restarts do not
// churn certificates.
func (ca *CA) EnsurePair(certPath, keyPath string, cfg CertConfig) (tls.Certificate, error) {
	if c, _, err := ReadPair(certPath, keyPath); err == nil && ca.Fits(c, cfg.Hosts) {
		if pair, err := tls.LoadX509KeyPair(certPath, keyPath); err == nil {
			return pair, nil
		}
	}
	c, key, err := ca.Issue(cfg)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := EncodeKey(key)
	if err != nil {
		return tls.Certificate{}, err
	}
	certPEM := EncodeCert(c)
	if err := writePEMPair(certPath, keyPath, certPEM, keyPEM); err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}

// EncodeCert PEM-encodes a certificate.
func EncodeCert(c *x509.Certificate) []byte {
	b, _ := certutil.EncodeCertificates(c) // writes to memory: cannot fail
	return b
}

// EncodeKey PEM-encodes a private key: "EC PRIVATE KEY" for ECDSA.
func EncodeKey(key crypto.Signer) ([]byte, error) {
	return keyutil.MarshalPrivateKeyToPEM(key)
}

// ParseCert parses the first certificate of a PEM file.
func ParseCert(b []byte) (*x509.Certificate, error) {
	certs, err := certutil.ParseCertsPEM(b)
	if err != nil {
		return nil, err
	}
	return certs[0], nil
}

// ParseKey parses a PEM private key: "EC PRIVATE KEY", "PRIVATE KEY"
// (PKCS #8) or "RSA PRIVATE KEY".
func ParseKey(b []byte) (crypto.Signer, error) {
	k, err := keyutil.ParsePrivateKeyPEM(b)
	if err != nil {
		return nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("a %T cannot sign", k)
	}
	return s, nil
}

// ReadPair reads a certificate and its key.
func ReadPair(certPath, keyPath string) (*x509.Certificate, crypto.Signer, error) {
	cb, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, err
	}
	kb, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	c, err := ParseCert(cb)
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", certPath, err)
	}
	k, err := ParseKey(kb)
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", keyPath, err)
	}
	return c, k, nil
}

// writePEMPair writes a certificate (mode 0644) and its key (0600), each
// atomically, the key first: a certificate on disk always has its key.
func writePEMPair(certPath, keyPath string, certPEM, keyPEM []byte) error {
	if err := fsutil.WriteFileAtomic(keyPath, keyPEM, 0o600); err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(certPath, certPEM, 0o644)
}
