package validation

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The clusters of upstream's TestCreateInitIPFields.
var (
	v4Cluster   = Config{ServiceCIDR: netip.MustParsePrefix("10.96.0.0/12")}
	v6Cluster   = Config{ServiceCIDR: netip.MustParsePrefix("fd00:10:96::/112")}
	v4v6Cluster = Config{ServiceCIDR: netip.MustParsePrefix("10.96.0.0/12"), SecondaryServiceCIDR: netip.MustParsePrefix("fd00:10:96::/112")}
	v6v4Cluster = Config{ServiceCIDR: netip.MustParsePrefix("fd00:10:96::/112"), SecondaryServiceCIDR: netip.MustParsePrefix("10.96.0.0/12")}
)

const (
	v4, v6 = corev1.IPv4Protocol, corev1.IPv6Protocol
	single = corev1.IPFamilyPolicySingleStack
	prefer = corev1.IPFamilyPolicyPreferDualStack
	requir = corev1.IPFamilyPolicyRequireDualStack
)

func families(f ...corev1.IPFamily) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Spec.IPFamilies = f }
}

func policy(p corev1.IPFamilyPolicy) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Spec.IPFamilyPolicy = &p }
}

func clusterIPs(ips ...string) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = ips[0], ips }
}

func headlessSelectorless(s *corev1.Service) {
	s.Spec.ClusterIP, s.Spec.Selector, s.Spec.Ports = corev1.ClusterIPNone, nil, nil
}

func headless(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }

