package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// queueBehind runs fns concurrently as Updates of s while the committer is held inside
// one update's function, so that they are queued when it returns and the committer
// takes them together. It returns each fn's Update result (index 0 is the holding
// update, which writes /hold).
func queueBehind(t *testing.T, s *Etcd, fns []func(tx Tx) error) (revs []int64, errs []error) {
	t.Helper()
	revs, errs = make([]int64, len(fns)+1), make([]error, len(fns)+1)
	var started atomic.Int32
	holding := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		revs[0], errs[0] = s.Update(func(tx Tx) error {
			select {
			case <-holding:
			default:
				close(holding)
				// Let every other update reach the committer's queue.
				for int(started.Load()) < len(fns) {
					time.Sleep(time.Millisecond)
				}
				time.Sleep(100 * time.Millisecond)
			}
			return tx.Put("/hold", []byte("x"))
		})
	}()
	<-holding
	for i, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started.Add(1)
			revs[i+1], errs[i+1] = s.Update(fn)
		}()
	}
	wg.Wait()
	return revs, errs
}

// Updates queued together commit as one etcd transaction: they share its revision,
// every function's Tx.Rev() is that revision, each later function sees the earlier
// ones' writes, and a failing or read-only function neither fails nor delays the
// others. A function writing a key an earlier one of the batch wrote goes into the
// next batch.
func TestEtcdGroupCommit(t *testing.T) {
	errFail := errors.New("failing on purpose")
	for _, tc := range []struct {
		name string
		n    int
		fn   func(i int) func(tx Tx) error
		// check gets each update's result and the revision its last run saw.
		check func(t *testing.T, s *Etcd, revs []int64, errs []error, txRevs []int64)
	}{
		{
			name: "distinct keys share a revision",
			n:    40,
			fn: func(i int) func(tx Tx) error {
				return func(tx Tx) error {
					return tx.Create(fmt.Sprintf("/b/%02d", i), []byte(strconv.FormatInt(tx.Rev(), 10)))
				}
			},
			check: func(t *testing.T, s *Etcd, revs []int64, errs []error, _ []int64) {
				kvs, _, _ := s.List("/b/")
				if len(kvs) != 40 {
					t.Fatalf("%d keys, want 40", len(kvs))
				}
				for _, kv := range kvs {
					if string(kv.Value) != strconv.FormatInt(kv.ModRev, 10) {
						t.Errorf("%s: Tx.Rev() said %s, committed at %d", kv.Key, kv.Value, kv.ModRev)
					}
				}
			},
		},
		{
			name: "a failing function does not fail the others",
			n:    30,
			fn: func(i int) func(tx Tx) error {
				return func(tx Tx) error {
					if err := tx.Create(fmt.Sprintf("/f/%02d", i), nil); err != nil {
						return err
					}
					if i%3 == 0 {
						return fmt.Errorf("%w: %d", errFail, i)
					}
					return nil
				}
			},
			check: func(t *testing.T, s *Etcd, revs []int64, errs []error, _ []int64) {
				for i := 1; i < len(errs); i++ {
					_, gerr := s.Get(fmt.Sprintf("/f/%02d", i-1))
					if (i-1)%3 == 0 {
						if !errors.Is(errs[i], errFail) || !errors.Is(gerr, ErrNotFound) {
							t.Errorf("update %d: err %v, key: %v; want its own error and no key", i-1, errs[i], gerr)
						}
					} else if errs[i] != nil || gerr != nil {
						t.Errorf("update %d: err %v, key: %v; want it committed", i-1, errs[i], gerr)
					}
				}
			},
		},
		{
			name: "a read-only function answers at the batch's revision",
			n:    20,
			fn: func(i int) func(tx Tx) error {
				if i%2 == 1 { // reads what the holding update wrote in the same batch
					return func(tx Tx) error {
						if kv, ok := tx.Get("/hold"); !ok || kv.ModRev != tx.Rev() {
							return fmt.Errorf("/hold not seen as written at %d: %+v", tx.Rev(), kv)
						}
						return nil
					}
				}
				return func(tx Tx) error { return tx.Create(fmt.Sprintf("/r/%02d", i), nil) }
			},
			check: func(t *testing.T, s *Etcd, revs []int64, errs []error, txRevs []int64) {
				hold, err := s.Get("/hold")
				if err != nil {
					t.Fatal(err)
				}
				for i := 2; i < len(revs); i += 2 {
					if errs[i] != nil {
						t.Fatalf("read-only update %d: %v", i-1, errs[i])
					}
					if revs[i] != hold.ModRev {
						t.Errorf("read-only update %d answered revision %d, want the batch's %d", i-1, revs[i], hold.ModRev)
					}
				}
			},
		},
		{
			name: "one key is written once per revision",
			n:    30,
			fn: func(i int) func(tx Tx) error {
				return func(tx Tx) error {
					n := 0
					if kv, ok := tx.Get("/counter"); ok {
						n, _ = strconv.Atoi(string(kv.Value))
					}
					return tx.Put("/counter", []byte(strconv.Itoa(n+1)))
				}
			},
			check: func(t *testing.T, s *Etcd, revs []int64, errs []error, _ []int64) {
				if kv, err := s.Get("/counter"); err != nil || string(kv.Value) != "30" {
					t.Fatalf("counter = %q (%v), want 30", kv.Value, err)
				}
				seen := map[int64]bool{}
				for _, r := range revs[1:] {
					if seen[r] {
						t.Fatalf("two increments committed at revision %d", r)
					}
					seen[r] = true
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ep := startTestEtcd(t)
			s := openTestEtcd(t, EtcdConfig{Endpoints: []string{ep}, CompactInterval: -1})
			txRevs := make([]int64, tc.n+1)
			fns := make([]func(tx Tx) error, tc.n)
			for i := range fns {
				fn := tc.fn(i)
				fns[i] = func(tx Tx) error {
					txRevs[i+1] = tx.Rev() // written by the committer only
					return fn(tx)
				}
			}
			revs, errs := queueBehind(t, s, fns)
			if errs[0] != nil {
				t.Fatal(errs[0])
			}
			for i, err := range errs {
				if err == nil && i > 0 && revs[i] != txRevs[i] {
					t.Errorf("update %d returned revision %d, its Tx.Rev() was %d", i-1, revs[i], txRevs[i])
				}
			}
			tc.check(t, s, revs, errs, txRevs)
			shared := map[int64]int{}
			for i, r := range revs {
				if errs[i] == nil {
					shared[r]++
				}
			}
			most := 0
			for _, n := range shared {
				most = max(most, n)
			}
			t.Logf("%d updates committed at %d revisions (at most %d at one)", len(revs), len(shared), most)
			if tc.name != "one key is written once per revision" && most < 2 {
				t.Errorf("no two queued updates share a revision: %v", revs)
			}
		})
	}
}

// 200 concurrent increments of one counter are exact and each lands at a revision of
// its own, with the value it read one less than the value it wrote.
func TestEtcdSameKeyNeverSharesRevision(t *testing.T) {
	ep := startTestEtcd(t)
	s := openTestEtcd(t, EtcdConfig{Endpoints: []string{ep}, CompactInterval: -1})
	const n = 200
	type result struct {
		rev   int64
		value int
		err   error
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var wrote int
			rev, err := s.Update(func(tx Tx) error {
				v := 0
				if kv, ok := tx.Get("/counter"); ok {
					v, _ = strconv.Atoi(string(kv.Value))
				}
				wrote = v + 1
				// Other keys in the same update may share the revision with other updates.
				if err := tx.Put(fmt.Sprintf("/own/%03d", i), nil); err != nil {
					return err
				}
				return tx.Put("/counter", []byte(strconv.Itoa(wrote)))
			})
			results[i] = result{rev, wrote, err}
		}()
	}
	wg.Wait()
	slices.SortFunc(results, func(a, b result) int { return int(a.rev - b.rev) })
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("increment: %v", r.err)
		}
		if r.value != i+1 {
			t.Fatalf("the increment at revision %d wrote %d, want %d (revisions %v)", r.rev, r.value, i+1, results)
		}
		if i > 0 && r.rev == results[i-1].rev {
			t.Fatalf("two increments committed at revision %d", r.rev)
		}
	}
	if kv, err := s.Get("/counter"); err != nil || string(kv.Value) != strconv.Itoa(n) {
		t.Fatalf("counter = %q (%v), want %d", kv.Value, err, n)
	}
}

