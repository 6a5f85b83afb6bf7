package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/apiserver/validation"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func (a *testAPI) clients(t *testing.T) (kubernetes.Interface, dynamic.Interface) {
	cfg := &rest.Config{Host: a.url, QPS: 1000, Burst: 1000}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs, dc
}

// TestDefaultServiceCIDR is the ServiceCIDR conformance spec: the
// "kubernetes" ServiceCIDR holds the configured range and is Ready, its
// status is served through the dynamic client, and it lists and watches.
func TestDefaultServiceCIDR(t *testing.T) {
	a := newTestAPI(t)
	cs, dc := a.clients(t)
	ctx := context.Background()
	sc, err := cs.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sc.Spec.CIDRs, []string{"10.96.0.0/12"}) {
		t.Errorf("cidrs %v, want [10.96.0.0/12]", sc.Spec.CIDRs)
	}
	if c := apimeta.FindStatusCondition(sc.Status.Conditions, networkingv1.ServiceCIDRConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("conditions %+v, want Ready=True", sc.Status.Conditions)
	}
	st, err := dc.Resource(networkingv1.SchemeGroupVersion.WithResource("servicecidrs")).Get(ctx, "kubernetes", metav1.GetOptions{}, "status")
	if err != nil {
		t.Fatal(err)
	}
	if gvk := st.GroupVersionKind(); gvk != networkingv1.SchemeGroupVersion.WithKind("ServiceCIDR") || st.GetUID() != sc.UID {
		t.Errorf("status is %v uid %s, want ServiceCIDR uid %s", gvk, st.GetUID(), sc.UID)
	}
	list, err := cs.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("list: %v, %d items", err, len(list.Items))
	}
	w, err := cs.NetworkingV1().ServiceCIDRs().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()

	// The spec is immutable but for a second family; a restart keeps it as it is.
	sc.Spec.CIDRs = []string{"10.100.0.0/16"}
	if _, err := cs.NetworkingV1().ServiceCIDRs().Update(ctx, sc, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("changing the range: %v, want Invalid", err)
	}
	sc.Spec.CIDRs = []string{"10.96.0.0/12", "fd00:10:96::/112"}
	if _, err := cs.NetworkingV1().ServiceCIDRs().Update(ctx, sc, metav1.UpdateOptions{}); err != nil {
		t.Errorf("adding a family: %v", err)
	}
	// A status write changes status only; a spec write keeps status.
	sc, _ = cs.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{})
	sc.Status.Conditions = nil
	sc.Labels = map[string]string{"x": "y"}
	if sc, err = cs.NetworkingV1().ServiceCIDRs().Update(ctx, sc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(sc.Status.Conditions) == 0 || sc.Labels["x"] != "y" {
		t.Errorf("update dropped status or kept labels out: %+v %v", sc.Status, sc.Labels)
	}
}

// TestServiceCIDRCreate checks a new ServiceCIDR starts without status (the
// controller makes it Ready) and that bad ranges are rejected.
func TestServiceCIDRCreate(t *testing.T) {
	a := newTestAPI(t)
	cs, _ := a.clients(t)
	ctx := context.Background()
	sc, err := cs.NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: "test-svc-cidr"},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{"203.0.113.0/24"}},
		Status:     networkingv1.ServiceCIDRStatus{Conditions: []metav1.Condition{{Type: "Ready", Status: "True", Reason: "x", LastTransitionTime: metav1.Now()}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.Status.Conditions) != 0 {
		t.Errorf("create kept status %+v", sc.Status)
	}
	_, err = cs.NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: "bad"},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.0.0/8", "11.0.0.0/8"}},
	}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Errorf("two IPv4 ranges: %v, want Invalid", err)
	}
}

