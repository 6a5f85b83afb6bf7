package cluster

import (
	"crypto/ecdsa"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/minikit/minikit/internal/apiserver"
	"github.com/minikit/minikit/internal/fsutil"
	"github.com/minikit/minikit/internal/pki"
)

// ensureServiceAccountKey returns the key that signs service account tokens,
// DATA_DIR/sa.key, generating it at first start. It persists so the tokens
// pods hold stay valid across server restarts, as kube-apiserver's
// --service-account-key-file does.
func ensureServiceAccountKey(dataDir string) (*ecdsa.PrivateKey, error) {
	path := filepath.Join(dataDir, "sa.key")
	if b, err := os.ReadFile(path); err == nil {
		k, err := pki.ParseKey(b)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		ek, ok := k.(*ecdsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("reading %s: a %T, want an ECDSA key", path, k)
		}
		return ek, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	k, err := apiserver.NewServiceAccountKey()
	if err != nil {
		return nil, err
	}
	b, err := pki.EncodeKey(k)
	if err != nil {
		return nil, err
	}
	if err := fsutil.WriteFileAtomic(path, b, 0o600); err != nil {
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
