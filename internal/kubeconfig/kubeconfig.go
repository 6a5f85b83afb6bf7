// Package kubeconfig builds and writes the kubeconfigs minikit hands out: the
// one a server writes into its data dir (as k3s writes its own) and a lab's,
// which reaches the lab's API through its loopback forwarder. The types and
// the encoding are client-go's (clientcmd); this package adds the shape
// minikit gives them (one cluster, user and context) and a durable write
// that gives the file to its user before it appears, since it holds a bearer
// token.
package kubeconfig

import (
	"fmt"
	"io/fs"

	"github.com/minikit/minikit/internal/fsutil"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Params describe a kubeconfig with one cluster, one user and one context,
// the context current.
type Params struct {
	// Cluster, User and Context are the entries' names.
	Cluster, User, Context string
	// Server is the API's URL; CA the PEM certificate that verifies it (nil
	// for plain HTTP).
	Server string
	CA     []byte
	// Token is the user's bearer token ("" for none).
	Token string
	// Namespace is the context's namespace.
	Namespace string
}

// New builds the kubeconfig p describes.
func New(p Params) *clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[p.Cluster] = &clientcmdapi.Cluster{Server: p.Server, CertificateAuthorityData: p.CA}
	cfg.AuthInfos[p.User] = &clientcmdapi.AuthInfo{Token: p.Token}
	cfg.Contexts[p.Context] = &clientcmdapi.Context{Cluster: p.Cluster, AuthInfo: p.User, Namespace: p.Namespace}
	cfg.CurrentContext = p.Context
	return cfg
}

// Write encodes cfg and writes it to path atomically and durably (fsutil),
// mode perm, owned by uid:gid (-1 keeps the writer's): the token in it is
// readable by its user and nobody else from the moment the file exists.
func Write(path string, cfg *clientcmdapi.Config, perm fs.FileMode, uid, gid int) error {
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("encoding kubeconfig %s: %w", path, err)
	}
	if err := fsutil.WriteFileAtomicOwned(path, b, perm, uid, gid); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	return nil
}
