// Package etcdtest starts a one-member etcd for tests: loopback, plain
// HTTP, no fsync, stopped when the test ends.
package etcdtest

import (
	"net/url"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Start starts the member and returns its client URL.
func Start(t testing.TB) string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "test"
	cfg.Dir = t.TempDir()
	u := func(s string) []url.URL { v, _ := url.Parse(s); return []url.URL{*v} }
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = u("http://127.0.0.1:0"), u("http://127.0.0.1:0")
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = u("http://127.0.0.1:0"), u("http://127.0.0.1:0")
	cfg.InitialCluster = "test=http://127.0.0.1:0"
	cfg.UnsafeNoFsync = true
	cfg.MaxTxnOps = 10000
	cfg.Logger = "zap"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("etcd not ready after 30s")
	}
	return "http://" + e.Clients[0].Addr().String()
}
