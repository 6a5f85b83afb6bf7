package ctrlloop

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/testutil"
)

// TestKickedSyncsAtStartAndOnKicks: one sync at the start, one per kick, a
// burst of kicks during the debounce costs one sync, and Run returns when
// ctx ends.
func TestKickedSyncsAtStartAndOnKicks(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	k := NewKicked()
	var mu sync.Mutex
	syncs := 0
	count := func() int { mu.Lock(); defer mu.Unlock(); return syncs }
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.Run(ctx, 50*time.Millisecond, func(context.Context) error {
			mu.Lock()
			syncs++
			mu.Unlock()
			return nil
		}, nil)
	}()
	testutil.Eventually(t, 10*time.Second, "the first sync", func() error {
		if n := count(); n != 1 {
			return errors.New("not yet")
		}
		return nil
	})
	for range 10 {
		k.Kick()
	}
	testutil.Eventually(t, 10*time.Second, "one sync for the burst", func() error {
		if n := count(); n < 2 {
			return errors.New("not yet")
		}
		return nil
	})
	// The burst fits in one buffered kick: at most one more sync follows.
	if n := count(); n > 3 {
		t.Errorf("%d syncs for a burst of 10 kicks, want at most 2 after the first", n-1)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctx ended")
	}
}

// TestKickedRetriesFailuresWithBackoff: a failing sync is retried without a
// kick, with doubling delays from 100 ms, and the backoff resets after a
// success.
func TestKickedRetriesFailuresWithBackoff(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k := NewKicked()
	var mu sync.Mutex
	var retries []time.Duration
	calls := 0
	go k.Run(ctx, time.Millisecond, func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls <= 3 {
			return errors.New("boom")
		}
		return nil
	}, func(err error, retry time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		retries = append(retries, retry)
	})
	testutil.Eventually(t, 10*time.Second, "three failures then a success", func() error {
		mu.Lock()
		defer mu.Unlock()
		if calls < 4 {
			return errors.New("not yet")
		}
		return nil
	})
	mu.Lock()
	got := append([]time.Duration(nil), retries...)
	mu.Unlock()
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}
	if len(got) != len(want) {
		t.Fatalf("retry delays %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("retry delays %v, want %v", got, want)
		}
	}
}
