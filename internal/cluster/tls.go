package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/minikit/minikit/internal/fsutil"
)

// credentials are the API's TLS material and bearer token, generated into the data
// dir at first start and reused after.
type credentials struct {
	caPEM  []byte
	cert   tls.Certificate
	tlsDir string
}

// ensureToken returns the data dir's bearer token, creating it if missing.
func ensureToken(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "token")
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= 32 {
		return strings.TrimSpace(string(b)), nil
	}
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	tok := hex.EncodeToString(raw)
	if err := fsutil.WriteFileAtomic(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("writing token: %w", err)
	}
	return tok, nil
}

// ensureTLS loads or creates a CA and a serving certificate valid for hosts. A
// serving certificate that lacks one of hosts is re-issued from the same CA, so
// kubeconfigs already handed out stay valid.
func ensureTLS(dataDir string, hosts []string) (*credentials, error) {
	dir := filepath.Join(dataDir, "tls")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	caCertPath, caKeyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	caCert, caKey, err := loadPair(caCertPath, caKeyPath)
	if err != nil {
		caCert, caKey, err = newCert("minikit-ca", nil, nil, nil, true)
		if err != nil {
			return nil, err
		}
		if err := savePair(caCertPath, caKeyPath, caCert, caKey); err != nil {
			return nil, err
		}
	}
	srvCertPath, srvKeyPath := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	srvCert, srvKey, err := loadPair(srvCertPath, srvKeyPath)
	if err != nil || !covers(srvCert, hosts) || srvCert.NotAfter.Before(time.Now().Add(24*time.Hour)) {
		srvCert, srvKey, err = newCert("minikit-apiserver", hosts, caCert, caKey, false)
		if err != nil {
			return nil, err
		}
		if err := savePair(srvCertPath, srvKeyPath, srvCert, srvKey); err != nil {
			return nil, err
		}
	}
	pair, err := tls.LoadX509KeyPair(srvCertPath, srvKeyPath)
	if err != nil {
		return nil, err
	}
	return &credentials{caPEM: pemCert(caCert), cert: pair, tlsDir: dir}, nil
}

func covers(c *x509.Certificate, hosts []string) bool {
	for _, h := range hosts {
		if c.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

func newCert(cn string, hosts []string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"minikit"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	if isCA {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		ca, caKey = tmpl, key
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("creating certificate %s: %w", cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func pemCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func savePair(certPath, keyPath string, c *x509.Certificate, k *ecdsa.PrivateKey) error {
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(certPath, pemCert(c), 0o644)
}

func loadPair(certPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, err
	}
	kb, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	cblk, _ := pem.Decode(cb)
	kblk, _ := pem.Decode(kb)
	if cblk == nil || kblk == nil {
		return nil, nil, errors.New("bad PEM")
	}
	c, err := x509.ParseCertificate(cblk.Bytes)
	if err != nil {
		return nil, nil, err
	}
	k, err := x509.ParseECPrivateKey(kblk.Bytes)
	return c, k, err
}