// TestIPFamiliesOnCreate: a new Service's policy and families as
// kube-apiserver defaults them in each kind of cluster, and the error (field
// and message) where it refuses them. Cases from upstream's
// pkg/registry/core/service/storage TestCreateInitIPFields.
func TestIPFamiliesOnCreate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cluster  Config
		svc      *corev1.Service
		policy   corev1.IPFamilyPolicy
		families []corev1.IPFamily
		err      string // "field: message fragment"
	}{
		{"v4: nothing asked is single-stack v4", v4Cluster, service(), single, []corev1.IPFamily{v4}, ""},
		{"v4: v6 family is not configured", v4Cluster, service(families(v6)), "", nil,
			"spec.ipFamilies[0]: Invalid value: \"IPv6\": not configured on this cluster"},
		{"v4: two families with SingleStack", v4Cluster, service(families(v4, v6), policy(single)), "", nil,
			"spec.ipFamilyPolicy: Invalid value: \"SingleStack\": must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified"},
		{"v4: PreferDualStack stays single", v4Cluster, service(policy(prefer)), prefer, []corev1.IPFamily{v4}, ""},
		{"v4: RequireDualStack refused", v4Cluster, service(policy(requir)), "", nil,
			"spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": this cluster is not configured for dual-stack services"},
		{"v4: PreferDualStack with v4,v6 refuses v6", v4Cluster, service(policy(prefer), families(v4, v6)), "", nil,
			"spec.ipFamilies[1]: Invalid value: \"IPv6\": not configured on this cluster"},
		{"v4: an IPv6 clusterIP", v4Cluster, service(clusterIPs("fd00:10:96::10")), "", nil,
			"spec.clusterIPs[0]: Invalid value: [\"fd00:10:96::10\"]: IPv6 is not configured on this cluster"},
		{"v4: an IPv6 clusterIP where ipFamilies says IPv4", v4Cluster, service(clusterIPs("fd00:10:96::10"), families(v4)), "", nil,
			"spec.clusterIP: Invalid value: \"fd00:10:96::10\": expected an IPv4 value as indicated by `ipFamilies[0]`"},
		{"v4: headless selectorless takes both", v4Cluster, service(headlessSelectorless), requir, []corev1.IPFamily{v4, v6}, ""},
		{"v4: headless selectorless v6 first", v4Cluster, service(headlessSelectorless, families(v6)), requir, []corev1.IPFamily{v6, v4}, ""},
		{"v4: headless selectorless SingleStack", v4Cluster, service(headlessSelectorless, policy(single)), single, []corev1.IPFamily{v4}, ""},
		{"v4: headless with selector is single", v4Cluster, service(headless), single, []corev1.IPFamily{v4}, ""},
		{"v4: headless with selector, RequireDualStack", v4Cluster, service(headless, policy(requir)), "", nil,
			"this cluster is not configured for dual-stack services"},

		{"v6: nothing asked is v6", v6Cluster, service(), single, []corev1.IPFamily{v6}, ""},
		{"v6: v4 not configured", v6Cluster, service(families(v4)), "", nil,
			"spec.ipFamilies[0]: Invalid value: \"IPv4\": not configured on this cluster"},
		{"v6: an IPv4 clusterIP", v6Cluster, service(clusterIPs("10.96.0.10")), "", nil,
			"spec.clusterIPs[0]: Invalid value: [\"10.96.0.10\"]: IPv4 is not configured on this cluster"},

		{"v4v6: nothing asked is single primary", v4v6Cluster, service(), single, []corev1.IPFamily{v4}, ""},
		{"v4v6: v6 single", v4v6Cluster, service(families(v6)), single, []corev1.IPFamily{v6}, ""},
		{"v4v6: PreferDualStack", v4v6Cluster, service(policy(prefer)), prefer, []corev1.IPFamily{v4, v6}, ""},
		{"v4v6: RequireDualStack", v4v6Cluster, service(policy(requir)), requir, []corev1.IPFamily{v4, v6}, ""},
		{"v4v6: RequireDualStack v6 first", v4v6Cluster, service(policy(requir), families(v6)), requir, []corev1.IPFamily{v6, v4}, ""},
		{"v4v6: two families infer PreferDualStack? no: policy unset is SingleStack", v4v6Cluster, service(families(v4, v6)), "", nil,
			"must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified"},
		{"v4v6: families from clusterIPs", v4v6Cluster, service(policy(prefer), clusterIPs("fd00:10:96::10", "10.96.0.10")), prefer, []corev1.IPFamily{v6, v4}, ""},
		{"v4v6: two IPs of one family", v4v6Cluster, service(policy(prefer), clusterIPs("10.96.0.10", "10.96.0.11")), "", nil,
			"spec.clusterIPs: Invalid value: [\"10.96.0.10\",\"10.96.0.11\"]: may specify no more than one IP for each IP family"},
		{"v4v6: IPv6 IP outside the v6 range", v4v6Cluster, service(policy(prefer), clusterIPs("10.96.0.10", "fd00:99::10")), "", nil,
			"spec.clusterIPs[1]: Invalid value: \"fd00:99::10\": failed to allocate IP fd00:99::10: provided IP is not in the valid range. The range of valid IPs is fd00:10:96::/112"},
		{"v4v6: headless with selector PreferDualStack", v4v6Cluster, service(headless, policy(prefer)), prefer, []corev1.IPFamily{v4, v6}, ""},

		{"v6v4: PreferDualStack is v6 first", v6v4Cluster, service(policy(prefer)), prefer, []corev1.IPFamily{v6, v4}, ""},
		{"v6v4: ExternalName gets none", v6v4Cluster, service(func(s *corev1.Service) {
			s.Spec.Type, s.Spec.ExternalName, s.Spec.Selector, s.Spec.Ports = corev1.ServiceTypeExternalName, "db.example.com", nil, nil
		}), "", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := tc.svc.DeepCopy()
			Default(svc, tc.cluster)
			errs := Validate(svc, nil, tc.cluster)
			if tc.err != "" {
				if !strings.Contains(errs.ToAggregate().Error(), tc.err) {
					t.Fatalf("errors %v, want one containing %q", errs, tc.err)
				}
				return
			}
			if len(errs) > 0 {
				t.Fatalf("unexpected errors: %v", errs)
			}
			if policyOf(svc) != tc.policy || !slices.Equal(svc.Spec.IPFamilies, tc.families) {
				t.Errorf("got policy %q families %v, want %q %v", policyOf(svc), svc.Spec.IPFamilies, tc.policy, tc.families)
			}
		})
	}
}

// stored is a Service as a cluster stores it: defaulted, with its IPs.
func stored(cluster Config, ips []string, muts ...func(*corev1.Service)) *corev1.Service {
	s := service(muts...)
	s.UID, s.ResourceVersion = "uid-1", "7"
	Default(s, cluster)
	s.Spec.ClusterIP, s.Spec.ClusterIPs = ips[0], ips
	return s
}

