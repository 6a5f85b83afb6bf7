package ctrlloop

import (
	"context"
	"time"
)

// Kicked is the loop of a controller that rebuilds everything it owns from
// its caches in one sync (the Ingress and Gateway control planes, the
// Gateway data plane) instead of one key at a time: event handlers Kick it;
// kicks that arrive while a sync waits or runs coalesce into one more sync.
type Kicked struct {
	kick chan struct{}
}

// NewKicked makes a loop; nothing runs until Run.
func NewKicked() *Kicked { return &Kicked{kick: make(chan struct{}, 1)} }

// Kick asks for a sync. It never blocks.
func (k *Kicked) Kick() {
	select {
	case k.kick <- struct{}{}:
	default: // a sync is already asked for
	}
}

// Backoff bounds of a failing sync's retries.
const (
	firstRetry = 100 * time.Millisecond
	maxRetry   = 5 * time.Second
)

// Run syncs once at the start and then after every kick, each time debounce
// after the kick so that a burst of changes costs one sync, until ctx ends.
// A sync that fails is retried without a kick, 100 ms later, doubling to
// 5 s; failed (if not nil) hears of each failure and the delay before the
// retry. A success resets the backoff. Errors after ctx ended are dropped.
func (k *Kicked) Run(ctx context.Context, debounce time.Duration, sync func(context.Context) error, failed func(err error, retry time.Duration)) {
	k.Kick()
	retry := time.Duration(0)
	for {
		var after <-chan time.Time
		if retry > 0 {
			after = time.After(retry)
		}
		select {
		case <-ctx.Done():
			return
		case <-k.kick:
		case <-after:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(debounce):
		}
		err := sync(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			retry = min(max(2*retry, firstRetry), maxRetry)
			if failed != nil {
				failed(err, retry)
			}
		default:
			retry = 0
		}
	}
}
