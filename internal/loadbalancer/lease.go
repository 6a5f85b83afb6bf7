package loadbalancer

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Announcer liveness. Each announcer renews a lease of its own every
// RenewInterval: a ConfigMap kube-system/minikit-lb-speaker-NODE holding the
// fields of a coordination.k8s.io Lease (holderIdentity, renewTime,
// leaseDurationSeconds). A ConfigMap, not a Lease, because the API serves no
// coordination group; the shape makes the switch a rename. A Node
// annotation would do too, but every Node watcher (scheduler, IPAM, proxy,
// agents) would wake up every second for it, and the agent's read-modify-write
// heartbeat would conflict with it.
//
// A peer is alive while its lease keeps changing. The observer notes, on its
// own clock, when it last saw each lease's resourceVersion change; renewTime
// is only trusted for a lease seen for the first time (so a restarted
// announcer does not think a long-dead peer alive), and clocks of different
// nodes are otherwise never compared.
//
// The observer's own lease is the clock it judges peers by: a peer is gone
// when, as of the last renewal of its own that the observer saw come back
// through the watch, the peer had been silent for more than LeaseDuration.
// So a slow API or a stuck watch, which delays every lease alike, kills no
// one; and if the observer stops seeing itself altogether (the API is down,
// or this node is cut off from it) its view is stale and it changes nothing:
// an API outage freezes announcements instead of making every node announce
// everything, or nothing.
const (
	LeaseNamespace       = "kube-system"
	leasePrefix          = "minikit-lb-speaker-"
	leaseLabel           = "app.kubernetes.io/component"
	leaseLabelValue      = "minikit-lb-speaker"
	DefaultRenewInterval = time.Second
	DefaultLeaseDuration = 3 * time.Second
)

// LeaseName is the name of node's announcer lease.
func LeaseName(node string) string { return leasePrefix + node }

// liveness tracks the announcers' leases as seen by one observer.
type liveness struct {
	self     string
	mu       sync.Mutex
	now      func() time.Time
	duration time.Duration
	seen     map[string]seenLease // by node
}

type seenLease struct {
	rv string
	at time.Time // observer's clock
}

func newLiveness(self string, d time.Duration, now func() time.Time) *liveness {
	return &liveness{self: self, now: now, duration: d, seen: map[string]seenLease{}}
}

func leaseHolder(cm *corev1.ConfigMap) string { return cm.Data["holderIdentity"] }

// observe records a lease as listed or watched.
func (l *liveness) observe(cm *corev1.ConfigMap) {
	node := leaseHolder(cm)
	if node == "" {
		return
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, ok := l.seen[node]
	switch {
	case ok && prev.rv == cm.ResourceVersion:
		return
	case ok:
		l.seen[node] = seenLease{rv: cm.ResourceVersion, at: now}
	default:
		at := now
		if t, err := time.Parse(time.RFC3339Nano, cm.Data["renewTime"]); err == nil && t.Before(now) {
			at = t
		}
		l.seen[node] = seenLease{rv: cm.ResourceVersion, at: at}
	}
}

// forget drops a deleted lease: its announcer stopped cleanly.
func (l *liveness) forget(cm *corev1.ConfigMap) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.seen, leaseHolder(cm))
}

// alive reports whether node's announcer is alive as far as this observer
// can tell; for the observer itself, whether its own view is current.
func (l *liveness) alive(node string) bool { return l.aliveAt(node, l.now()) }

// at is alive judged at one instant: a decision that asks about several
// nodes (itself among them) must not see its own lease expire halfway, or it
// passes the check that it is current and then drops itself from the
// candidates, and nobody announces.
func (l *liveness) at(now time.Time) func(node string) bool {
	return func(node string) bool { return l.aliveAt(node, now) }
}

func (l *liveness) aliveAt(node string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	self, selfOK := l.seen[l.self]
	if node == l.self {
		return selfOK && now.Sub(self.at) <= l.duration
	}
	s, ok := l.seen[node]
	if !ok {
		return false
	}
	ref := now
	if selfOK && self.at.Before(ref) {
		ref = self.at
	}
	return ref.Sub(s.at) <= l.duration
}

// renewLease creates or renews node's lease once.
func renewLease(ctx context.Context, client kubernetes.Interface, node string, duration time.Duration, now time.Time) error {
	data := map[string]string{
		"holderIdentity":       node,
		"renewTime":            now.UTC().Format(time.RFC3339Nano),
		"leaseDurationSeconds": strconv.Itoa(int(duration.Round(time.Second) / time.Second)),
	}
	patch, _ := json.Marshal(map[string]any{"data": data})
	cms := client.CoreV1().ConfigMaps(LeaseNamespace)
	_, err := cms.Patch(ctx, LeaseName(node), types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: LeaseName(node), Namespace: LeaseNamespace,
				Labels: map[string]string{leaseLabel: leaseLabelValue}},
			Data: data,
		}
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("renewing load-balancer speaker lease of node %q: %w", node, err)
	}
	return nil
}

// releaseLease deletes node's lease when its announcer stops cleanly, so the
// peers take over at once instead of after the lease duration.
func releaseLease(client kubernetes.Interface, node string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := client.CoreV1().ConfigMaps(LeaseNamespace).Delete(ctx, LeaseName(node), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("releasing load-balancer speaker lease of node %q: %w", node, err)
	}
	return nil
}
