package cluster

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/minikit/minikit/internal/fsutil"
	"github.com/minikit/minikit/internal/pki"
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

// ensureTLS loads or creates the cluster CA (DATA_DIR/tls/ca.crt, ca.key) and
// a serving certificate valid for hosts. A serving certificate that lacks one
// of hosts, expires within a day or was not issued by the CA is re-issued from
// the same CA, so kubeconfigs already handed out stay valid.
func ensureTLS(dataDir string, hosts []string) (*credentials, error) {
	dir := filepath.Join(dataDir, "tls")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := pki.LoadOrCreateCA(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"), "minikit-ca")
	if err != nil {
		return nil, err
	}
	pair, err := ca.EnsurePair(filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"),
		pki.CertConfig{CommonName: "minikit-apiserver", Hosts: hosts, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	if err != nil {
		return nil, err
	}
	return &credentials{caPEM: ca.CertPEM(), cert: pair, tlsDir: dir}, nil
}
