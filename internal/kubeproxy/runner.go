package kubeproxy

import (
	"context"
	"time"
)

// Clock is the time source of the sync runner and the flush monitor; tests
// inject a fake one.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// boundedRunner is kube-proxy's BoundedFrequencyRunner: Run asks for a call of
// fn; calls are at least minInterval apart start to start, with a burst of
// `burst` calls allowed after a quiet period (a token bucket), at most
// maxInterval apart (the periodic sync), and a failed call is retried after
// retryInterval. Requests that arrive while fn runs or while the runner waits
// for a token collapse into one call: that is the debouncing.
type boundedRunner struct {
	fn            func() error
	minInterval   time.Duration
	maxInterval   time.Duration
	retryInterval time.Duration
	burst         float64
	clock         Clock
	trigger       chan struct{}
}

func newBoundedRunner(fn func() error, minInterval, maxInterval, retryInterval time.Duration, burst int, clock Clock) *boundedRunner {
	return &boundedRunner{fn: fn, minInterval: minInterval, maxInterval: maxInterval,
		retryInterval: retryInterval, burst: float64(burst), clock: clock, trigger: make(chan struct{}, 1)}
}

// Run requests a call; it never blocks.
func (r *boundedRunner) Run() {
	select {
	case r.trigger <- struct{}{}:
	default:
	}
}

// Loop runs until ctx ends. The first call happens on the first Run.
func (r *boundedRunner) Loop(ctx context.Context) {
	tokens, refilled := r.burst, r.clock.Now()
	lastRun := r.clock.Now()
	var retryAt time.Time
	for {
		next := lastRun.Add(r.maxInterval)
		if !retryAt.IsZero() && retryAt.Before(next) {
			next = retryAt
		}
		select {
		case <-ctx.Done():
			return
		case <-r.trigger:
		case <-r.clock.After(next.Sub(r.clock.Now())):
		}
		// Take a token, waiting for one if the bucket is empty.
		for {
			now := r.clock.Now()
			if r.minInterval > 0 {
				tokens += float64(now.Sub(refilled)) / float64(r.minInterval)
			} else {
				tokens = r.burst
			}
			refilled = now
			if tokens > r.burst {
				tokens = r.burst
			}
			if tokens >= 1 {
				tokens--
				break
			}
			wait := time.Duration((1 - tokens) * float64(r.minInterval))
			select {
			case <-ctx.Done():
				return
			case <-r.clock.After(wait):
			}
		}
		// Requests made up to now are served by this call.
		select {
		case <-r.trigger:
		default:
		}
		lastRun = r.clock.Now()
		if err := r.fn(); err != nil {
			retryAt = lastRun.Add(r.retryInterval)
		} else {
			retryAt = time.Time{}
		}
	}
}
