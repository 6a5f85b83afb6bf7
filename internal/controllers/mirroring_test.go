package controllers

//lint:file-ignore SA1019 core/v1 Endpoints is deprecated upstream, but hand-written Endpoints are what is mirrored

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/testutil"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// mirroredOf renders the mirrored slices of a service one a line:
// "type ports: endpoint,endpoint".
func (tc *testCluster) mirroredOf(svc string) []string {
	l, err := tc.client.DiscoveryV1().EndpointSlices("default").List(tc.ctx, metav1.ListOptions{
		LabelSelector: discoveryv1.LabelServiceName + "=" + svc + "," + discoveryv1.LabelManagedBy + "=" + mirroringManagerName})
	if err != nil {
		tc.t.Fatal(err)
	}
	var out []string
	for _, s := range l.Items {
		var ports, eps []string
		for _, p := range s.Ports {
			ports = append(ports, fmt.Sprintf("%s:%d/%s", *p.Name, *p.Port, *p.Protocol))
		}
		for _, e := range s.Endpoints {
			r := "ready"
			if e.Conditions.Ready == nil || !*e.Conditions.Ready {
				r = "notready"
			}
			eps = append(eps, strings.Join(e.Addresses, "+")+"="+r)
		}
		slices.Sort(ports)
		slices.Sort(eps)
		ref := metav1.GetControllerOf(&s)
		if ref == nil || ref.Kind != "Endpoints" || ref.Name != svc {
			out = append(out, "not owned by its Endpoints: ")
		}
		out = append(out, fmt.Sprintf("%s %s: %s", s.AddressType, strings.Join(ports, ","), strings.Join(eps, ",")))
	}
	slices.Sort(out)
	return out
}

func (tc *testCluster) waitMirrored(svc string, want ...string) {
	tc.t.Helper()
	testutil.Eventually(tc.t, waitTimeout, "mirrored slices of "+svc, func() error {
		got := tc.mirroredOf(svc)
		if !slices.Equal(got, want) {
			return fmt.Errorf("\ngot  %q\nwant %q", got, want)
		}
		return nil
	})
}

