package controllers

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/testutil"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A node whose Ready heartbeat is old but whose lease is renewed stays
// Ready; once the lease stops too, it goes Unknown after the grace period.
func TestNodeLifecycleReadsLease(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("n3", true, nil)
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	holder, dur := "n3", int32(40)
	renew := metav1.NewMicroTime(clock().Truncate(time.Second))
	lease, err := tc.client.CoordinationV1().Leases("kube-node-lease").Create(tc.ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "n3", Namespace: "kube-node-lease"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &renew}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := New(tc.client, testutil.Logger(t), Config{})
	c.now = clock
	go c.Run(tc.ctx)
	<-c.Ready()
	readyStatus := func() corev1.ConditionStatus {
		n, err := tc.client.CoreV1().Nodes().Get(tc.ctx, "n3", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return readyCondition(n).Status
	}
	// The controller's own worker syncs n3 too (on every node and lease
	// event); a write that lost that race is retried, as its queue would.
	syncN3 := func() {
		t.Helper()
		for {
			err := c.nl.sync(tc.ctx, "n3")
			if err == nil {
				return
			}
			if !apierrors.IsConflict(err) {
				t.Fatal(err)
			}
		}
	}
	syncN3()
	// The agent renews its lease 30 s later; the Ready heartbeat does not move.
	advance(30 * time.Second)
	renew = metav1.NewMicroTime(clock().Truncate(time.Second))
	lease.Spec.RenewTime = &renew
	if _, err := tc.client.CoordinationV1().Leases("kube-node-lease").Update(tc.ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "renewed lease in the cache", func() error {
		l, err := c.nl.leases.Leases("kube-node-lease").Get("n3")
		if err != nil || !l.Spec.RenewTime.Equal(&renew) {
			return errors.New("old lease")
		}
		return nil
	})
	syncN3()
	advance(30 * time.Second) // 60 s after the Ready heartbeat, 30 s after the lease
	syncN3()
	if s := readyStatus(); s != corev1.ConditionTrue {
		t.Fatalf("node with a fresh lease is Ready=%s, want True", s)
	}
	advance(nodeMonitorGracePeriod) // the lease goes silent too
	syncN3()
	if s := readyStatus(); s != corev1.ConditionUnknown {
		t.Fatalf("node with a silent lease is Ready=%s, want Unknown", s)
	}
}