// TestIPAddressAPI is the IPAddress conformance spec's sequence.
func TestIPAddressAPI(t *testing.T) {
	a := newTestAPI(t)
	cs, _ := a.clients(t)
	ctx := context.Background()
	ipc := cs.NetworkingV1().IPAddresses()
	ref := &networkingv1.ParentReference{Group: "mygroup", Resource: "myresources", Namespace: "foo", Name: "bar"}
	created, err := ipc.Create(ctx, &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: "255.255.255.255", Labels: map[string]string{"type": "broadcast"}},
		Spec:       networkingv1.IPAddressSpec{ParentRef: ref},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ipc.Create(ctx, &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: "fe80::42:1dff:fe84:f9e2", Labels: map[string]string{"type": "link-local"}},
		Spec:       networkingv1.IPAddressSpec{ParentRef: ref},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patched, err := ipc.Patch(ctx, "255.255.255.255", types.MergePatchType, []byte(`{"metadata":{"annotations":{"patched":"true"}}}`), metav1.PatchOptions{})
	if err != nil || patched.Annotations["patched"] != "true" || len(patched.ResourceVersion) < len(created.ResourceVersion) || patched.ResourceVersion == created.ResourceVersion {
		t.Fatalf("patch: %v %+v", err, patched)
	}
	patched.Annotations["updated"] = "true"
	if patched, err = ipc.Update(ctx, patched, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	patched.Spec.ParentRef = &networkingv1.ParentReference{Resource: "services", Name: "other"}
	if _, err := ipc.Update(ctx, patched, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("changing parentRef: %v, want Invalid", err)
	}
	list, err := ipc.List(ctx, metav1.ListOptions{LabelSelector: "type=broadcast"})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("list: %v %d", err, len(list.Items))
	}
	w, err := ipc.Watch(ctx, metav1.ListOptions{LabelSelector: "type=broadcast"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := ipc.Delete(ctx, "255.255.255.255", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A watch without a resourceVersion starts with the current state (ADDED).
	for seen := false; !seen; {
		select {
		case ev := <-w.ResultChan():
			seen = ev.Type == watch.Deleted
		case <-time.After(10 * time.Second):
			t.Fatal("watch did not see the deletion")
		}
	}
	if err := ipc.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "type=link-local"}); err != nil {
		t.Fatal(err)
	}
	if list, _ := ipc.List(ctx, metav1.ListOptions{LabelSelector: "type=link-local"}); len(list.Items) != 0 {
		t.Errorf("%d left after deletecollection", len(list.Items))
	}
	for _, bad := range []string{"10.01.0.1", "2001:db8:0::1", "web"} {
		_, err := ipc.Create(ctx, &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: bad}, Spec: networkingv1.IPAddressSpec{ParentRef: ref}}, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Errorf("name %q: %v, want Invalid", bad, err)
		}
	}
}

// TestClusterIPAddresses checks every ClusterIP has its IPAddress, written and
// removed with the Service, and that an IPAddress keeps its address from
// Services, as kube-apiserver's allocator does.
func TestClusterIPAddresses(t *testing.T) {
	a := newTestAPI(t)
	cs, _ := a.clients(t)
	ctx := context.Background()
	ipc := cs.NetworkingV1().IPAddresses()

	kip, err := ipc.Get(ctx, "10.96.0.1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the kubernetes Service's IPAddress: %v", err)
	}
	want := networkingv1.ParentReference{Resource: "services", Namespace: "default", Name: "kubernetes"}
	if *kip.Spec.ParentRef != want || kip.Labels[networkingv1.LabelManagedBy] != "ipallocator.k8s.io" || kip.Labels[networkingv1.LabelIPAddressFamily] != "IPv4" {
		t.Errorf("IPAddress 10.96.0.1 is %+v %v", kip.Spec.ParentRef, kip.Labels)
	}

	svc, err := cs.CoreV1().Services("default").Create(ctx, newService("web"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ipc.Get(ctx, svc.Spec.ClusterIP, metav1.GetOptions{}); err != nil {
		t.Errorf("IPAddress of web's %s: %v", svc.Spec.ClusterIP, err)
	}

	// An IPAddress someone holds is not handed out.
	held := &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "10.96.0.200"},
		Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Group: "example.com", Resource: "gateways", Name: "gw"}}}
	if _, err := ipc.Create(ctx, held, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = cs.CoreV1().Services("default").Create(ctx, newService("fixed", func(s *corev1.Service) { s.Spec.ClusterIP = "10.96.0.200" }), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Errorf("a Service on a held address: %v, want Invalid", err)
	}
	// An address already taken by a Service cannot be claimed by an IPAddress either.
	if _, err := ipc.Create(ctx, &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: svc.Spec.ClusterIP},
		Spec: networkingv1.IPAddressSpec{ParentRef: held.Spec.ParentRef}}, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("an IPAddress on web's address: %v, want AlreadyExists", err)
	}

	// Changing the type to ExternalName frees the address and its IPAddress.
	svc.Spec.Type = corev1.ServiceTypeExternalName
	svc.Spec.ExternalName = "example.com"
	svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", nil
	svc.Spec.IPFamilies, svc.Spec.IPFamilyPolicy = nil, nil
	if _, err := cs.CoreV1().Services("default").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	list, _ := ipc.List(ctx, metav1.ListOptions{LabelSelector: networkingv1.LabelManagedBy + "=ipallocator.k8s.io"})
	for _, ip := range list.Items {
		if ip.Spec.ParentRef.Name == "web" {
			t.Errorf("IPAddress %s still names web after it became ExternalName", ip.Name)
		}
	}

	// A deleted IPAddress of a Service comes back at the next start.
	if err := ipc.Delete(ctx, "10.96.0.1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	a.close()
	b := newTestAPIWith(t, apiOptions{dbPath: a.dbPath})
	b.get("/apis/networking.k8s.io/v1/ipaddresses/10.96.0.1").mustCode(t, http.StatusOK, nil)
}

