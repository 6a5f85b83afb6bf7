package cluster

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckDatastore(t *testing.T) {
	for _, tc := range []struct {
		cfg  ServerConfig
		want string
	}{
		{ServerConfig{}, ""},
		{ServerConfig{Datastore: DatastoreEtcd, Etcd: EtcdConfig{Endpoints: []string{"https://10.0.0.5:2379"}}}, ""},
		{ServerConfig{ClusterInit: true}, ""},
		{ServerConfig{Join: "https://192.168.56.10:6443", JoinToken: "x"}, ""},
		{ServerConfig{Datastore: "sqlite"}, `--datastore: unsupported value "sqlite": supported values: "bolt", "etcd"`},
		{ServerConfig{Datastore: DatastoreEtcd}, "--datastore etcd needs --etcd-endpoints"},
		{ServerConfig{Etcd: EtcdConfig{Endpoints: []string{"https://e:2379"}}}, "--etcd-endpoints needs --datastore etcd"},
		{ServerConfig{ClusterInit: true, Join: "https://a:6443"}, "give one of them"},
		{ServerConfig{Datastore: DatastoreEtcd, ClusterInit: true, Etcd: EtcdConfig{Endpoints: []string{"https://e:2379"}}}, "--etcd-endpoints names an external etcd"},
		{ServerConfig{JoinToken: "x"}, "--token is the cluster's join token: it needs --join"},
		{ServerConfig{Datastore: DatastoreEtcd, Etcd: EtcdConfig{Endpoints: []string{"10.0.0.5:2379"}}}, `--etcd-endpoints: "10.0.0.5:2379" is not an http:// or https:// URL`},
	} {
		err := tc.cfg.checkDatastore()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v refused: %v", tc.cfg, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: got %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

func TestParseJoinToken(t *testing.T) {
	h := strings.Repeat("ab", 32)
	for in, want := range map[string][2]string{
		"plain":                   {"", "plain"},
		"K10" + h + "::server:s3": {h, "s3"},
	} {
		hash, tok, err := parseJoinToken(in)
		if err != nil || hash != want[0] || tok != want[1] {
			t.Errorf("%q: %q %q %v", in, hash, tok, err)
		}
	}
	for _, bad := range []string{"K10abc::server:x", "K10" + h + "::node:x", "K10" + h + "::server:", "K10" + strings.Repeat("zz", 32) + "::server:x"} {
		if _, _, err := parseJoinToken(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestJoinBootstrap: the joiner pins the CA by the token's hash, sends the
// token only to that CA's server, and gets the secrets; a wrong pin, a wrong
// token or a bare token without a CA file are refused with errors that say why.
func TestJoinBootstrap(t *testing.T) {
	data := bootstrapData{CAKey: "KEY", SAKey: "SA", Token: "tok", EtcdMembers: []string{"https://192.168.56.10:2379"},
		ServiceCIDR: "10.96.0.0/12", PodCIDR: "10.244.0.0/16"}
	ts := httptest.NewUnstartedServer(nil)
	ts.StartTLS()
	defer ts.Close()
	// The test server's self-signed certificate stands for the cluster CA.
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	ts.Config.Handler = bootstrapHandler(http.NotFoundHandler(), caPEM, "tok", func() (bootstrapData, error) { return data, nil })
	data.CACert = string(caPEM)
	ctx := context.Background()

	got, _, err := fetchBootstrap(ctx, ts.URL, JoinToken(caPEM, "tok"), "")
	if err != nil {
		t.Fatal(err)
	}
	if got.SAKey != "SA" || got.Token != "tok" || got.EtcdMembers[0] != "https://192.168.56.10:2379" {
		t.Errorf("bootstrap data %+v", got)
	}
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(caFile, caPEM, 0o600)
	if _, _, err := fetchBootstrap(ctx, ts.URL, "tok", caFile); err != nil {
		t.Errorf("a bare token with --ca-file: %v", err)
	}
	for _, tc := range []struct{ token, caFile, want string }{
		{JoinToken([]byte("another CA"), "tok"), "", "does not match the join token's hash"},
		{JoinToken(caPEM, "wrong"), "", "401 Unauthorized"},
		{"tok", "", "a bare token cannot authenticate the server"},
		{"", "", "joining needs the cluster's token"},
	} {
		if _, _, err := fetchBootstrap(ctx, ts.URL, tc.token, tc.caFile); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("token %.20q: got %v, want %q", tc.token, err, tc.want)
		}
	}
	if _, _, err := fetchBootstrap(ctx, "http://"+strings.TrimPrefix(ts.URL, "https://"), JoinToken(caPEM, "tok"), ""); err == nil ||
		!strings.Contains(err.Error(), "--join must be the https:// URL") {
		t.Errorf("plain http join: %v", err)
	}

	dir := t.TempDir()
	if err := writeBootstrap(dir, got); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"tls/ca.crt": string(caPEM), "tls/ca.key": "KEY", "sa.key": "SA", "token": "tok\n"} {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil || string(b) != want {
			t.Errorf("%s: %q %v", file, b, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "tls", "ca.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("ca.key mode %v %v", fi.Mode(), err)
	}
}
