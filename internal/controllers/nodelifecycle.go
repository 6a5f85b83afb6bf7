package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
)

// The node lifecycle loop does what kube-controller-manager's node lifecycle and
// pod GC controllers do for a lab: a node whose agent stopped heartbeating for
// nodeMonitorGracePeriod goes Ready=Unknown and its pods go not-Ready (so their
// endpoints stop receiving traffic); pods bound to a node that no longer exists are
// deleted at once (PodGC's orphaned pods).
const (
	nodeMonitorGracePeriod = 40 * time.Second
	nodeMonitorPeriod      = 5 * time.Second
)

type nodeLifecycle struct {
	c      *Controllers
	loop   *loop
	leases coordinationlisters.LeaseLister

	// observed is, per node, the heartbeat last seen and when this controller saw
	// it change: like Kubernetes, silence is measured on our own clock, so clock
	// skew or a zero heartbeat time never condemns a node.
	mu       sync.Mutex
	observed map[string]observation
}

type observation struct {
	heartbeat time.Time
	seen      time.Time
}

func newNodeLifecycle(c *Controllers) *nodeLifecycle {
	n := &nodeLifecycle{c: c, observed: map[string]observation{}}
	n.loop = c.newLoop("nodelifecycle", 1, n.sync)
	// The agents' heartbeat leases (kube-node-lease/NODE) are the cheap
	// heartbeat; the Ready condition's is the fallback.
	leaseInf := c.factory.Coordination().V1().Leases().Informer()
	n.leases = c.factory.Coordination().V1().Leases().Lister()
	onLease := func(obj any) {
		if l, ok := obj.(*coordinationv1.Lease); ok && l.Namespace == nodeLeaseNamespace {
			n.loop.add(l.Name)
		}
	}
	leaseInf.AddEventHandler(handlers(onLease, func(_, cur any) { onLease(cur) }, func(any) {}))
	c.synced = append(c.synced, leaseInf.HasSynced)
	c.factory.Core().V1().Nodes().Informer().AddEventHandler(handlers(
		func(obj any) { n.loop.add(obj.(*corev1.Node).Name) },
		func(_, cur any) { n.loop.add(cur.(*corev1.Node).Name) },
		func(obj any) {
			if node, ok := obj.(*corev1.Node); ok {
				n.loop.add(node.Name)
			}
		},
	))
	c.podInf.AddEventHandler(handlers(
		func(obj any) {
			if p := obj.(*corev1.Pod); p.Spec.NodeName != "" {
				n.loop.add(p.Spec.NodeName)
			}
		},
		func(_, cur any) {}, func(any) {},
	))
	return n
}

// run requeues every node periodically, since a heartbeat that stops produces no event.
func (n *nodeLifecycle) run(ctx context.Context) {
	t := time.NewTicker(nodeMonitorPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			nodes, _ := n.c.nodes.List(labels.Everything())
			for _, node := range nodes {
				n.loop.add(node.Name)
			}
		}
	}
}

func (n *nodeLifecycle) sync(ctx context.Context, name string) error {
	node, err := n.c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		n.mu.Lock()
		delete(n.observed, name)
		n.mu.Unlock()
		// Confirm with the API before deleting pods: the cache may lag a new node.
		if _, err := n.c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return err
		}
		return n.deleteOrphans(ctx, name)
	}
	if err != nil {
		return err
	}
	ready := readyCondition(node)
	if ready == nil || ready.Status == corev1.ConditionUnknown {
		return nil
	}
	now := n.c.now()
	beat := n.heartbeat(node, ready)
	n.mu.Lock()
	o, ok := n.observed[name]
	if !ok || !o.heartbeat.Equal(beat) {
		o = observation{heartbeat: beat, seen: now}
		n.observed[name] = o
	}
	n.mu.Unlock()
	if now.Sub(o.seen) < nodeMonitorGracePeriod {
		return nil
	}
	// The agent went silent: Ready becomes Unknown, and its pods not ready.
	nn := node.DeepCopy()
	for i := range nn.Status.Conditions {
		if nn.Status.Conditions[i].Type == corev1.NodeReady {
			nn.Status.Conditions[i].Status = corev1.ConditionUnknown
			nn.Status.Conditions[i].Reason = "NodeStatusUnknown"
			nn.Status.Conditions[i].Message = "Kubelet stopped posting node status."
			nn.Status.Conditions[i].LastTransitionTime = metav1.NewTime(n.c.now())
		}
	}
	if _, err := n.c.client.CoreV1().Nodes().UpdateStatus(ctx, nn, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("marking node %q unknown: %w", name, err)
	}
	n.loop.log.Info("node stopped posting status", "node", name, "lastHeartbeat", beat)
	return n.markPodsNotReady(ctx, name)
}

// nodeLeaseNamespace holds the agents' heartbeat leases.
const nodeLeaseNamespace = "kube-node-lease"

// heartbeat is the node's latest sign of life: its lease's renewTime, or
// the Ready condition's heartbeat when that is later or there is no lease.
func (n *nodeLifecycle) heartbeat(node *corev1.Node, ready *corev1.NodeCondition) time.Time {
	beat := ready.LastHeartbeatTime.Time
	if l, err := n.leases.Leases(nodeLeaseNamespace).Get(node.Name); err == nil && l.Spec.RenewTime != nil && l.Spec.RenewTime.After(beat) {
		beat = l.Spec.RenewTime.Time
	}
	return beat
}

func readyCondition(node *corev1.Node) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == corev1.NodeReady {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

func (n *nodeLifecycle) podsOn(ctx context.Context, node string) ([]corev1.Pod, error) {
	list, err := n.c.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

func (n *nodeLifecycle) markPodsNotReady(ctx context.Context, node string) error {
	pods, err := n.podsOn(ctx, node)
	if err != nil {
		return err
	}
	for i := range pods {
		p := &pods[i]
		changed := false
		for j := range p.Status.Conditions {
			if p.Status.Conditions[j].Type == corev1.PodReady && p.Status.Conditions[j].Status != corev1.ConditionFalse {
				p.Status.Conditions[j].Status = corev1.ConditionFalse
				p.Status.Conditions[j].Reason = "NodeNotReady"
				changed = true
			}
		}
		if changed {
			if _, err := n.c.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("marking pod %s/%s not ready: %w", p.Namespace, p.Name, err)
			}
		}
	}
	return nil
}

func (n *nodeLifecycle) deleteOrphans(ctx context.Context, node string) error {
	// The lease is owned by the Node and goes with it.
	if err := n.c.client.CoordinationV1().Leases(nodeLeaseNamespace).Delete(ctx, node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting lease of vanished node %q: %w", node, err)
	}
	pods, err := n.podsOn(ctx, node)
	if err != nil {
		return err
	}
	zero := int64(0)
	for _, p := range pods {
		uid := p.UID
		err := n.c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
			GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting pod %s/%s of vanished node %q: %w", p.Namespace, p.Name, node, err)
		}
		n.loop.log.Info("deleted pod of a node that no longer exists", "pod", p.Namespace+"/"+p.Name, "node", node)
	}
	return nil
}