// A batch stays within MaxTxnOps (the sentinel counts); an update larger than the
// limit by itself is sent alone.
func TestEtcdBatchLimit(t *testing.T) {
	ep := startTestEtcd(t) // the etcd allows 10,000 operations; the store is told 8
	s := openTestEtcd(t, EtcdConfig{Endpoints: []string{ep}, CompactInterval: -1, MaxTxnOps: 8})
	fns := make([]func(tx Tx) error, 30)
	for i := range fns {
		fns[i] = func(tx Tx) error {
			keys := 3
			if i == 10 {
				keys = 20
			}
			for k := range keys {
				if err := tx.Create(fmt.Sprintf("/l/%02d/%02d", i, k), nil); err != nil {
					return err
				}
			}
			return nil
		}
	}
	revs, errs := queueBehind(t, s, fns)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("update %d: %v", i-1, err)
		}
	}
	kvs, _, _ := s.List("/")
	perRev := map[int64]int{}
	for _, kv := range kvs {
		perRev[kv.ModRev]++
	}
	for rev, n := range perRev {
		if rev != revs[11] && n+1 > 8 {
			t.Errorf("revision %d wrote %d keys and the sentinel, over MaxTxnOps 8", rev, n)
		}
	}
	if perRev[revs[11]] != 20 {
		t.Errorf("the 20-key update shares revision %d: %d keys there", revs[11], perRev[revs[11]])
	}
	most := 0
	for _, n := range perRev {
		most = max(most, n)
	}
	if most < 6 {
		t.Errorf("no batch of two 3-key updates: keys per revision %v", perRev)
	}
}

