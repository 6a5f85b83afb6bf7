package controllers

import (
	"net/netip"
	"testing"

	"github.com/minikit/minikit/internal/apiserver"
	"github.com/minikit/minikit/internal/apiserver/apiservertest"
	"github.com/minikit/minikit/internal/apiserver/validation"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// newDualStackCluster is newTestCluster over an API server with service
// CIDRs of both families.
func newDualStackCluster(t *testing.T) *testCluster {
	t.Helper()
	vcfg := validation.DefaultConfig()
	vcfg.SecondaryServiceCIDR = netip.MustParsePrefix("fd00:10:96::/112")
	return newTestClusterOn(t, apiservertest.StartConfig(t, apiserver.Config{Validation: vcfg}))
}

// TestSlicesPerFamily: a dual-stack Service gets one EndpointSlice per IP
// family (addressType IPv4 and IPv6), each with the pods' address of its
// family; a single-stack one only its family's; downgrading the Service
// removes the other family's slice. The Endpoints object keeps the primary
// family, as upstream's endpoints controller.
func TestSlicesPerFamily(t *testing.T) {
	tc := newDualStackCluster(t)
	tc.createNode("node-1", true, nil)
	tc.startControllers(Config{})
	prefer := corev1.IPFamilyPolicyPreferDualStack
	svc := testService("web", map[string]string{"app": "web"}, httpPort(intstr.FromInt32(9376)))
	svc.Spec.IPFamilyPolicy = &prefer
	svc = tc.createService(svc)
	v6only := testService("web6", map[string]string{"app": "web"}, httpPort(intstr.FromInt32(9376)))
	v6only.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol}
	tc.createService(v6only)

	tc.endpointPod("web-0", "", false)
	tc.updatePodStatus("default", "web-0", func(p *corev1.Pod) {
		runningStatus(p, "10.244.0.5", true)
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.0.5"}, {IP: "fd00:10:244::5"}}
	})
	tc.waitEndpoints("web",
		[]string{"web-0 10.244.0.5 ready node=node-1 http:9376/TCP"},
		[]string{
			"web-0 10.244.0.5 r=true s=true t=false node=node-1 http:9376/TCP",
			"web-0 fd00:10:244::5 r=true s=true t=false node=node-1 http:9376/TCP",
		})
	tc.waitEndpoints("web6",
		[]string{"web-0 fd00:10:244::5 ready node=node-1 http:9376/TCP"},
		[]string{"web-0 fd00:10:244::5 r=true s=true t=false node=node-1 http:9376/TCP"})
	_, sl := tc.slicesOf("web")
	types := map[discoveryv1.AddressType]int{}
	for _, s := range sl {
		types[s.AddressType]++
	}
	if types[discoveryv1.AddressTypeIPv4] != 1 || types[discoveryv1.AddressTypeIPv6] != 1 {
		t.Errorf("slices of web by address type %v, want one IPv4 and one IPv6", types)
	}

	// Downgrade to single-stack: the IPv6 slice goes.
	for {
		cur, err := tc.client.CoreV1().Services("default").Get(tc.ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		single := corev1.IPFamilyPolicySingleStack
		cur.Spec.IPFamilyPolicy = &single
		if _, err = tc.client.CoreV1().Services("default").Update(tc.ctx, cur, metav1.UpdateOptions{}); err == nil {
			break
		} else if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	tc.waitEndpoints("web",
		[]string{"web-0 10.244.0.5 ready node=node-1 http:9376/TCP"},
		[]string{"web-0 10.244.0.5 r=true s=true t=false node=node-1 http:9376/TCP"})
}
