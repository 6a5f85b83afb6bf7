// Package ctrlloop is the worker side of a level-triggered controller, as
// Kubernetes' controllers write it by hand each time: a rate-limited
// client-go workqueue of keys, workers that call a sync function per key,
// retry with per-key exponential backoff on error, and an orderly shutdown.
// The controllers and the load-balancer controller run the same loop; this
// package is that loop once, so retries, logging and shutdown stay alike.
//
// A sync's error decides what happens to its key: nil forgets the key's
// backoff; any error requeues the key rate-limited (workqueue's default
// controller limiter: per-key exponential from 5 ms to 1000 s, and a shared
// 10 qps bucket). Errors that Expected accepts (a conflict, a stale cache) are
// logged at debug level only; the others are warnings. When the context has
// ended the key is dropped: the loop is shutting down.
package ctrlloop

import (
	"context"
	"log/slog"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/util/workqueue"
)

// slowSync is how long a sync may take before it is logged as a warning.
const slowSync = 2 * time.Second

// Config describes one loop.
type Config struct {
	// Name names the queue (workqueue metrics) and the loop.
	Name string
	// Workers is the number of goroutines running Sync (default 1). Two
	// workers never sync the same key at once.
	Workers int
	// Sync reconciles one key.
	Sync func(ctx context.Context, key string) error
	// Expected reports whether a sync error is a routine retry, logged at
	// debug level (default: an API conflict).
	Expected func(error) bool
	// KeyAttr is the log attribute of the key (default "key").
	KeyAttr string
	// Logger gets the loop's logs (default slog.Default()).
	Logger *slog.Logger
}

// Loop is a work queue with its workers.
type Loop struct {
	// Queue is the loop's queue, for AddAfter and the like.
	Queue workqueue.TypedRateLimitingInterface[string]

	cfg Config
	log *slog.Logger
	wg  sync.WaitGroup
}

// New makes a loop; nothing runs until Start.
func New(cfg Config) *Loop {
	if cfg.Workers <= 0 {
		cfg.Workers = 1
	}
	if cfg.Expected == nil {
		cfg.Expected = apierrors.IsConflict
	}
	if cfg.KeyAttr == "" {
		cfg.KeyAttr = "key"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Loop{
		Queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: cfg.Name}),
		cfg: cfg,
		log: cfg.Logger,
	}
}

// Name is the loop's name.
func (l *Loop) Name() string { return l.cfg.Name }

// Add queues key.
func (l *Loop) Add(key string) { l.Queue.Add(key) }

// Start starts the workers; they run until ShutDown.
func (l *Loop) Start(ctx context.Context) {
	for range l.cfg.Workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer utilruntime.HandleCrashWithContext(ctx)
			for l.next(ctx) {
			}
		}()
	}
}

// ShutDown stops the queue: the workers finish the keys they hold and
// return. It does not wait for them (Wait does), so several loops can be
// told to stop before any is waited for.
func (l *Loop) ShutDown() { l.Queue.ShutDown() }

// Wait waits for the workers to return after ShutDown.
func (l *Loop) Wait() { l.wg.Wait() }

// Run starts the workers, and when ctx ends shuts the queue down and waits
// for them.
func (l *Loop) Run(ctx context.Context) {
	l.Start(ctx)
	<-ctx.Done()
	l.ShutDown()
	l.Wait()
}

func (l *Loop) next(ctx context.Context) bool {
	key, quit := l.Queue.Get()
	if quit {
		return false
	}
	defer l.Queue.Done(key)
	start := time.Now()
	err := l.cfg.Sync(ctx, key)
	switch {
	case err == nil:
		l.Queue.Forget(key)
	case ctx.Err() != nil:
	case l.cfg.Expected(err):
		l.log.Debug("retrying", l.cfg.KeyAttr, key, "reason", err)
		l.Queue.AddRateLimited(key)
	default:
		l.log.Warn("sync failed", l.cfg.KeyAttr, key, "retries", l.Queue.NumRequeues(key), "err", err)
		l.Queue.AddRateLimited(key)
	}
	if d := time.Since(start); d >= slowSync {
		// A slow sync holds a worker: keys queued behind it wait. Worth a
		// line when a client's wait times out.
		l.log.Warn("slow sync", l.cfg.KeyAttr, key, "duration", d, "queued", l.Queue.Len())
	} else {
		l.log.Debug("sync", l.cfg.KeyAttr, key, "duration", d)
	}
	return true
}
