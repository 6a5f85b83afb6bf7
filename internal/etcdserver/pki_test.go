package etcdserver

import (
	"bytes"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"

	minipki "github.com/minikit/minikit/internal/pki"
)

// The member's certificates come from the cluster CA, name the member and
// its addresses, and are kept across restarts until an address changes.
func TestEnsurePKI(t *testing.T) {
	caPEM, keyPEM := testCA(t)
	ca, err := minipki.ParseCA(caPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	dir := filepath.Join(t.TempDir(), "pki")
	ips := []net.IP{net.ParseIP("192.168.56.10")}
	p, err := ensurePKI(dir, caPEM, keyPEM, "node1", ips)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p.caFile); !bytes.Equal(b, caPEM) {
		t.Error("ca.crt is not the cluster CA")
	}
	member, _, err := minipki.ReadPair(p.memberCert, p.memberKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"node1", "localhost", "192.168.56.10"} {
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if _, err := member.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("member certificate for %s, usage %v: %v", name, usage, err)
			}
		}
	}
	client, _, err := minipki.ReadPair(p.clientCert, p.clientKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if len(p.clientTLS.Certificates) != 1 || !bytes.Equal(p.clientTLS.Certificates[0].Certificate[0], client.Raw) {
		t.Error("the client TLS config does not present client.crt")
	}

	before, _ := os.ReadFile(p.memberCert)
	if _, err := ensurePKI(dir, caPEM, keyPEM, "node1", ips); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(p.memberCert); !bytes.Equal(before, after) {
		t.Error("a restart with the same addresses re-issued the member certificate")
	}
	if _, err := ensurePKI(dir, caPEM, keyPEM, "node1", append(ips, net.ParseIP("10.0.0.1"))); err != nil {
		t.Fatal(err)
	}
	if m, _, _ := minipki.ReadPair(p.memberCert, p.memberKey); m.VerifyHostname("10.0.0.1") != nil {
		t.Error("a new address did not re-issue the member certificate")
	}
}