// TestMirroringFollowsEndpoints is the conformance spec's sequence: a custom
// Endpoints of a selector-less Service is mirrored, and updates and the
// deletion follow.
func TestMirroringFollowsEndpoints(t *testing.T) {
	tc := newEndpointsCluster(t)
	tc.createService(testService("example-custom-endpoints", nil, corev1.ServicePort{Name: "example", Port: 80}))
	ep := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: "example-custom-endpoints", Namespace: "default", Labels: map[string]string{"team": "a"}},
		Subsets: []corev1.EndpointSubset{{
			Ports:     []corev1.EndpointPort{{Port: 80}},
			Addresses: []corev1.EndpointAddress{{IP: "10.1.2.3"}},
		}},
	}
	created, err := tc.client.CoreV1().Endpoints("default").Create(tc.ctx, ep, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tc.waitMirrored("example-custom-endpoints", "IPv4 :80/TCP: 10.1.2.3=ready")
	l, _ := tc.client.DiscoveryV1().EndpointSlices("default").List(tc.ctx, metav1.ListOptions{LabelSelector: "team=a"})
	if len(l.Items) != 1 || !strings.HasPrefix(l.Items[0].Name, "example-custom-endpoints-") {
		t.Errorf("the slice does not carry the Endpoints' labels or its name: %+v", l.Items)
	}

	ep.Subsets[0].Addresses = []corev1.EndpointAddress{{IP: "10.2.3.4"}}
	ep.Subsets[0].NotReadyAddresses = []corev1.EndpointAddress{{IP: "2001:db8::7"}}
	ep.ResourceVersion = created.ResourceVersion
	if _, err := tc.client.CoreV1().Endpoints("default").Update(tc.ctx, ep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.waitMirrored("example-custom-endpoints",
		"IPv4 :80/TCP: 10.2.3.4=ready",
		"IPv6 :80/TCP: 2001:db8::7=notready")

	if err := tc.client.CoreV1().Endpoints("default").Delete(tc.ctx, ep.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.waitMirrored("example-custom-endpoints")
}

// TestMirroringRepacksSubsets checks addresses are grouped by the ports they
// serve, whatever subsets they were written in, with one slice per port set,
// and that invalid addresses are skipped.
func TestMirroringRepacksSubsets(t *testing.T) {
	tc := newEndpointsCluster(t)
	tc.createService(testService("multi", nil, corev1.ServicePort{Name: "a", Port: 80}, corev1.ServicePort{Name: "b", Port: 81}))
	_, err := tc.client.CoreV1().Endpoints("default").Create(tc.ctx, &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: "multi", Namespace: "default"},
		Subsets: []corev1.EndpointSubset{
			{Ports: []corev1.EndpointPort{{Name: "a", Port: 8090}}, Addresses: []corev1.EndpointAddress{{IP: "10.0.0.1"}, {IP: "10.0.0.2"}}},
			{Ports: []corev1.EndpointPort{{Name: "b", Port: 9090}}, Addresses: []corev1.EndpointAddress{{IP: "10.0.0.1"}}},
			{Ports: []corev1.EndpointPort{{Name: "b", Port: 9090}}, Addresses: []corev1.EndpointAddress{{IP: "10.0.0.2"}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tc.waitMirrored("multi", "IPv4 a:8090/TCP,b:9090/TCP: 10.0.0.1=ready,10.0.0.2=ready")
}

// TestMirroringLeavesOthersAlone checks what is not mirrored: the Endpoints
// of a Service with a selector, skip-mirror ones, leader-election locks and
// Endpoints without a Service; and that gaining a selector removes the
// mirror while the endpoints controller takes over.
func TestMirroringLeavesOthersAlone(t *testing.T) {
	tc := newEndpointsCluster(t)
	mk := func(name string, lbls, ann map[string]string) {
		t.Helper()
		_, err := tc.client.CoreV1().Endpoints("default").Create(tc.ctx, &corev1.Endpoints{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: lbls, Annotations: ann},
			Subsets: []corev1.EndpointSubset{{Ports: []corev1.EndpointPort{{Port: 80}},
				Addresses: []corev1.EndpointAddress{{IP: "192.0.2.1"}}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	tc.createService(testService("skip", nil, corev1.ServicePort{Port: 80}))
	mk("skip", map[string]string{discoveryv1.LabelSkipMirror: "true"}, nil)
	tc.createService(testService("lock", nil, corev1.ServicePort{Port: 80}))
	mk("lock", nil, map[string]string{leaderElectionAnnotation: "{}"})
	mk("no-service", nil, nil)
	tc.createService(testService("later", nil, corev1.ServicePort{Port: 80}))
	mk("later", nil, nil)
	tc.waitMirrored("later", "IPv4 :80/TCP: 192.0.2.1=ready")
	for _, name := range []string{"skip", "lock", "no-service"} {
		if got := tc.mirroredOf(name); len(got) != 0 {
			t.Errorf("%s was mirrored: %q", name, got)
		}
	}

	// The Service gains a selector: the mirror goes.
	svc, err := tc.client.CoreV1().Services("default").Get(tc.ctx, "later", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Spec.Selector = map[string]string{"app": "later"}
	if _, err := tc.client.CoreV1().Services("default").Update(tc.ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.waitMirrored("later")
}

// TestMirroringRestoresDeletedSlice checks a mirrored slice deleted by hand is
// recreated, and one edited by hand is put back.
func TestMirroringRestoresSlices(t *testing.T) {
	tc := newEndpointsCluster(t)
	tc.createService(testService("ext", nil, corev1.ServicePort{Port: 80}))
	ep, err := tc.client.CoreV1().Endpoints("default").Create(tc.ctx, &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: "ext", Namespace: "default"},
		Subsets: []corev1.EndpointSubset{{Ports: []corev1.EndpointPort{{Port: 80}},
			Addresses: []corev1.EndpointAddress{{IP: "192.0.2.1"}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tc.waitMirrored("ext", "IPv4 :80/TCP: 192.0.2.1=ready")
	l, _ := tc.client.DiscoveryV1().EndpointSlices("default").List(tc.ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=ext"})
	s := l.Items[0]
	s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.99"}}}
	if _, err := tc.client.DiscoveryV1().EndpointSlices("default").Update(tc.ctx, &s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.waitMirrored("ext", "IPv4 :80/TCP: 192.0.2.1=ready")
	if err := tc.client.DiscoveryV1().EndpointSlices("default").Delete(tc.ctx, s.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "a new slice", func() error {
		l, _ := tc.client.DiscoveryV1().EndpointSlices("default").List(tc.ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=ext"})
		if len(l.Items) != 1 || l.Items[0].Name == s.Name || l.Items[0].OwnerReferences[0].UID != ep.UID {
			return fmt.Errorf("%d slices", len(l.Items))
		}
		return nil
	})
}

func TestRepackSubsets(t *testing.T) {
	ref := func(uid string) *corev1.ObjectReference { return &corev1.ObjectReference{UID: types.UID(uid)} }
	in := []corev1.EndpointSubset{
		{Ports: []corev1.EndpointPort{{Name: "a", Port: 1}}, Addresses: []corev1.EndpointAddress{{IP: "10.0.0.2"}, {IP: "10.0.0.1", TargetRef: ref("x")}}},
		{Ports: []corev1.EndpointPort{{Name: "a", Port: 1}}, NotReadyAddresses: []corev1.EndpointAddress{{IP: "10.0.0.2"}}},
		{Ports: []corev1.EndpointPort{{Name: "b", Port: 2}}, Addresses: []corev1.EndpointAddress{{IP: "10.0.0.1", TargetRef: ref("x")}}},
		{Addresses: []corev1.EndpointAddress{{IP: "10.0.0.9"}}},
	}
	var got []string
	for _, ss := range repackSubsets(in) {
		var s []string
		for _, a := range ss.Addresses {
			s = append(s, a.IP)
		}
		for _, a := range ss.NotReadyAddresses {
			s = append(s, a.IP+"(notready)")
		}
		got = append(got, endpointPortsSig(ss.Ports)+" "+strings.Join(s, ","))
	}
	want := []string{
		" 10.0.0.9",                          // a subset without ports keeps its addresses
		"a//1/; 10.0.0.1,10.0.0.2(notready)", // not ready anywhere: not ready
		"b//2/; 10.0.0.1",
	}
	if !slices.Equal(got, want) {
		t.Errorf("repacked:\ngot  %q\nwant %q", got, want)
	}
}

// TestForegroundDeletionOfSliceOwners checks an Endpoints and a Service
// deleted in the foreground go once the garbage collector has deleted their
// EndpointSlices (mirrored ones, and the endpoints controller's).
func TestForegroundDeletionOfSliceOwners(t *testing.T) {
	tc := newEndpointsCluster(t)
	tc.createService(testService("ext", nil, corev1.ServicePort{Port: 80}))
	if _, err := tc.client.CoreV1().Endpoints("default").Create(tc.ctx, &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: "ext", Namespace: "default"},
		Subsets: []corev1.EndpointSubset{{Ports: []corev1.EndpointPort{{Port: 80}},
			Addresses: []corev1.EndpointAddress{{IP: "192.0.2.1"}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.waitMirrored("ext", "IPv4 :80/TCP: 192.0.2.1=ready")
	tc.createService(testService("web", map[string]string{"app": "web"}, corev1.ServicePort{Name: "http", Port: 80}))
	testutil.Eventually(t, waitTimeout, "web's slice", func() error {
		_, sl := tc.slicesOf("web")
		if len(sl) != 1 {
			return fmt.Errorf("%d slices", len(sl))
		}
		return nil
	})

	fg := metav1.DeletePropagationForeground
	if err := tc.client.CoreV1().Endpoints("default").Delete(tc.ctx, "ext", metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		t.Fatal(err)
	}
	if err := tc.client.CoreV1().Services("default").Delete(tc.ctx, "web", metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "both gone with their slices", func() error {
		_, epErr := tc.client.CoreV1().Endpoints("default").Get(tc.ctx, "ext", metav1.GetOptions{})
		_, svcErr := tc.client.CoreV1().Services("default").Get(tc.ctx, "web", metav1.GetOptions{})
		_, ext := tc.slicesOf("ext")
		_, web := tc.slicesOf("web")
		if !apierrors.IsNotFound(epErr) || !apierrors.IsNotFound(svcErr) || len(ext) != 0 || len(web) != 0 {
			return fmt.Errorf("endpoints: %v, service: %v, %d+%d slices", epErr, svcErr, len(ext), len(web))
		}
		return nil
	})
}
