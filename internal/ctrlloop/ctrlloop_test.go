package ctrlloop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/testutil"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// records is a slog handler that keeps every record, to assert levels and
// attributes.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.recs = append(r.recs, rec.Clone())
	r.mu.Unlock()
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

// lines renders the records of msg as "LEVEL msg attr=value ...", without
// durations.
func (r *records) lines(msg string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.recs {
		if rec.Message != msg {
			continue
		}
		s := rec.Level.String() + " " + rec.Message
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key != "duration" {
				s += " " + a.String()
			}
			return true
		})
		out = append(out, s)
	}
	return out
}

func (r *records) equal(msg string, want ...string) error {
	got := r.lines(msg)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("%q logs %q, want %q", msg, got, want)
	}
	return nil
}

func run(t *testing.T, l *Loop) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestRetriesWithBackoffUntilTheSyncSucceeds(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	logs := &records{}
	l := New(Config{Name: "test", KeyAttr: "service", Logger: slog.New(logs), Sync: func(_ context.Context, key string) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls < 3 {
			return errors.New("boom")
		}
		return nil
	}})
	run(t, l)
	l.Add("default/web")
	testutil.Eventually(t, 10*time.Second, "three syncs", func() error {
		mu.Lock()
		defer mu.Unlock()
		if calls != 3 {
			return fmt.Errorf("%d syncs", calls)
		}
		return nil
	})
	testutil.Eventually(t, 5*time.Second, "backoff forgotten and errors logged", func() error {
		if n := l.Queue.NumRequeues("default/web"); n != 0 {
			return fmt.Errorf("%d requeues remembered after a success", n)
		}
		return logs.equal("sync failed",
			"WARN sync failed service=default/web retries=0 err=boom",
			"WARN sync failed service=default/web retries=1 err=boom")
	})
}

func TestExpectedErrorsRetryQuietly(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "services"}, "web", errors.New("changed"))
	stale := errors.New("stale cache")
	for name, tc := range map[string]struct {
		expected func(error) bool
		err      error
	}{
		"a conflict, by default":         {nil, conflict},
		"what Expected says is expected": {func(err error) bool { return errors.Is(err, stale) }, stale},
	} {
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			calls := 0
			logs := &records{}
			l := New(Config{Name: "test", Expected: tc.expected, Logger: slog.New(logs), Sync: func(context.Context, string) error {
				mu.Lock()
				defer mu.Unlock()
				if calls++; calls == 1 {
					return tc.err
				}
				return nil
			}})
			run(t, l)
			l.Add("k")
			testutil.Eventually(t, 10*time.Second, "retried once, at debug level", func() error {
				mu.Lock()
				n := calls
				mu.Unlock()
				if n != 2 {
					return fmt.Errorf("%d syncs", n)
				}
				if err := logs.equal("sync failed"); err != nil {
					return err
				}
				return logs.equal("retrying", "DEBUG retrying key=k reason="+tc.err.Error())
			})
		})
	}
}

func TestWorkersSyncKeysInParallel(t *testing.T) {
	var mu sync.Mutex
	inFlight := map[string]bool{}
	release := make(chan struct{})
	l := New(Config{Name: "test", Workers: 2, Logger: testutil.Logger(t), Sync: func(_ context.Context, key string) error {
		mu.Lock()
		inFlight[key] = true
		mu.Unlock()
		<-release
		return nil
	}})
	run(t, l)
	defer close(release)
	l.Add("a")
	l.Add("b")
	testutil.Eventually(t, 10*time.Second, "both keys syncing at once", func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(inFlight) != 2 {
			return fmt.Errorf("in flight: %v", inFlight)
		}
		return nil
	})
}

func TestRunReturnsOnceTheContextEnds(t *testing.T) {
	started := make(chan struct{})
	l := New(Config{Name: "test", Logger: testutil.Logger(t), Sync: func(ctx context.Context, _ string) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	l.Add("k")
	<-started
	cancel()
	<-done // the sync in flight has returned, and no worker is left
	if n := l.Queue.Len(); n != 0 {
		t.Errorf("a key failed by the shutdown was requeued: %d queued", n)
	}
}
