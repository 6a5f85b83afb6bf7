package apiserver

import (
	"net/http"
	"net/netip"
	"slices"
	"testing"

	"github.com/minikit/minikit/internal/apiserver/validation"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var dualStackConfig = func() validation.Config {
	c := validation.DefaultConfig()
	c.SecondaryServiceCIDR = netip.MustParsePrefix("fd00:10:96::/112")
	return c
}()

func withPolicy(p corev1.IPFamilyPolicy) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Spec.IPFamilyPolicy = &p }
}

// wantIPs checks svc's cluster IPs are one per family in ipFamilies' order,
// each in that family's service CIDR and each with its IPAddress object.
func wantIPs(t *testing.T, a *testAPI, svc *corev1.Service, fams ...corev1.IPFamily) {
	t.Helper()
	if !slices.Equal(svc.Spec.IPFamilies, fams) || len(svc.Spec.ClusterIPs) != len(fams) || svc.Spec.ClusterIP != svc.Spec.ClusterIPs[0] {
		t.Fatalf("service %s: families %v clusterIP %s clusterIPs %v, want one IP of each of %v",
			svc.Name, svc.Spec.IPFamilies, svc.Spec.ClusterIP, svc.Spec.ClusterIPs, fams)
	}
	for i, ip := range svc.Spec.ClusterIPs {
		cidr, _ := dualStackConfig.CIDRFor(fams[i])
		if addr, err := netip.ParseAddr(ip); err != nil || !cidr.Contains(addr) {
			t.Errorf("service %s: clusterIPs[%d] %s not in %s", svc.Name, i, ip, cidr)
		}
		var obj networkingv1.IPAddress
		a.read("/apis/networking.k8s.io/v1/ipaddresses/"+ip, &obj)
		if obj.Labels[networkingv1.LabelIPAddressFamily] != string(fams[i]) || obj.Spec.ParentRef == nil || obj.Spec.ParentRef.Name != svc.Name {
			t.Errorf("IPAddress %s: labels %v parent %+v, want family %s and parent %s", ip, obj.Labels, obj.Spec.ParentRef, fams[i], svc.Name)
		}
	}
}

// TestDualStackServices: in a cluster with two service CIDRs, the default
// ServiceCIDR holds both, Services get one ClusterIP per family they ask
// for, an upgrade to dual-stack allocates the secondary and a downgrade
// releases it (its IPAddress goes).
func TestDualStackServices(t *testing.T) {
	a := newTestAPIWith(t, apiOptions{vcfg: dualStackConfig})

	var sc networkingv1.ServiceCIDR
	a.read("/apis/networking.k8s.io/v1/servicecidrs/kubernetes", &sc)
	if want := []string{"10.96.0.0/12", "fd00:10:96::/112"}; !slices.Equal(sc.Spec.CIDRs, want) {
		t.Errorf("default ServiceCIDR has %v, want %v", sc.Spec.CIDRs, want)
	}

	single := newService("single")
	a.create(servicesPath, single)
	wantIPs(t, a, single, corev1.IPv4Protocol)

	v6 := newService("v6", func(s *corev1.Service) { s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol} })
	a.create(servicesPath, v6)
	wantIPs(t, a, v6, corev1.IPv6Protocol)

	dual := newService("dual", withPolicy(corev1.IPFamilyPolicyRequireDualStack), func(s *corev1.Service) {
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
	})
	a.create(servicesPath, dual)
	wantIPs(t, a, dual, corev1.IPv6Protocol, corev1.IPv4Protocol)

	asked := newService("asked", withPolicy(corev1.IPFamilyPolicyPreferDualStack), func(s *corev1.Service) {
		s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.200", []string{"10.96.0.200", "fd00:10:96::200"}
	})
	a.create(servicesPath, asked)
	wantIPs(t, a, asked, corev1.IPv4Protocol, corev1.IPv6Protocol)
	if asked.Spec.ClusterIPs[1] != "fd00:10:96::200" {
		t.Errorf("asked for fd00:10:96::200, got %v", asked.Spec.ClusterIPs)
	}
	taken := newService("taken", withPolicy(corev1.IPFamilyPolicyPreferDualStack), func(s *corev1.Service) {
		s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.201", []string{"10.96.0.201", "fd00:10:96::200"}
	})
	a.post(servicesPath, taken).wantStatus(t, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
		"spec.clusterIPs: Invalid value: [\"10.96.0.201\",\"fd00:10:96::200\"]: failed to allocate IP fd00:10:96::200: provided IP is already allocated")
	if a.exists("/apis/networking.k8s.io/v1/ipaddresses/10.96.0.201") {
		t.Errorf("a refused create left the IPAddress of its primary behind")
	}

	// Upgrade: the stored Service with a dual-stack policy.
	up := single.DeepCopy()
	up.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicyPreferDualStack)
	a.put(servicesPath+"/single", up).mustCode(t, http.StatusOK, up)
	wantIPs(t, a, up, corev1.IPv4Protocol, corev1.IPv6Protocol)
	if up.Spec.ClusterIP != single.Spec.ClusterIP {
		t.Errorf("upgrade changed the primary %s to %s", single.Spec.ClusterIP, up.Spec.ClusterIP)
	}

	// Downgrade without SingleStack is refused, naming the field.
	down := up.DeepCopy()
	down.Spec.ClusterIPs = down.Spec.ClusterIPs[:1]
	a.put(servicesPath+"/single", down).wantStatus(t, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
		"spec.ipFamilyPolicy: Invalid value: \"PreferDualStack\": must be 'SingleStack' to release the secondary cluster IP")
	// With SingleStack it releases the secondary.
	down = up.DeepCopy()
	down.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicySingleStack)
	a.put(servicesPath+"/single", down).mustCode(t, http.StatusOK, down)
	wantIPs(t, a, down, corev1.IPv4Protocol)
	if a.exists("/apis/networking.k8s.io/v1/ipaddresses/" + up.Spec.ClusterIPs[1]) {
		t.Errorf("downgrade left IPAddress %s", up.Spec.ClusterIPs[1])
	}

	// Headless selectorless: both families, no IPs.
	hl := newService("hl", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.Selector = corev1.ClusterIPNone, nil })
	a.create(servicesPath, hl)
	if !slices.Equal(hl.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}) || !slices.Equal(hl.Spec.ClusterIPs, []string{"None"}) {
		t.Errorf("headless selectorless: families %v clusterIPs %v", hl.Spec.IPFamilies, hl.Spec.ClusterIPs)
	}

	a.delete(servicesPath+"/dual").mustCode(t, http.StatusOK, nil)
	for _, ip := range dual.Spec.ClusterIPs {
		if a.exists("/apis/networking.k8s.io/v1/ipaddresses/" + ip) {
			t.Errorf("deleted service left IPAddress %s", ip)
		}
	}
}

