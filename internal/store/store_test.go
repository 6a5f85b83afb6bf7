package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// backend is one store implementation the shared tests run against.
type backend struct {
	name string
	// open returns a new empty store with room for at least history events of watch
	// history, and a function that closes and reopens it on the same data.
	open func(t *testing.T, history int) (Interface, func() Interface)
	// expire makes revisions up to rev unavailable to watches (bbolt's bounded history
	// already did; etcd compacts).
	expire func(t *testing.T, s Interface, rev int64)
}

func backends() []backend {
	return []backend{
		{
			name: "bolt",
			open: func(t *testing.T, history int) (Interface, func() Interface) {
				path := filepath.Join(t.TempDir(), "db")
				b, err := OpenBolt(path, history)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Close() })
				return b, func() Interface {
					b.Close()
					b2, err := OpenBolt(path, history)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { b2.Close() })
					return b2
				}
			},
			expire: func(*testing.T, Interface, int64) {},
		},
		{
			name: "etcd",
			open: func(t *testing.T, _ int) (Interface, func() Interface) {
				ep := startTestEtcd(t)
				e := openTestEtcd(t, EtcdConfig{Endpoints: []string{ep}, CompactInterval: -1})
				return e, func() Interface {
					e.Close()
					return openTestEtcd(t, EtcdConfig{Endpoints: []string{ep}, CompactInterval: -1})
				}
			},
			expire: func(t *testing.T, s Interface, rev int64) {
				if err := s.(*Etcd).Compact(rev); err != nil {
					t.Fatal(err)
				}
			},
		},
	}
}

// forEach runs test as one subtest per backend.
func forEach(t *testing.T, test func(t *testing.T, be backend)) {
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) { test(t, be) })
	}
}

func TestRevisionsAndPersistence(t *testing.T) {
	forEach(t, func(t *testing.T, be backend) {
		b, reopen := be.open(t, 0)
		base := b.Rev()
		rev, err := b.Update(func(tx Tx) error { return tx.Create("/a/1", []byte("one")) })
		if err != nil || rev != base+1 {
			t.Fatalf("create: rev %d err %v, want rev %d", rev, err, base+1)
		}
		if _, err := b.Update(func(tx Tx) error { return tx.Create("/a/1", []byte("x")) }); !errors.Is(err, ErrExists) {
			t.Fatalf("duplicate create: got %v, want ErrExists", err)
		}
		var txRev int64
		rev, _ = b.Update(func(tx Tx) error {
			txRev = tx.Rev()
			if err := tx.Put("/a/1", []byte("uno")); err != nil {
				return err
			}
			return tx.Create("/a/2", []byte("two"))
		})
		if rev != base+2 || txRev != rev {
			t.Fatalf("second txn rev = %d (tx.Rev() said %d), want %d", rev, txRev, base+2)
		}
		kv, err := b.Get("/a/1")
		if err != nil || string(kv.Value) != "uno" || kv.CreateRev != base+1 || kv.ModRev != base+2 {
			t.Fatalf("get: %+v %v", kv, err)
		}
		// A failing transaction writes nothing and does not bump the revision.
		if _, err := b.Update(func(tx Tx) error {
			tx.Put("/a/3", []byte("three"))
			return fmt.Errorf("boom")
		}); err == nil {
			t.Fatal("failing txn returned nil")
		}
		if _, err := b.Get("/a/3"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("rolled-back key visible: %v", err)
		}
		if r := b.Rev(); r != base+2 {
			t.Fatalf("revision after a failed txn = %d, want %d", r, base+2)
		}
		b2 := reopen()
		kvs, rev, err := b2.List("/a/")
		if err != nil || rev != base+2 || len(kvs) != 2 {
			t.Fatalf("after reopen: %d keys at rev %d, err %v", len(kvs), rev, err)
		}
	})
}

