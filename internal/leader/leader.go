// Package leader runs the cluster's singletons (the controllers, the
// load-balancer allocator, the ingress control plane) on exactly one of several
// minikit servers, as kube-controller-manager does: the servers campaign for a
// coordination.k8s.io Lease (client-go's tools/leaderelection with a LeaseLock),
// the holder runs the singletons, and a holder that stops renewing — crashed,
// partitioned, or stopped — is replaced once the lease expires.
//
// Unlike kube-controller-manager, which exits when it loses the lease, a
// minikit server stops its singletons, waits for them to return, and campaigns
// again: the per-server parts of the process (the API, this node's agent) keep
// running, and the singletons never run twice in one process. A server that
// stops releases the lease only after its singletons have returned, so a
// graceful handover never runs them on two servers at once.
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// The lease the minikit servers campaign for, next to kube-controller-manager's.
const (
	DefaultNamespace = "kube-system"
	DefaultName      = "minikit-controller-manager"
)

// Timing is the election's timing. Zero fields take kube-controller-manager's
// defaults (--leader-elect-lease-duration=15s, --leader-elect-renew-deadline=10s,
// --leader-elect-retry-period=2s).
type Timing struct {
	// LeaseDuration is how long a lease not renewed keeps others from taking it.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader retries renewing before it gives up
	// leading (must be less than LeaseDuration).
	RenewDeadline time.Duration
	// RetryPeriod is the interval between attempts to acquire or renew.
	RetryPeriod time.Duration
}

// DefaultTiming is kube-controller-manager's.
var DefaultTiming = Timing{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}

func (t Timing) withDefaults() Timing {
	if t.LeaseDuration == 0 {
		t.LeaseDuration = DefaultTiming.LeaseDuration
	}
	if t.RenewDeadline == 0 {
		t.RenewDeadline = DefaultTiming.RenewDeadline
	}
	if t.RetryPeriod == 0 {
		t.RetryPeriod = DefaultTiming.RetryPeriod
	}
	return t
}

// Validate checks the relations client-go requires, naming the field.
func (t Timing) Validate() error {
	t = t.withDefaults()
	switch {
	case t.LeaseDuration <= t.RenewDeadline:
		return fmt.Errorf("leader election: lease duration %s must be greater than renew deadline %s", t.LeaseDuration, t.RenewDeadline)
	case t.RenewDeadline <= time.Duration(leaderelection.JitterFactor*float64(t.RetryPeriod)):
		return fmt.Errorf("leader election: renew deadline %s must be greater than %.1f x retry period %s", t.RenewDeadline, leaderelection.JitterFactor, t.RetryPeriod)
	case t.RetryPeriod <= 0:
		return fmt.Errorf("leader election: retry period %s must be positive", t.RetryPeriod)
	}
	return nil
}

// Config configures one candidate.
type Config struct {
	Client kubernetes.Interface
	// Namespace and Name of the Lease; defaults DefaultNamespace/DefaultName.
	Namespace, Name string
	// Identity is this candidate's holderIdentity: the server's node name.
	Identity string
	Timing   Timing
	Logger   *slog.Logger
	// OnNewLeader, if set, is told every leader observed (including this one).
	OnNewLeader func(identity string)
}

// Run campaigns for the lease until ctx ends. Each time this candidate wins,
// lead runs with a context that ends when the lease is lost (or ctx ends);
// Run waits for lead to return before campaigning again, so two terms never
// overlap in this process. On ctx's end, once lead has returned, a held lease
// is released, so another server takes over at once instead of after
// LeaseDuration.
func Run(ctx context.Context, cfg Config, lead func(ctx context.Context)) error {
	if cfg.Client == nil {
		return errors.New("leader election: no client")
	}
	if cfg.Identity == "" {
		return errors.New("leader election: identity is empty")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	t := cfg.Timing.withDefaults()
	if err := t.Validate(); err != nil {
		return err
	}
	log := cfg.Logger.With("component", "leader-election", "lease", cfg.Namespace+"/"+cfg.Name, "identity", cfg.Identity)
	// client-go logs through klog's context logger: route it to slog.
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(log.Handler()))
	var term sync.WaitGroup
	lock := &termLock{
		Interface: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name},
			Client:     cfg.Client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
		},
		becameLeader: func() { term.Add(1) },
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:          lock,
			LeaseDuration: t.LeaseDuration,
			RenewDeadline: t.RenewDeadline,
			RetryPeriod:   t.RetryPeriod,
			// Released below, once the term has ended: client-go's
			// ReleaseOnCancel releases while the term may still be running.
			ReleaseOnCancel: false,
			Name:            cfg.Name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					defer term.Done()
					log.Info("started leading")
					lead(lctx)
				},
				OnStoppedLeading: func() {},
				OnNewLeader: func(id string) {
					if id != cfg.Identity {
						log.Info("new leader observed", "leader", id)
					}
					if cfg.OnNewLeader != nil {
						cfg.OnNewLeader(id)
					}
				},
			},
		})
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		// le.Run returns when ctx ends or the lease is lost; it cancels the
		// term's context first, but starts OnStartedLeading in its own
		// goroutine and does not wait for it: termLock counted the term
		// before that goroutine started, so Wait cannot miss it.
		le.Run(ctx)
		term.Wait()
		if ctx.Err() == nil {
			log.Warn("lost the lease; singletons stopped, campaigning again")
		}
	}
	release(lock, cfg.Identity, t, log)
	return nil
}

// release gives the lease up, if this candidate holds it, as client-go's
// ReleaseOnCancel does (holder cleared, duration 1s), but only after the term
// has ended, so that the next leader never starts while this one's
// singletons still run.
func release(lock resourcelock.Interface, identity string, t Timing, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), t.RenewDeadline)
	defer cancel()
	// A renewal the elector sent as its context was cancelled can still
	// land after our Get: the Update then conflicts, and we read again.
	held := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rec, _, err := lock.Get(ctx)
		if held = err == nil && rec.HolderIdentity == identity; !held {
			return err
		}
		now := metav1.Now()
		return lock.Update(ctx, resourcelock.LeaderElectionRecord{LeaseDurationSeconds: 1, RenewTime: now, AcquireTime: now,
			LeaderTransitions: rec.LeaderTransitions})
	})
	switch {
	case err != nil:
		log.Warn("releasing the lease", "err", err)
	case held:
		log.Info("released the lease")
	}
}

// termLock counts a term in when the elector records "became leader", which
// client-go does synchronously in acquire, before it starts OnStartedLeading
// in a goroutine of its own.
type termLock struct {
	resourcelock.Interface
	becameLeader func()
}

func (l *termLock) RecordEvent(s string) {
	if s == "became leader" {
		l.becameLeader()
	}
	l.Interface.RecordEvent(s)
}