// TestSingleStackClusterRefusesDualStack: bad input in a single-stack
// cluster gets upstream's errors naming the field.
func TestSingleStackClusterRefusesDualStack(t *testing.T) {
	a := newTestAPI(t)
	for _, tc := range []struct {
		svc *corev1.Service
		msg string
	}{
		{newService("req", withPolicy(corev1.IPFamilyPolicyRequireDualStack)),
			`spec.ipFamilyPolicy: Invalid value: "RequireDualStack": this cluster is not configured for dual-stack services`},
		{newService("v6", func(s *corev1.Service) { s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol} }),
			`spec.ipFamilies[0]: Invalid value: "IPv6": not configured on this cluster`},
		{newService("v6ip", func(s *corev1.Service) { s.Spec.ClusterIP = "fd00:10:96::10" }),
			`spec.clusterIPs[0]: Invalid value: ["fd00:10:96::10"]: IPv6 is not configured on this cluster`},
	} {
		a.post(servicesPath, tc.svc).wantStatus(t, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, tc.msg)
	}
}

// TestDefaultServiceCIDRUpgradedToDualStack: a single-stack cluster
// restarted with a secondary service CIDR gets it added to its default
// ServiceCIDR, as kube-apiserver upgrades the "kubernetes" one; its
// Services keep their single family until asked (PreferDualStack is not
// applied behind their back).
func TestDefaultServiceCIDRUpgradedToDualStack(t *testing.T) {
	a := newTestAPI(t)
	old := newService("old")
	a.create(servicesPath, old)
	a.close()

	b := newTestAPIWith(t, apiOptions{vcfg: dualStackConfig, dbPath: a.dbPath})
	var sc networkingv1.ServiceCIDR
	b.read("/apis/networking.k8s.io/v1/servicecidrs/kubernetes", &sc)
	if want := []string{"10.96.0.0/12", "fd00:10:96::/112"}; !slices.Equal(sc.Spec.CIDRs, want) {
		t.Errorf("default ServiceCIDR after the restart has %v, want %v", sc.Spec.CIDRs, want)
	}
	var got corev1.Service
	b.read(servicesPath+"/old", &got)
	wantIPs(t, b, &got, corev1.IPv4Protocol)
	got.Spec.IPFamilyPolicy = ptrTo(corev1.IPFamilyPolicyRequireDualStack)
	b.put(servicesPath+"/old", &got).mustCode(t, http.StatusOK, &got)
	wantIPs(t, b, &got, corev1.IPv4Protocol, corev1.IPv6Protocol)
}
