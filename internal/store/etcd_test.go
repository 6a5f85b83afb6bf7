package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/store/etcdtest"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// startTestEtcd starts a one-member etcd on loopback (etcdtest.Start).
func startTestEtcd(t testing.TB) string { return etcdtest.Start(t) }

func openTestEtcd(t *testing.T, cfg EtcdConfig) *Etcd {
	t.Helper()
	e, err := OpenEtcd(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// Three servers sharing one etcd: concurrent read-modify-write functions serialize
// (no lost increment), and every commit lands exactly at the revision its Tx.Rev()
// announced, which objects record as their resourceVersion.
func TestEtcdServersSerialize(t *testing.T) {
	ep := startTestEtcd(t)
	servers := []*Etcd{
		openTestEtcd(t, EtcdConfig{Endpoints: []string{ep}}),
		openTestEtcd(t, EtcdConfig{Endpoints: []string{ep}}),
		openTestEtcd(t, EtcdConfig{Endpoints: []string{ep}}),
	}
	const perServer = 100
	var wg sync.WaitGroup
	errs := make(chan error, len(servers)*perServer)
	for si, s := range servers {
		for i := 0; i < perServer; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := s.Update(func(tx Tx) error {
					n := 0
					if kv, ok := tx.Get("/c/counter"); ok {
						n, _ = strconv.Atoi(string(kv.Value))
					}
					if err := tx.Put("/c/counter", []byte(strconv.Itoa(n+1))); err != nil {
						return err
					}
					// Like an allocator: claim the next free number.
					return tx.Create(fmt.Sprintf("/c/claims/%04d", n), []byte(fmt.Sprintf("%d-%d@%d", si, i, tx.Rev())))
				})
				if err != nil {
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("update: %v", err)
	}
	kv, err := servers[0].Get("/c/counter")
	if err != nil || string(kv.Value) != strconv.Itoa(len(servers)*perServer) {
		t.Fatalf("counter = %q (%v), want %d", kv.Value, err, len(servers)*perServer)
	}
	claims, _, _ := servers[1].List("/c/claims/")
	if len(claims) != len(servers)*perServer {
		t.Fatalf("%d claims, want %d", len(claims), len(servers)*perServer)
	}
	for _, c := range claims {
		var at int64
		fmt.Sscanf(string(c.Value[strings.Index(string(c.Value), "@")+1:]), "%d", &at)
		if at != c.ModRev {
			t.Errorf("%s: tx.Rev() said %d, committed at %d", c.Key, at, c.ModRev)
		}
	}
}

// The sentinel that guards commits is never seen by callers.
func TestEtcdSentinelHidden(t *testing.T) {
	ep := startTestEtcd(t)
	s := openTestEtcd(t, EtcdConfig{Endpoints: []string{ep}, Prefix: "/mk"})
	s.Update(func(tx Tx) error { return tx.Put("/a", []byte("1")) })
	kvs, rev, err := s.List("")
	if err != nil || len(kvs) != 1 || kvs[0].Key != "/a" || rev != s.Rev() {
		t.Fatalf("list of everything = %+v at %d (%v), want only /a", kvs, rev, err)
	}
	raw, err := NewEtcdClient(EtcdConfig{Endpoints: []string{ep}})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	resp, err := raw.Get(context.Background(), "", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	if want := "[/mk#commit /mk/a]"; fmt.Sprint(keys) != want {
		t.Fatalf("keys in etcd = %v, want %s", keys, want)
	}
}

// An etcd that holds keys besides minikit's is refused: another writer would make
// the revisions minikit predicts wrong.
func TestEtcdRefusesSharedEtcd(t *testing.T) {
	ep := startTestEtcd(t)
	raw, err := NewEtcdClient(EtcdConfig{Endpoints: []string{ep}})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, key := range []string{"/other/x", "/a"} {
		t.Run(key, func(t *testing.T) {
			if _, err := raw.Put(context.Background(), key, "x"); err != nil {
				t.Fatal(err)
			}
			defer raw.Delete(context.Background(), key)
			_, err := OpenEtcd(context.Background(), EtcdConfig{Endpoints: []string{ep}})
			if err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "dedicated") {
				t.Fatalf("open with %s present: %v, want an error naming the key", key, err)
			}
		})
	}
	if s, err := OpenEtcd(context.Background(), EtcdConfig{Endpoints: []string{ep}}); err != nil {
		t.Fatalf("open once the foreign keys are gone: %v", err)
	} else {
		s.Close()
	}
}

func TestEtcdUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := "http://" + l.Addr().String()
	l.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = OpenEtcd(ctx, EtcdConfig{Endpoints: []string{ep}})
	if err == nil || !strings.Contains(err.Error(), ep) {
		t.Fatalf("open of an unreachable etcd: %v, want an error naming %s", err, ep)
	}
	if testing.Verbose() {
		t.Log(err)
	}
	for _, tc := range []struct {
		cfg  EtcdConfig
		want string
	}{
		{EtcdConfig{}, "no etcd endpoints"},
		{EtcdConfig{Endpoints: []string{"127.0.0.1:2379"}}, `endpoint "127.0.0.1:2379"`},
		{EtcdConfig{Endpoints: []string{ep}, CertFile: "c.pem"}, "--etcd-keyfile"},
		{EtcdConfig{Endpoints: []string{ep}, Prefix: "minikit"}, `prefix "minikit"`},
	} {
		if _, err := OpenEtcd(context.Background(), tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("OpenEtcd(%+v) = %v, want an error with %q", tc.cfg, err, tc.want)
		}
	}
}

// The compactor discards history one interval old: a watch from the start then gets
// ErrExpired, as a Kubernetes client gets 410 Gone and relists.
func TestEtcdCompactor(t *testing.T) {
	ep := startTestEtcd(t)
	s := openTestEtcd(t, EtcdConfig{Endpoints: []string{ep}, CompactInterval: 20 * time.Millisecond})
	first, err := s.Update(func(tx Tx) error { return tx.Put("/k", []byte("1")) })
	if err != nil {
		t.Fatal(err)
	}
	s.Update(func(tx Tx) error { return tx.Put("/k", []byte("2")) })
	s.Update(func(tx Tx) error { return tx.Put("/k", []byte("3")) })
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithCancel(context.Background())
		_, err := s.Watch(ctx, "/", first-1)
		cancel()
		if errors.Is(err, ErrExpired) {
			break
		}
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("history not compacted after 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	kv, err := s.Get("/k")
	if err != nil || string(kv.Value) != "3" {
		t.Fatalf("get after compaction: %q %v", kv.Value, err)
	}
}

// A commit that failed its guard because etcd applied it before its predecessor is
// recognized by the sentinel holding an earlier token of the same store.
func TestOurEarlierToken(t *testing.T) {
	e := &Etcd{id: "abc"}
	for _, tc := range []struct {
		token string
		seq   uint64
		want  bool
	}{
		{"abc-3", 5, true},
		{"abc-5", 5, false}, // the predecessor itself: the guard would have held
		{"abc-7", 5, false},
		{"xyz-3", 5, false}, // another server's commit: a real conflict
		{"", 5, false},
		{"abc-x", 5, false},
	} {
		if got := e.ourEarlier(tc.token, tc.seq); got != tc.want {
			t.Errorf("ourEarlier(%q, %d) = %v, want %v", tc.token, tc.seq, got, tc.want)
		}
	}
}
