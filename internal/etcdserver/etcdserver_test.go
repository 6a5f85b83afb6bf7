package etcdserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/store"
)

// testCA makes a cluster CA as internal/cluster/tls.go writes it (ECDSA P-256, "EC PRIVATE KEY").
func testCA(t testing.TB) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "minikit-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * 365 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// freePorts returns n loopback ports free right now.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

type testCluster struct {
	t        testing.TB
	ca, key  []byte
	cfgs     map[string]Config
	logger   *slog.Logger
	started  map[string]*Server
	ctx      context.Context
	baseDir  string
	nextPort []int
}

// newTestCluster's members log etcd's warnings through t.Log.
func newTestCluster(t testing.TB) *testCluster {
	return newCluster(t, slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

// newBenchCluster's members log nothing.
func newBenchCluster(t testing.TB) *testCluster {
	return newCluster(t, slog.New(slog.DiscardHandler))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func newCluster(t testing.TB, logger *slog.Logger) *testCluster {
	ca, key := testCA(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	c := &testCluster{t: t, ca: ca, key: key, cfgs: map[string]Config{}, started: map[string]*Server{},
		ctx: ctx, baseDir: t.TempDir(), logger: logger}
	t.Cleanup(func() {
		for _, s := range c.started {
			s.Close()
		}
	})
	return c
}

func (c *testCluster) start(name string, init bool, join ...string) *Server {
	c.t.Helper()
	cfg, ok := c.cfgs[name]
	if !ok {
		ports := freePorts(c.t, 2)
		cfg = Config{
			Name: name, DataDir: filepath.Join(c.baseDir, name), AdvertiseIP: "127.0.0.1",
			ClientPort: ports[0], PeerPort: ports[1], CACertPEM: c.ca, CAKeyPEM: c.key, Logger: c.logger,
		}
	}
	cfg.ClusterInit, cfg.Join = init, join
	c.cfgs[name] = cfg
	t0 := time.Now()
	s, err := Start(c.ctx, cfg)
	c.t.Logf("starting %s took %v", name, time.Since(t0).Round(time.Millisecond))
	if err != nil {
		c.t.Fatalf("starting %s: %v", name, err)
	}
	c.started[name] = s
	return s
}

func (c *testCluster) stop(name string) {
	t0 := time.Now()
	defer func() { c.t.Logf("stopping %s took %v", name, time.Since(t0).Round(time.Millisecond)) }()
	c.started[name].Close()
	delete(c.started, name)
}

func openStore(t *testing.T, cfg store.EtcdConfig) *store.Etcd {
	t.Helper()
	s, err := store.OpenEtcd(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func put(s store.Interface, key, value string) (int64, error) {
	return s.Update(func(tx store.Tx) error { return tx.Put(key, []byte(value)) })
}

// Three members on loopback: the first inits, two join as learners and are promoted;
// killing the leader keeps the store writable through the others (the client fails
// over), a watch resumes from its last revision without a gap, and the killed member
// restarts from its data dir and catches up. Removing a member shrinks the cluster.
func TestThreeMemberCluster(t *testing.T) {
	c := newTestCluster(t)
	m1 := c.start("n1", true)
	if !m1.IsLeader() {
		t.Fatal("the only member is not the leader")
	}
	first := openStore(t, m1.StoreConfig())
	if _, err := put(first, "/before-join", "1"); err != nil {
		t.Fatal(err)
	}
	c.start("n2", false, m1.ClientURL())
	c.start("n3", false, m1.ClientURL(), c.started["n2"].ClientURL())

	cfg := c.started["n3"].StoreConfig()
	if len(cfg.Endpoints) != 3 || cfg.Endpoints[0] != c.started["n3"].ClientURL() {
		t.Fatalf("store endpoints = %v, want the three members, n3's first", cfg.Endpoints)
	}
	cli, err := store.NewEtcdClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	members, err := cli.MemberList(c.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range members.Members {
		if m.IsLearner {
			t.Errorf("member %s is still a learner", m.Name)
		}
		names = append(names, m.Name)
	}
	if len(names) != 3 {
		t.Fatalf("members = %v, want n1 n2 n3", names)
	}
	// The joiners hold what was written before they joined.
	only3 := openStore(t, store.EtcdConfig{Endpoints: []string{c.started["n3"].ClientURL()}, TLS: cfg.TLS})
	if kv, err := only3.Get("/before-join"); err != nil || string(kv.Value) != "1" {
		t.Fatalf("n3 reads /before-join = %q %v", kv.Value, err)
	}

	all := openStore(t, cfg)
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	watchFrom := all.Rev()
	events, err := all.Watch(ctx, "/k/", watchFrom)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := put(all, "/k/0", "before"); err != nil {
		t.Fatal(err)
	}

	leader := ""
	for name, s := range c.started {
		if s.IsLeader() {
			leader = name
		}
	}
	if leader == "" {
		t.Fatal("no member is the leader")
	}
	c.stop(leader)
	t.Logf("stopped the leader %s", leader)
	// Writes go on through the two others once they elected a new leader (the client
	// retries within its request timeout).
	var lastRev int64
	for i := 1; i <= 5; i++ {
		rev, err := put(all, fmt.Sprintf("/k/%d", i), "after")
		if err != nil {
			t.Fatalf("write %d after stopping the leader: %v", i, err)
		}
		lastRev = rev
	}
	// The watch sees every write in order; if it ended (the leader it watched through
	// went away) a new one from the last revision seen continues without a gap.
	seen := watchFrom
	for n := 0; n < 6; {
		select {
		case e, ok := <-events:
			if !ok {
				if events, err = all.Watch(ctx, "/k/", seen); err != nil {
					t.Fatalf("re-watch from %d: %v", seen, err)
				}
				continue
			}
			if e.Key != fmt.Sprintf("/k/%d", n) || e.Rev <= seen {
				t.Fatalf("event %d: %s at %d after %d", n, e.Key, e.Rev, seen)
			}
			seen = e.Rev
			n++
		case <-time.After(30 * time.Second):
			t.Fatalf("waited for watch event %d", n)
		}
	}
	if seen != lastRev {
		t.Fatalf("last event at %d, last write at %d", seen, lastRev)
	}

	// The stopped member restarts from its data dir (ClusterInit/Join ignored) and
	// serves the writes it missed.
	restarted := c.start(leader, false)
	onlyRestarted := openStore(t, store.EtcdConfig{Endpoints: []string{restarted.ClientURL()}, TLS: cfg.TLS})
	if kv, err := onlyRestarted.Get("/k/5"); err != nil || kv.ModRev != lastRev {
		t.Fatalf("restarted %s reads /k/5 = %+v %v", leader, kv, err)
	}

	// Removing a member: the others go on with two.
	victim := "n2"
	if leader == victim {
		victim = "n3"
	}
	c.stop(victim)
	if err := RemoveMember(c.ctx, restarted.StoreConfig(), victim); err != nil {
		t.Fatal(err)
	}
	if err := RemoveMember(c.ctx, restarted.StoreConfig(), victim); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("removing %s again: %v, want ErrNotFound", victim, err)
	}
	if got := restarted.StoreConfig().Endpoints; len(got) != 2 {
		t.Fatalf("endpoints after removing %s = %v, want 2", victim, got)
	}
	if _, err := put(all, "/k/after-remove", "x"); err != nil {
		t.Fatalf("write after removing %s: %v", victim, err)
	}
}

// A member restarts from its data dir, keeps its data, and reuses its certificates.
func TestRestartKeepsDataAndCerts(t *testing.T) {
	c := newTestCluster(t)
	m := c.start("solo", true)
	s := openStore(t, m.StoreConfig())
	rev, err := put(s, "/kept", "yes")
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	certBefore, _ := os.ReadFile(filepath.Join(c.cfgs["solo"].DataDir, "pki", "member.crt"))
	c.stop("solo")
	m = c.start("solo", false) // neither ClusterInit nor Join: the data dir decides
	s = openStore(t, m.StoreConfig())
	if kv, err := s.Get("/kept"); err != nil || kv.ModRev != rev {
		t.Fatalf("after restart /kept = %+v %v, want it at revision %d", kv, err, rev)
	}
	certAfter, _ := os.ReadFile(filepath.Join(c.cfgs["solo"].DataDir, "pki", "member.crt"))
	if string(certBefore) != string(certAfter) {
		t.Error("the member certificate was reissued on restart")
	}
	if _, err := os.Stat(filepath.Join(c.cfgs["solo"].DataDir, "etcd.log")); err != nil {
		t.Errorf("etcd.log: %v", err)
	}
}

// The member's ports require a client certificate from the cluster CA.
func TestClientCertRequired(t *testing.T) {
	c := newTestCluster(t)
	m := c.start("solo", true)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	cfg := m.StoreConfig()
	noCert := cfg.TLS.Clone()
	noCert.Certificates = nil
	if _, err := store.OpenEtcd(ctx, store.EtcdConfig{Endpoints: cfg.Endpoints, TLS: noCert}); err == nil {
		t.Fatal("a client without a certificate opened the store")
	}
	// The files StoreConfig names work as well as its tls.Config.
	s, err := store.OpenEtcd(context.Background(), store.EtcdConfig{Endpoints: cfg.Endpoints, CAFile: cfg.CAFile, CertFile: cfg.CertFile, KeyFile: cfg.KeyFile})
	if err != nil {
		t.Fatalf("open with the certificate files: %v", err)
	}
	s.Close()
}

func TestConfigErrors(t *testing.T) {
	ca, key := testCA(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no name", Config{DataDir: dir, AdvertiseIP: "127.0.0.1"}, "Name"},
		{"no data dir", Config{Name: "a", AdvertiseIP: "127.0.0.1"}, "DataDir"},
		{"bad IP", Config{Name: "a", DataDir: dir, AdvertiseIP: "node1"}, `AdvertiseIP "node1"`},
		{"init and join", Config{Name: "a", DataDir: dir, AdvertiseIP: "127.0.0.1", ClusterInit: true, Join: []string{"https://x:2379"}}, "exclude"},
		{"no CA", Config{Name: "a", DataDir: dir, AdvertiseIP: "127.0.0.1", ClusterInit: true}, "CACertPEM"},
		{"not a CA key", Config{Name: "a", DataDir: dir, AdvertiseIP: "127.0.0.1", ClusterInit: true, CACertPEM: ca, CAKeyPEM: ca}, "CAKeyPEM"},
		{"nothing to do", Config{Name: "a", DataDir: dir, AdvertiseIP: "127.0.0.1", CACertPEM: ca, CAKeyPEM: key}, "ClusterInit or Join"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Start(context.Background(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start = %v, want an error about %s", err, tc.want)
			}
		})
	}
}
