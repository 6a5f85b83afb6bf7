package kubelet

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The node heartbeat lease, as the kubelet keeps it: kube-node-lease/NODENAME,
// held by the node, 40 s long, renewed every 10 s. It is a much smaller write
// than the Node status, and the node lifecycle controller reads its renewTime
// to tell a live node from a silent one.
const (
	leaseNamespace       = "kube-node-lease"
	leaseDurationSeconds = 40
	leaseRenewPeriod     = 10 * time.Second
)

// leaseLoop renews the node's lease until ctx ends.
func (a *Agent) leaseLoop(ctx context.Context) {
	t := time.NewTicker(leaseRenewPeriod)
	defer t.Stop()
	for {
		if err := a.renewLease(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("renewing node lease", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (a *Agent) renewLease(ctx context.Context) error {
	leases := a.client.CoordinationV1().Leases(leaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	name := a.cfg.NodeName
	l, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: leaseNamespace}}
		// Owned by the Node, so the lease goes with it.
		if n, err := a.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err == nil {
			l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}}
		}
		fillLease(l, name, now)
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	fillLease(l, name, now)
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

func fillLease(l *coordinationv1.Lease, holder string, now metav1.MicroTime) {
	d := int32(leaseDurationSeconds)
	l.Spec.HolderIdentity = &holder
	l.Spec.LeaseDurationSeconds = &d
	l.Spec.RenewTime = &now
}
