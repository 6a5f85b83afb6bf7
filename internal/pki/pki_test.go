package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func newCA(t *testing.T) *CA {
	t.Helper()
	ca, err := NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func pool(ca *CA) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

func TestIssueChainsAndSANs(t *testing.T) {
	ca := newCA(t)
	for _, tc := range []struct {
		name     string
		cfg      CertConfig
		dns      []string
		ips      []string
		usage    x509.ExtKeyUsage
		verifyAs string // a name the certificate must verify for
	}{
		{"server", CertConfig{CommonName: "minikit-apiserver", Hosts: []string{"127.0.0.1", "localhost", "192.168.56.10", "kubernetes.default.svc"},
			Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
			[]string{"localhost", "kubernetes.default.svc"}, []string{"127.0.0.1", "192.168.56.10"}, x509.ExtKeyUsageServerAuth, "192.168.56.10"},
		{"etcd member", CertConfig{CommonName: "etcd-member-node1", Hosts: []string{"localhost", "node1", "10.0.0.1"},
			Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}},
			[]string{"localhost", "node1"}, []string{"10.0.0.1"}, x509.ExtKeyUsageClientAuth, "node1"},
		{"client", CertConfig{CommonName: "minikit-etcd-client", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
			nil, nil, x509.ExtKeyUsageClientAuth, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, key, err := ca.Issue(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if key.Curve != elliptic.P256() || !key.PublicKey.Equal(c.PublicKey) {
				t.Errorf("key is not the certificate's P-256 key")
			}
			if _, err := c.Verify(x509.VerifyOptions{Roots: pool(ca), DNSName: tc.verifyAs, KeyUsages: []x509.ExtKeyUsage{tc.usage}}); err != nil {
				t.Errorf("does not verify against the CA: %v", err)
			}
			if !slices.Equal(c.DNSNames, tc.dns) {
				t.Errorf("DNS SANs %v, want %v", c.DNSNames, tc.dns)
			}
			var ips []string
			for _, ip := range c.IPAddresses {
				ips = append(ips, ip.String())
			}
			if !slices.Equal(ips, tc.ips) {
				t.Errorf("IP SANs %v, want %v", ips, tc.ips)
			}
			if c.Subject.CommonName != tc.cfg.CommonName || !slices.Equal(c.Subject.Organization, []string{"minikit"}) || c.IsCA {
				t.Errorf("subject %v, IsCA %v", c.Subject, c.IsCA)
			}
			if !c.NotBefore.Before(time.Now()) || c.NotAfter.Before(time.Now().Add(9*365*24*time.Hour)) {
				t.Errorf("valid %v to %v, want from before now for about ten years", c.NotBefore, c.NotAfter)
			}
		})
	}
	other := newCA(t)
	c, _, _ := other.Issue(CertConfig{CommonName: "x", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	if _, err := c.Verify(x509.VerifyOptions{Roots: pool(ca)}); err == nil {
		t.Error("a certificate of another CA verifies")
	}
}

func TestFits(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	hosts := []string{"127.0.0.1", "localhost", "192.168.56.10"}
	c, _, _ := ca.Issue(CertConfig{CommonName: "s", Hosts: hosts, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	foreign, _, _ := other.Issue(CertConfig{CommonName: "s", Hosts: hosts})
	expiring := selfIssue(t, ca, hosts, time.Now().Add(time.Hour))
	for _, tc := range []struct {
		name  string
		c     *x509.Certificate
		hosts []string
		want  bool
	}{
		{"same hosts", c, hosts, true},
		{"fewer hosts", c, hosts[:1], true},
		{"a new address", c, append(hosts, "192.168.56.11"), false},
		{"a new name", c, append(hosts, "kubernetes"), false},
		{"another CA's", foreign, hosts, false},
		{"expiring within a day", expiring, hosts, false},
	} {
		if got := ca.Fits(tc.c, tc.hosts); got != tc.want {
			t.Errorf("%s: Fits = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// selfIssue issues a certificate from ca that expires at notAfter.
func selfIssue(t *testing.T, ca *CA, hosts []string, notAfter time.Time) *x509.Certificate {
	t.Helper()
	key, _ := NewKey()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "old"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter, DNSNames: []string{"localhost"}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c
}

func TestLoadOrCreateCAReloads(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	ca, err := LoadOrCreateCA(certPath, keyPath, "minikit-ca")
	if err != nil {
		t.Fatal(err)
	}
	if !ca.Cert.IsCA || ca.Cert.Subject.CommonName != "minikit-ca" {
		t.Errorf("created %v, IsCA %v", ca.Cert.Subject, ca.Cert.IsCA)
	}
	for path, want := range map[string]os.FileMode{certPath: 0o644, keyPath: 0o600} {
		st, err := os.Stat(path)
		if err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: %v, mode %v; want %v", path, err, st.Mode().Perm(), want)
		}
	}
	// The key file is what minikit has always written: SEC 1 "EC PRIVATE KEY", P-256.
	kb, _ := os.ReadFile(keyPath)
	blk, _ := pem.Decode(kb)
	if blk == nil || blk.Type != "EC PRIVATE KEY" {
		t.Fatalf("key PEM block %v, want EC PRIVATE KEY", blk)
	}
	if k, err := x509.ParseECPrivateKey(blk.Bytes); err != nil || k.Curve != elliptic.P256() {
		t.Errorf("key: %v", err)
	}
	again, err := LoadOrCreateCA(certPath, keyPath, "minikit-ca")
	if err != nil {
		t.Fatal(err)
	}
	if !again.Cert.Equal(ca.Cert) || string(again.KeyPEM()) != string(ca.KeyPEM()) {
		t.Error("a second start made a new CA instead of reloading the first")
	}
}

// A CA written by minikit before this package (a hand-rolled template, the
// key marshalled with x509.MarshalECPrivateKey) still loads and issues.
func TestLoadsAnOldDataDirCA(t *testing.T) {
	dir := t.TempDir()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "minikit-ca", Organization: []string{"minikit"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	kder, _ := x509.MarshalECPrivateKey(key)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	os.WriteFile(filepath.Join(dir, "ca.crt"), certPEM, 0o644)
	os.WriteFile(filepath.Join(dir, "ca.key"), keyPEM, 0o600)
	ca, err := LoadOrCreateCA(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"), "minikit-ca")
	if err != nil {
		t.Fatal(err)
	}
	if string(ca.CertPEM()) != string(certPEM) {
		t.Error("the old CA was replaced")
	}
	// Its PKCS #8 form (what etcd tooling may hand over) is the same CA.
	p8, _ := x509.MarshalPKCS8PrivateKey(key)
	if _, err := ParseCA(certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8})); err != nil {
		t.Errorf("PKCS #8 key: %v", err)
	}
	if _, _, err := ca.Issue(CertConfig{CommonName: "s", Hosts: []string{"localhost"}}); err != nil {
		t.Errorf("issuing from the old CA: %v", err)
	}
}

func TestParseCAErrors(t *testing.T) {
	ca, other := newCA(t), newCA(t)
	leaf, leafKey, _ := ca.Issue(CertConfig{CommonName: "leaf"})
	leafKeyPEM, _ := EncodeKey(leafKey)
	for _, tc := range []struct {
		name         string
		certPEM, key []byte
		want         string
	}{
		{"no certificate", nil, ca.KeyPEM(), "the CA certificate"},
		{"a key for a certificate", ca.KeyPEM(), ca.KeyPEM(), "the CA certificate"},
		{"a certificate for a key", ca.CertPEM(), ca.CertPEM(), "the CA key"},
		{"not a CA", EncodeCert(leaf), leafKeyPEM, "not a CA certificate"},
		{"another CA's key", ca.CertPEM(), other.KeyPEM(), "does not belong"},
	} {
		if _, err := ParseCA(tc.certPEM, tc.key); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// A corrupt CA is an error naming the file, not a new CA that would leave
// every node and kubeconfig trusting the old one.
func TestLoadOrCreateCACorrupt(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if _, err := LoadOrCreateCA(certPath, keyPath, "minikit-ca"); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(certPath, []byte("not PEM"), 0o644)
	_, err := LoadOrCreateCA(certPath, keyPath, "minikit-ca")
	if err == nil || !strings.Contains(err.Error(), certPath) {
		t.Fatalf("got %v, want an error naming %s", err, certPath)
	}
	if b, _ := os.ReadFile(certPath); string(b) != "not PEM" {
		t.Error("the corrupt CA was overwritten")
	}
}

func TestEnsurePair(t *testing.T) {
	ca := newCA(t)
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	cfg := CertConfig{CommonName: "minikit-apiserver", Hosts: []string{"127.0.0.1", "localhost"}, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	first, err := ca.EnsurePair(certPath, keyPath, cfg)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := ca.EnsurePair(certPath, keyPath, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if string(kept.Certificate[0]) != string(first.Certificate[0]) {
		t.Error("a pair that fits was re-issued")
	}
	c, k, err := ReadPair(certPath, keyPath)
	if err != nil || !k.Public().(*ecdsa.PublicKey).Equal(c.PublicKey) {
		t.Fatalf("reading the pair back: %v", err)
	}
	cfg.Hosts = append(cfg.Hosts, "192.168.56.10")
	grown, err := ca.EnsurePair(certPath, keyPath, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if string(grown.Certificate[0]) == string(first.Certificate[0]) {
		t.Fatal("a certificate lacking a new host was kept")
	}
	if c, _, _ := ReadPair(certPath, keyPath); c.VerifyHostname("192.168.56.10") != nil {
		t.Error("the re-issued certificate on disk lacks the new host")
	}
	// Another CA (a joining server's bootstrap replaced it) re-issues too.
	other := newCA(t)
	if p, err := other.EnsurePair(certPath, keyPath, cfg); err != nil || string(p.Certificate[0]) == string(grown.Certificate[0]) {
		t.Errorf("a certificate of the previous CA was kept (%v)", err)
	}
	os.WriteFile(keyPath, []byte("garbage"), 0o600)
	if _, err := other.EnsurePair(certPath, keyPath, cfg); err != nil {
		t.Errorf("a corrupt key is replaced by a new pair: %v", err)
	}
}