// A watch delivers one revision's events whole: a watcher that falls behind is closed
// before a revision, never within one (its caller resumes from the last revision it
// saw), and a revision larger than the buffer waits for room instead.
func TestEtcdWatchDeliversRevisionsWhole(t *testing.T) {
	ep := startTestEtcd(t)
	s := openTestEtcd(t, EtcdConfig{Endpoints: []string{ep}, CompactInterval: -1})
	write := func(prefix string, n int) int64 {
		t.Helper()
		rev, err := s.Update(func(tx Tx) error {
			for i := range n {
				if err := tx.Put(fmt.Sprintf("%s/%05d", prefix, i), nil); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	for _, tc := range []struct {
		name  string
		sizes []int // keys written by successive updates, none read meanwhile
		// mayClose: the watcher falls behind (the second revision no longer fits);
		// otherwise every event must arrive.
		mayClose bool
	}{
		{"a revision that no longer fits is not begun", []int{watcherBuffer - 6, 10}, true},
		{"a revision larger than the buffer waits for room", []int{watcherBuffer + 100}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			prefix := fmt.Sprintf("/w%d", len(tc.sizes))
			ch, err := s.Watch(ctx, prefix+"/", 0)
			if err != nil {
				t.Fatal(err)
			}
			var revs []int64
			want := 0
			for i, n := range tc.sizes {
				revs = append(revs, write(fmt.Sprintf("%s/%d", prefix, i), n))
				want += n
			}
			time.Sleep(200 * time.Millisecond) // let the watch fill its buffer before reading
			got := map[int64]int{}
			total := 0
			closed := false
			timeout := time.After(20 * time.Second)
			for total < want && !closed {
				select {
				case e, ok := <-ch:
					if !ok {
						closed = true
						break
					}
					got[e.Rev]++
					total++
				case <-timeout:
					t.Fatalf("%d events, want %d", total, want)
				}
			}
			if closed && !tc.mayClose {
				t.Fatalf("closed after %d events, want %d", total, want)
			}
			for i, rev := range revs {
				if n := got[rev]; n != 0 && n != tc.sizes[i] {
					t.Errorf("revision %d: %d of its %d events delivered", rev, n, tc.sizes[i])
				}
			}
			t.Logf("%d events delivered, closed: %v", total, closed)
		})
	}
}
