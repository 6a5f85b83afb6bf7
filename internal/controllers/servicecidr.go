package controllers

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
)

// The ServiceCIDR controller is Kubernetes' servicecidrs controller: every
// ServiceCIDR carries the networking.k8s.io/service-cidr-finalizer and a
// Ready condition. A ServiceCIDR being deleted keeps its finalizer (and turns
// Ready=False, reason Terminating) while ClusterIPs of Services (their
// IPAddresses) lie in it and in no other ServiceCIDR, so deleting a range
// never orphans an address; once none does, the finalizer goes after a grace
// period that lets every allocator see the deletion first.

const (
	serviceCIDRFinalizer = "networking.k8s.io/service-cidr-finalizer"
	// serviceCIDRDeletionGrace is upstream's deletionGracePeriod.
	serviceCIDRDeletionGrace = 10 * time.Second
	ipAllocatorManager       = "ipallocator.k8s.io"
)

type serviceCIDRController struct {
	c     *Controllers
	loop  *loop
	cidrs networkinglisters.ServiceCIDRLister
	ips   networkinglisters.IPAddressLister
	grace time.Duration // serviceCIDRDeletionGrace; tests shorten it
}

func newServiceCIDRController(c *Controllers) *serviceCIDRController {
	cidrInf := c.factory.Networking().V1().ServiceCIDRs()
	ipInf := c.factory.Networking().V1().IPAddresses()
	s := &serviceCIDRController{c: c, cidrs: cidrInf.Lister(), ips: ipInf.Lister(), grace: serviceCIDRDeletionGrace}
	s.loop = c.newLoop("servicecidr", 1, s.sync)
	c.synced = append(c.synced, cidrInf.Informer().HasSynced, ipInf.Informer().HasSynced)
	enqueue := func(obj any) {
		if o, ok := obj.(metav1.Object); ok {
			s.loop.add(o.GetName())
		}
	}
	cidrInf.Informer().AddEventHandler(handlers(enqueue, func(_, cur any) { enqueue(cur) }, func(obj any) {
		// Another range going may leave addresses only in a terminating one,
		// and one going may free a terminating one: look at all.
		s.enqueueAll()
	}))
	// An address deleted may unblock the deletion of the ranges holding it.
	ipInf.Informer().AddEventHandler(handlers(func(any) {}, func(any, any) {}, func(obj any) {
		ip, ok := obj.(*networkingv1.IPAddress)
		if !ok {
			return
		}
		addr, err := netip.ParseAddr(ip.Name)
		if err != nil {
			return
		}
		for _, sc := range s.containing(addr) {
			if sc.DeletionTimestamp != nil {
				s.loop.add(sc.Name)
			}
		}
	}))
	return s
}

func (s *serviceCIDRController) enqueueAll() {
	list, _ := s.cidrs.List(labels.Everything())
	for _, sc := range list {
		s.loop.add(sc.Name)
	}
}

// containing returns the ServiceCIDRs with a range that holds addr.
func (s *serviceCIDRController) containing(addr netip.Addr) []*networkingv1.ServiceCIDR {
	list, _ := s.cidrs.List(labels.Everything())
	var out []*networkingv1.ServiceCIDR
	for _, sc := range list {
		for _, c := range sc.Spec.CIDRs {
			if p, err := netip.ParsePrefix(c); err == nil && p.Contains(addr) {
				out = append(out, sc)
				break
			}
		}
	}
	return out
}

func (s *serviceCIDRController) sync(ctx context.Context, name string) error {
	sc, err := s.cidrs.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	client := s.c.client.NetworkingV1().ServiceCIDRs()
	if sc.DeletionTimestamp != nil {
		if !slices.Contains(sc.Finalizers, serviceCIDRFinalizer) {
			return nil
		}
		if !s.canDelete(sc) {
			return s.setReady(ctx, sc, metav1.ConditionFalse, networkingv1.ServiceCIDRReasonTerminating,
				"There are still IPAddresses referencing the ServiceCIDR, please remove them or create a new ServiceCIDR")
		}
		if wait := s.grace - s.c.now().Sub(sc.DeletionTimestamp.Time); wait > 0 {
			s.loop.queue.AddAfter(name, wait)
			return nil
		}
		cp := sc.DeepCopy()
		cp.Finalizers = slices.DeleteFunc(cp.Finalizers, func(f string) bool { return f == serviceCIDRFinalizer })
		_, err := client.Update(ctx, cp, metav1.UpdateOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("removing the finalizer of servicecidr %s: %w", name, err)
		}
		return nil
	}
	if !slices.Contains(sc.Finalizers, serviceCIDRFinalizer) {
		cp := sc.DeepCopy()
		cp.Finalizers = append(cp.Finalizers, serviceCIDRFinalizer)
		updated, err := client.Update(ctx, cp, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("adding the finalizer of servicecidr %s: %w", name, err)
		}
		sc = updated
	}
	return s.setReady(ctx, sc, metav1.ConditionTrue, "", "Kubernetes Service CIDR is ready")
}

// canDelete is upstream's canDeleteCIDR: a range inside another ServiceCIDR
// can always go; otherwise no allocated address may lie only in it.
func (s *serviceCIDRController) canDelete(sc *networkingv1.ServiceCIDR) bool {
	covered := true
	for _, c := range sc.Spec.CIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			continue
		}
		if !slices.ContainsFunc(s.others(sc), func(o netip.Prefix) bool { return o.Bits() <= p.Bits() && o.Contains(p.Addr()) }) {
			covered = false
		}
	}
	if covered {
		return true
	}
	ips, err := s.ips.List(labels.SelectorFromSet(labels.Set{networkingv1.LabelManagedBy: ipAllocatorManager}))
	if err != nil {
		return false
	}
	for _, ip := range ips {
		addr, err := netip.ParseAddr(ip.Name)
		if err != nil {
			continue
		}
		in := s.containing(addr)
		if len(in) == 1 && in[0].Name == sc.Name {
			return false
		}
	}
	return true
}

// others are the ranges of every ServiceCIDR but sc.
func (s *serviceCIDRController) others(sc *networkingv1.ServiceCIDR) []netip.Prefix {
	list, _ := s.cidrs.List(labels.Everything())
	var out []netip.Prefix
	for _, o := range list {
		if o.Name == sc.Name {
			continue
		}
		for _, c := range o.Spec.CIDRs {
			if p, err := netip.ParsePrefix(c); err == nil {
				out = append(out, p)
			}
		}
	}
	return out
}

// setReady writes the Ready condition when its status, reason or message
// differ, as upstream's updateConditionIfNeeded.
func (s *serviceCIDRController) setReady(ctx context.Context, sc *networkingv1.ServiceCIDR, status metav1.ConditionStatus, reason, msg string) error {
	if c := apimeta.FindStatusCondition(sc.Status.Conditions, networkingv1.ServiceCIDRConditionReady); c != nil &&
		c.Status == status && c.Reason == reason && c.Message == msg {
		return nil
	}
	cp := sc.DeepCopy()
	apimeta.SetStatusCondition(&cp.Status.Conditions, metav1.Condition{
		Type: networkingv1.ServiceCIDRConditionReady, Status: status, Reason: reason, Message: msg,
		LastTransitionTime: metav1.NewTime(s.c.now()),
	})
	if _, err := s.c.client.NetworkingV1().ServiceCIDRs().UpdateStatus(ctx, cp, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("setting the Ready condition of servicecidr %s: %w", sc.Name, err)
	}
	return nil
}
