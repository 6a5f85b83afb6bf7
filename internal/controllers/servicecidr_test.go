package controllers

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/testutil"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func (tc *testCluster) waitServiceCIDR(name string, what string, cond func(sc *networkingv1.ServiceCIDR, err error) bool) {
	tc.t.Helper()
	testutil.Eventually(tc.t, waitTimeout, what, func() error {
		sc, err := tc.client.NetworkingV1().ServiceCIDRs().Get(tc.ctx, name, metav1.GetOptions{})
		if sc == nil {
			sc = &networkingv1.ServiceCIDR{}
		}
		if !cond(sc, err) {
			return fmt.Errorf("err %v finalizers %v conditions %+v", err, sc.Finalizers, sc.Status.Conditions)
		}
		return nil
	})
}

func readyIs(sc *networkingv1.ServiceCIDR, status metav1.ConditionStatus, reason string) bool {
	c := apimeta.FindStatusCondition(sc.Status.Conditions, networkingv1.ServiceCIDRConditionReady)
	return c != nil && c.Status == status && c.Reason == reason
}

// TestServiceCIDRLifecycle checks ServiceCIDRs get their finalizer and Ready
// condition, and that one cannot go while an allocated address lies only in
// it, as with Kubernetes' servicecidrs controller.
func TestServiceCIDRLifecycle(t *testing.T) {
	tc := newTestCluster(t)
	tc.startControllersWith(Config{}, func(c *Controllers) { c.scc.grace = 100 * time.Millisecond })
	scs := tc.client.NetworkingV1().ServiceCIDRs()

	tc.waitServiceCIDR("kubernetes", "the default ServiceCIDR protected and ready", func(sc *networkingv1.ServiceCIDR, err error) bool {
		return err == nil && slices.Contains(sc.Finalizers, serviceCIDRFinalizer) && readyIs(sc, metav1.ConditionTrue, "")
	})

	for _, name := range []string{"extra", "inside"} {
		cidr := map[string]string{"extra": "203.0.113.0/24", "inside": "10.96.100.0/24"}[name]
		if _, err := scs.Create(tc.ctx, &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{cidr}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tc.waitServiceCIDR(name, name+" ready", func(sc *networkingv1.ServiceCIDR, err error) bool {
			return err == nil && slices.Contains(sc.Finalizers, serviceCIDRFinalizer) && readyIs(sc, metav1.ConditionTrue, "")
		})
	}

	// A range inside another goes at once: its addresses stay covered.
	if err := scs.Delete(tc.ctx, "inside", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.waitServiceCIDR("inside", "inside deleted", func(_ *networkingv1.ServiceCIDR, err error) bool { return apierrors.IsNotFound(err) })

	// An allocated address only in "extra" holds it back.
	if _, err := tc.client.NetworkingV1().IPAddresses().Create(tc.ctx, &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: "203.0.113.10", Labels: map[string]string{networkingv1.LabelManagedBy: ipAllocatorManager}},
		Spec:       networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: "default", Name: "web"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := scs.Delete(tc.ctx, "extra", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.waitServiceCIDR("extra", "extra terminating", func(sc *networkingv1.ServiceCIDR, err error) bool {
		return err == nil && sc.DeletionTimestamp != nil && readyIs(sc, metav1.ConditionFalse, networkingv1.ServiceCIDRReasonTerminating)
	})
	if err := tc.client.NetworkingV1().IPAddresses().Delete(tc.ctx, "203.0.113.10", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.waitServiceCIDR("extra", "extra deleted", func(_ *networkingv1.ServiceCIDR, err error) bool { return apierrors.IsNotFound(err) })
}