// TestIPFamiliesOnUpdate: the upgrade to dual-stack and the downgrade to
// single-stack, as upstream's TestUpdateIPFamilies* cases: what an update
// ends up with after defaulting, or the error naming the field.
func TestIPFamiliesOnUpdate(t *testing.T) {
	single4 := func() *corev1.Service { return stored(v4v6Cluster, []string{"10.96.0.10"}) }
	dual := func() *corev1.Service {
		return stored(v4v6Cluster, []string{"10.96.0.10", "fd00:10:96::10"}, policy(requir))
	}
	for _, tc := range []struct {
		name     string
		cluster  Config
		old      *corev1.Service
		update   func(*corev1.Service)
		policy   corev1.IPFamilyPolicy
		families []corev1.IPFamily
		ips      int // cluster IPs after defaulting (the allocator adds the missing ones)
		err      string
	}{
		{"upgrade: PreferDualStack adds the other family", v4v6Cluster, single4(),
			func(s *corev1.Service) { s.Spec.IPFamilyPolicy = ptr(prefer) }, prefer, []corev1.IPFamily{v4, v6}, 1, ""},
		{"upgrade: RequireDualStack", v4v6Cluster, single4(),
			func(s *corev1.Service) { s.Spec.IPFamilyPolicy = ptr(requir) }, requir, []corev1.IPFamily{v4, v6}, 1, ""},
		{"upgrade refused on a single-stack cluster", v4Cluster, stored(v4Cluster, []string{"10.96.0.10"}),
			func(s *corev1.Service) { s.Spec.IPFamilyPolicy = ptr(requir) }, "", nil, 0,
			"spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": this cluster is not configured for dual-stack services"},
		{"update omitting the policy keeps it", v4v6Cluster, dual(),
			func(s *corev1.Service) { s.Spec.IPFamilyPolicy = nil }, requir, []corev1.IPFamily{v4, v6}, 2, ""},
		{"downgrade: SingleStack drops the secondary", v4v6Cluster, dual(),
			func(s *corev1.Service) { s.Spec.IPFamilyPolicy = ptr(single) }, single, []corev1.IPFamily{v4}, 1, ""},
		{"downgrade without SingleStack refused", v4v6Cluster, dual(),
			func(s *corev1.Service) { s.Spec.ClusterIPs = s.Spec.ClusterIPs[:1] }, "", nil, 0,
			"spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": must be 'SingleStack' to release the secondary cluster IP"},
		{"the primary family stays", v4v6Cluster, single4(),
			func(s *corev1.Service) { s.Spec.IPFamilies = []corev1.IPFamily{v6} }, "", nil, 0,
			"spec.ipFamilies[0]: Invalid value: [\"IPv6\"]: may not change once set"},
		{"the secondary IP stays", v4v6Cluster, dual(),
			func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:10:96::11"} }, "", nil, 0,
			"spec.clusterIPs[1]: Invalid value: [\"10.96.0.10\",\"fd00:10:96::11\"]: may not change once set"},
		{"PreferDualStack is not downgraded when the cluster loses a family", v4Cluster,
			stored(v4v6Cluster, []string{"10.96.0.10", "fd00:10:96::10"}, policy(prefer)),
			func(s *corev1.Service) { s.Labels = map[string]string{"touched": "yes"} }, prefer, []corev1.IPFamily{v4, v6}, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := tc.old.DeepCopy()
			tc.update(svc)
			DefaultUpdate(svc, tc.old, tc.cluster)
			errs := Validate(svc, tc.old, tc.cluster)
			if tc.err != "" {
				if !strings.Contains(errs.ToAggregate().Error(), tc.err) {
					t.Fatalf("errors %v, want one containing %q", errs, tc.err)
				}
				return
			}
			if len(errs) > 0 {
				t.Fatalf("unexpected errors: %v", errs)
			}
			if policyOf(svc) != tc.policy || !slices.Equal(svc.Spec.IPFamilies, tc.families) || len(svc.Spec.ClusterIPs) != tc.ips {
				t.Errorf("got policy %q families %v clusterIPs %v, want %q %v and %d IPs",
					policyOf(svc), svc.Spec.IPFamilies, svc.Spec.ClusterIPs, tc.policy, tc.families, tc.ips)
			}
		})
	}
}
