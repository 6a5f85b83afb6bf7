package cluster

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/minikit/minikit/internal/apiserver"
	"github.com/minikit/minikit/internal/fsutil"
)

// ensureServiceAccountKey returns the key that signs service account tokens,
// DATA_DIR/sa.key, generating it at first start. It persists so the tokens
// pods hold stay valid across server restarts, as kube-apiserver's
// --service-account-key-file does.
func ensureServiceAccountKey(dataDir string) (*ecdsa.PrivateKey, error) {
	path := filepath.Join(dataDir, "sa.key")
	if b, err := os.ReadFile(path); err == nil {
		blk, _ := pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("reading %s: no PEM block", path)
		}
		k, err := x509.ParseECPrivateKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		return k, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	k, err := apiserver.NewServiceAccountKey()
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, err
	}
	if err := fsutil.WriteFileAtomic(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, fmt.Errorf("writing service account key: %w", err)
	}
	return k, nil
}

// kubernetesServiceIP is the cluster IP of default/kubernetes: the first
// address of the service range (the API server reserves it).
func kubernetesServiceIP(serviceCIDR netip.Prefix) netip.Addr {
	if !serviceCIDR.IsValid() {
		serviceCIDR = netip.MustParsePrefix("10.96.0.0/12")
	}
	return serviceCIDR.Masked().Addr().Next()
}