// TestClusterIPFromAnotherServiceCIDR checks a Service may ask for a
// ClusterIP in any ServiceCIDR that is not being deleted or not Ready, as
// the "should create Services and serve on different Service CIDRs" spec does.
func TestClusterIPFromAnotherServiceCIDR(t *testing.T) {
	a := newTestAPI(t)
	cs, _ := a.clients(t)
	ctx := context.Background()
	svcs := cs.CoreV1().Services("default")
	at := func(name, ip string) error {
		_, err := svcs.Create(ctx, newService(name, func(s *corev1.Service) { s.Spec.ClusterIP = ip }), metav1.CreateOptions{})
		return err
	}
	if err := at("early", "203.0.113.10"); !apierrors.IsInvalid(err) {
		t.Errorf("outside every range: %v, want Invalid", err)
	}
	sc, err := cs.NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "test-svc-cidr"},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"203.0.113.0/24"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := at("cidr1-test", "203.0.113.10"); err != nil {
		t.Fatalf("in the new range: %v", err)
	}
	if ip, err := cs.NetworkingV1().IPAddresses().Get(ctx, "203.0.113.10", metav1.GetOptions{}); err != nil || ip.Spec.ParentRef.Name != "cidr1-test" {
		t.Errorf("IPAddress 203.0.113.10: %v %+v", err, ip)
	}
	if err := at("network", "203.0.113.0"); !apierrors.IsInvalid(err) {
		t.Errorf("the range's network address: %v, want Invalid", err)
	}
	// A range marked not Ready takes no more addresses.
	sc.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Terminating", LastTransitionTime: metav1.Now()}}
	if _, err := cs.NetworkingV1().ServiceCIDRs().UpdateStatus(ctx, sc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := at("late", "203.0.113.11"); !apierrors.IsInvalid(err) {
		t.Errorf("in a range not Ready: %v, want Invalid", err)
	}
}

// TestClusterIPsSpillIntoOtherServiceCIDRs checks that once the configured
// range is full, ClusterIPs come from the other ServiceCIDRs, as with
// kube-apiserver's allocator, and that a ServiceCIDR added is how an
// administrator grows a full service network.
func TestClusterIPsSpillIntoOtherServiceCIDRs(t *testing.T) {
	vcfg := validation.DefaultConfig()
	vcfg.ServiceCIDR = netip.MustParsePrefix("10.96.0.0/28") // 14 addresses, one the API's
	a := newTestAPIWith(t, apiOptions{vcfg: vcfg})
	cs, _ := a.clients(t)
	ctx := context.Background()
	create := func(i int) (*corev1.Service, error) {
		return cs.CoreV1().Services("default").Create(ctx, newService(fmt.Sprintf("s%02d", i)), metav1.CreateOptions{})
	}
	for i := range 13 {
		if _, err := create(i); err != nil {
			t.Fatalf("service %d: %v", i, err)
		}
	}
	if _, err := create(13); !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), "range is full") {
		t.Fatalf("a full range: %v, want range is full", err)
	}
	if _, err := cs.NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "more"},
		Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.100.0.0/29"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for i := 13; i < 19; i++ {
		svc, err := create(i)
		if err != nil {
			t.Fatalf("service %d: %v", i, err)
		}
		if !netip.MustParsePrefix("10.100.0.0/29").Contains(netip.MustParseAddr(svc.Spec.ClusterIP)) || got[svc.Spec.ClusterIP] {
			t.Errorf("service %d got %s", i, svc.Spec.ClusterIP)
		}
		got[svc.Spec.ClusterIP] = true
	}
	if _, err := create(19); !apierrors.IsInternalError(err) {
		t.Errorf("both ranges full: %v, want range is full", err)
	}
}
