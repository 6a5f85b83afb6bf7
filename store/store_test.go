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

func openTest(t *testing.T, history int) (*Bolt, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "db")
	b, err := OpenBolt(path, history)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, path
}

func TestRevisionsAndPersistence(t *testing.T) {
	b, path := openTest(t, 0)
	rev, err := b.Update(func(tx Tx) error { return tx.Create("/a/1", []byte("one")) })
	if err != nil || rev != 1 {
		t.Fatalf("create: rev %d err %v", rev, err)
	}
	if _, err := b.Update(func(tx Tx) error { return tx.Create("/a/1", []byte("x")) }); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate create: got %v, want ErrExists", err)
	}
	rev, _ = b.Update(func(tx Tx) error {
		if err := tx.Put("/a/1", []byte("uno")); err != nil {
			return err
		}
		return tx.Create("/a/2", []byte("two"))
	})
	if rev != 2 {
		t.Fatalf("second txn rev = %d, want 2", rev)
	}
	kv, err := b.Get("/a/1")
	if err != nil || string(kv.Value) != "uno" || kv.CreateRev != 1 || kv.ModRev != 2 {
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
	b.Close()
	b2, err := OpenBolt(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	kvs, rev, err := b2.List("/a/")
	if err != nil || rev != 2 || len(kvs) != 2 {
		t.Fatalf("after reopen: %d keys at rev %d, err %v", len(kvs), rev, err)
	}
}

func TestWatchOrderResumeAndExpiry(t *testing.T) {
	b, _ := openTest(t, 10)
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
	var last int64
	for i := 0; i < 9; i++ {
		select {
		case e := <-live:
			if e.Rev <= last {
				t.Fatalf("event %d rev %d after %d: not in order", i, e.Rev, last)
			}
			last = e.Rev
			if i == 8 && (e.Type != Deleted || e.Key != "/w/3") {
				t.Fatalf("last event = %v %s, want DELETED /w/3", e.Type, e.Key)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("waited for event %d", i)
		}
	}
	// Resume from revision 5 replays 6..9.
	resumed, err := b.Watch(ctx, "/w/", 5)
	if err != nil {
		t.Fatal(err)
	}
	for want := int64(6); want <= 9; want++ {
		if e := <-resumed; e.Rev != want {
			t.Fatalf("resumed rev %d, want %d", e.Rev, want)
		}
	}
	// Push the history past its bound: revision 1 is gone.
	for i := 0; i < 20; i++ {
		b.Update(func(tx Tx) error { return tx.Put("/x", []byte{byte(i)}) })
	}
	if _, err := b.Watch(ctx, "/w/", 1); !errors.Is(err, ErrExpired) {
		t.Fatalf("watch from compacted rev: %v, want ErrExpired", err)
	}
}

// A failing function in a group commit leaves no trace and does not disturb the
// others committed with it.
func TestGroupCommitIsolatesFailures(t *testing.T) {
	b, _ := openTest(t, 0)
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
	if len(kvs) != ok+1 || rev != int64(ok) {
		t.Fatalf("%d keys at rev %d; want %d keys (+shared) at rev %d", len(kvs), rev, ok, ok)
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
		case <-time.After(5 * time.Second):
			t.Fatalf("got %d of %d events", i, 2*ok)
		}
	}
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