// A transaction sees its own writes (Get and List), and its net effect is committed.
func TestTxSeesOwnWrites(t *testing.T) {
	forEach(t, func(t *testing.T, be backend) {
		b, _ := be.open(t, 0)
		b.Update(func(tx Tx) error {
			tx.Put("/o/a", []byte("a"))
			tx.Put("/o/c", []byte("c"))
			return tx.Put("/o/gone", []byte("g"))
		})
		_, err := b.Update(func(tx Tx) error {
			if err := tx.Create("/o/b", []byte("b")); err != nil {
				return err
			}
			if err := tx.Delete("/o/gone"); err != nil {
				return err
			}
			if err := tx.Put("/o/c", []byte("c2")); err != nil {
				return err
			}
			if err := tx.Create("/o/tmp", nil); err != nil {
				return err
			}
			if err := tx.Delete("/o/tmp"); err != nil {
				return err
			}
			if err := tx.Delete("/o/tmp"); !errors.Is(err, ErrNotFound) {
				return fmt.Errorf("second delete: %v, want ErrNotFound", err)
			}
			if _, ok := tx.Get("/o/gone"); ok {
				return errors.New("deleted key visible in its transaction")
			}
			if kv, ok := tx.Get("/o/b"); !ok || string(kv.Value) != "b" || kv.ModRev != tx.Rev() || kv.CreateRev != tx.Rev() {
				return fmt.Errorf("created key in its transaction: %+v %v", kv, ok)
			}
			var got []string
			for _, kv := range tx.List("/o/") {
				got = append(got, kv.Key+"="+string(kv.Value))
			}
			if want := "[/o/a=a /o/b=b /o/c=c2]"; fmt.Sprint(got) != want {
				return fmt.Errorf("list in transaction = %v, want %s", got, want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		kvs, _, _ := b.List("/o/")
		var got []string
		for _, kv := range kvs {
			got = append(got, kv.Key+"="+string(kv.Value))
		}
		if want := "[/o/a=a /o/b=b /o/c=c2]"; fmt.Sprint(got) != want {
			t.Fatalf("list after commit = %v, want %s", got, want)
		}
		// A transaction that writes nothing commits nothing.
		before := b.Rev()
		rev, err := b.Update(func(tx Tx) error { tx.Get("/o/a"); return nil })
		if err != nil || rev != before || b.Rev() != before {
			t.Fatalf("read-only txn: rev %d err %v, store at %d; want %d", rev, err, b.Rev(), before)
		}
	})
}

// Watch events carry what the interface promises: Added with the value, Modified
// with the previous value, Deleted with the last value.
func TestWatchEventShapes(t *testing.T) {
	forEach(t, func(t *testing.T, be backend) {
		b, _ := be.open(t, 0)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch, err := b.Watch(ctx, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		r1, _ := b.Update(func(tx Tx) error { return tx.Create("/s/k", []byte("v1")) })
		r2, _ := b.Update(func(tx Tx) error { return tx.Put("/s/k", []byte("v2")) })
		r3, _ := b.Update(func(tx Tx) error { return tx.Delete("/s/k") })
		want := []Event{
			{Type: Added, Key: "/s/k", Value: []byte("v1"), Rev: r1},
			{Type: Modified, Key: "/s/k", Value: []byte("v2"), Prev: []byte("v1"), Rev: r2},
			{Type: Deleted, Key: "/s/k", Value: []byte("v2"), Rev: r3},
		}
		for i, w := range want {
			select {
			case e := <-ch:
				if e.Type != w.Type || e.Key != w.Key || string(e.Value) != string(w.Value) || string(e.Prev) != string(w.Prev) || e.Rev != w.Rev {
					t.Fatalf("event %d = %v %s %q prev %q rev %d; want %v %s %q prev %q rev %d",
						i, e.Type, e.Key, e.Value, e.Prev, e.Rev, w.Type, w.Key, w.Value, w.Prev, w.Rev)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("waited for event %d", i)
			}
		}
		cancel()
		for range ch { // closes when the context ends
		}
	})
}

func TestWatchOrderResumeAndExpiry(t *testing.T) {
	forEach(t, func(t *testing.T, be backend) {
		b, _ := be.open(t, 10)
		base := b.Rev()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		live, err := b.Watch(ctx, "/w/", 0)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				b.Update(func(tx Tx) error { return tx.Create(fmt.Sprintf("/w/%d", i), nil) })
			}(i)
		}
		wg.Wait()
		b.Update(func(tx Tx) error { return tx.Delete("/w/3") })
		// Revisions never go back; several updates may share one (etcd commits
		// concurrent updates together), never a key.
		var seen []Event
		for i := 0; i < 9; i++ {
			select {
			case e := <-live:
				if n := len(seen); n > 0 && (e.Rev < seen[n-1].Rev || e.Rev == seen[n-1].Rev && e.Key == seen[n-1].Key) {
					t.Fatalf("event %d %s rev %d after %s %d: not in order", i, e.Key, e.Rev, seen[n-1].Key, seen[n-1].Rev)
				}
				seen = append(seen, e)
				if i == 8 && (e.Type != Deleted || e.Key != "/w/3") {
					t.Fatalf("last event = %v %s, want DELETED /w/3", e.Type, e.Key)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("waited for event %d", i)
			}
		}
		// Resuming from the revision of the fifth event replays every later one.
		from := seen[4].Rev
		resumed, err := b.Watch(ctx, "/w/", from)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range seen {
			if want.Rev <= from {
				continue
			}
			if e := <-resumed; e.Rev != want.Rev || e.Key != want.Key {
				t.Fatalf("resumed %s rev %d, want %s rev %d", e.Key, e.Rev, want.Key, want.Rev)
			}
		}
		// Push the history past its bound: revision base+1 is gone.
		for i := 0; i < 20; i++ {
			b.Update(func(tx Tx) error { return tx.Put("/x", []byte{byte(i)}) })
		}
		be.expire(t, b, b.Rev()-5)
		if _, err := b.Watch(ctx, "/w/", base+1); !errors.Is(err, ErrExpired) {
			t.Fatalf("watch from compacted rev: %v, want ErrExpired", err)
		}
		// The recent history is still there.
		if _, err := b.Watch(ctx, "/w/", b.Rev()-2); err != nil {
			t.Fatalf("watch from a recent revision: %v", err)
		}
	})
}

// A failing function among concurrent updates leaves no trace and does not disturb
// the others (bbolt commits them together).
func TestGroupCommitIsolatesFailures(t *testing.T) {
	forEach(t, func(t *testing.T, be backend) {
		b, _ := be.open(t, 0)
		base := b.Rev()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		events, _ := b.Watch(ctx, "/g/", 0)
		var wg sync.WaitGroup
		errs := make([]error, 200)
		for i := 0; i < 200; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				_, errs[i] = b.Update(func(tx Tx) error {
					if err := tx.Put(fmt.Sprintf("/g/%d", i), []byte("x")); err != nil {
						return err
					}
					tx.Put("/g/shared", []byte(fmt.Sprint(i)))
					if i%3 == 0 {
						return fmt.Errorf("fail %d", i)
					}
					return nil
				})
			}(i)
		}
		wg.Wait()
		kvs, rev, _ := b.List("/g/")
		ok := 0
		for i, err := range errs {
			_, gerr := b.Get(fmt.Sprintf("/g/%d", i))
			if (err == nil) != (gerr == nil) {
				t.Fatalf("update %d: err %v but key present=%v", i, err, gerr == nil)
			}
			if err == nil {
				ok++
			}
		}
		if len(kvs) != ok+1 || rev != base+int64(ok) {
			t.Fatalf("%d keys at rev %d; want %d keys (+shared) at rev %d", len(kvs), rev, ok, base+int64(ok))
		}
		shared, _ := b.Get("/g/shared")
		var n int
		fmt.Sscan(string(shared.Value), &n)
		if n%3 == 0 {
			t.Fatalf("shared key holds %d, written by a failed update", n)
		}
		var last int64
		for i := 0; i < 2*ok; i++ {
			select {
			case e := <-events:
				if e.Rev < last {
					t.Fatalf("event rev %d after %d", e.Rev, last)
				}
				last = e.Rev
			case <-time.After(10 * time.Second):
				t.Fatalf("got %d of %d events", i, 2*ok)
			}
		}
	})
}

// After Close every call fails with ErrClosed and watches end.
func TestClose(t *testing.T) {
	forEach(t, func(t *testing.T, be backend) {
		b, _ := be.open(t, 0)
		ch, err := b.Watch(context.Background(), "/", 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		for range ch {
		}
		if _, err := b.Update(func(tx Tx) error { return tx.Put("/k", nil) }); !errors.Is(err, ErrClosed) {
			t.Errorf("update after close: %v, want ErrClosed", err)
		}
		if _, err := b.Watch(context.Background(), "/", 0); !errors.Is(err, ErrClosed) {
			t.Errorf("watch after close: %v, want ErrClosed", err)
		}
	})
}

// The history is bounded in bytes as well as in events: big objects push the
// oldest revisions out (a watch from before them gets ErrExpired, as after a
// compaction) and the history never holds more than the bound.
func TestHistoryBytesBound(t *testing.T) {
	h := newHub(1000, 0)
	h.maxBytes = 10 << 10
	big := make([]byte, 1<<10)
	for rev := int64(1); rev <= 50; rev++ {
		h.publish(rev, []Event{{Type: Modified, Key: "/k", Value: big, Prev: big, Rev: rev}})
		if h.bytes > h.maxBytes {
			t.Fatalf("after revision %d the history holds %d bytes, bound %d", rev, h.bytes, h.maxBytes)
		}
	}
	if h.size == 0 || h.size >= 10 {
		t.Fatalf("history holds %d events of 2 KiB under a 10 KiB bound", h.size)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := h.watch(ctx, "/", 1); !errors.Is(err, ErrExpired) {
		t.Errorf("watch from revision 1 = %v, want ErrExpired", err)
	}
	ch, err := h.watch(ctx, "/", 48)
	if err != nil {
		t.Fatalf("watch from revision 48: %v", err)
	}
	for _, want := range []int64{49, 50} {
		if e := <-ch; e.Rev != want {
			t.Errorf("resumed watch delivered revision %d, want %d", e.Rev, want)
		}
	}
}

// A watch whose context never ends does not outlive the hub: closing the
// store ends the goroutine that waited for the context, so a server whose
// watches run under a long-lived context leaks nothing when its store closes.
func TestHubCloseEndsWatchGoroutines(t *testing.T) {
	h := newHub(100, 0)
	ch, err := h.watch(context.Background(), "/", 0)
	if err != nil {
		t.Fatal(err)
	}
	w := func() *watcher {
		h.mu.Lock()
		defer h.mu.Unlock()
		for w := range h.watchers {
			return w
		}
		return nil
	}()
	h.close()
	if _, ok := <-ch; ok {
		t.Fatal("the watch channel is open after close")
	}
	select {
	case <-w.dropped:
	default:
		t.Fatal("the watcher's dropped channel is open after close: its goroutine would wait forever")
	}
}
