package kubeconfig

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// What Write puts on disk is what kubectl and client-go read: the server,
// the CA, the token and the namespace of the current context.
func TestWriteRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	p := Params{Cluster: "c", User: "u", Context: "x", Server: "https://192.168.56.10:6443",
		CA: []byte("-----BEGIN CERTIFICATE-----\n"), Token: "secret", Namespace: "default"}
	if err := Write(path, New(p), 0o600, -1, -1); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CurrentContext != "x" {
		t.Errorf("current context %q, want x", cfg.CurrentContext)
	}
	ctx := cfg.Contexts["x"]
	if ctx == nil || ctx.Cluster != "c" || ctx.AuthInfo != "u" || ctx.Namespace != "default" {
		t.Fatalf("context %+v", ctx)
	}
	if c := cfg.Clusters["c"]; c == nil || c.Server != p.Server || string(c.CertificateAuthorityData) != string(p.CA) {
		t.Errorf("cluster %+v", c)
	}
	if u := cfg.AuthInfos["u"]; u == nil || u.Token != "secret" {
		t.Errorf("user %+v", u)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != p.Server || rc.BearerToken != "secret" || string(rc.CAData) != string(p.CA) {
		t.Errorf("client config host %q token %q CA %q", rc.Host, rc.BearerToken, rc.CAData)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600: it holds a token", st.Mode().Perm())
	}
}

func TestWriteOwner(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	uid, gid := os.Geteuid(), os.Getegid()
	if uid == 0 {
		uid, gid = 65534, 65534 // root writing a lab's kubeconfig for the user behind sudo
	}
	if err := Write(path, New(Params{Cluster: "c", User: "u", Context: "c"}), 0o600, uid, gid); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if sys := st.Sys().(*syscall.Stat_t); int(sys.Uid) != uid || int(sys.Gid) != gid {
		t.Errorf("owner %d:%d, want %d:%d", sys.Uid, sys.Gid, uid, gid)
	}
}

func TestWriteErrorNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "kubeconfig")
	err := Write(path, New(Params{Cluster: "c", User: "u", Context: "c"}), 0o600, -1, -1)
	if err == nil || !strings.Contains(err.Error(), "kubeconfig") || !strings.Contains(err.Error(), path) {
		t.Errorf("got %v, want an error naming kubeconfig %s", err, path)
	}
}
