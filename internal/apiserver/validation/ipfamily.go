package validation

import (
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// A Service's IP families are chosen as kube-apiserver's service registry
// chooses them (pkg/registry/core/service/storage, initIPFamilyFields): from
// the policy, the families and the cluster IPs the client wrote, the stored
// Service on update, and the families the cluster's service CIDRs have. The
// same function defaults (on a write) and validates (on a copy): its errors
// depend only on its input and the defaults it writes are a fixed point, so
// running it twice yields the same errors.

// Families are the IP families of the cluster's service network, the
// primary first.
func (c Config) Families() []corev1.IPFamily {
	c = c.withDefaults()
	out := []corev1.IPFamily{familyOfPrefix(c.ServiceCIDR)}
	if c.SecondaryServiceCIDR.IsValid() {
		out = append(out, familyOfPrefix(c.SecondaryServiceCIDR))
	}
	return out
}

// CIDRFor is the configured service CIDR of family fam.
func (c Config) CIDRFor(fam corev1.IPFamily) (netip.Prefix, bool) {
	c = c.withDefaults()
	for _, p := range []netip.Prefix{c.ServiceCIDR, c.SecondaryServiceCIDR} {
		if p.IsValid() && familyOfPrefix(p) == fam {
			return p.Masked(), true
		}
	}
	return netip.Prefix{}, false
}

func (c Config) hasFamily(fam corev1.IPFamily) bool {
	return slices.Contains(c.Families(), fam)
}

func familyOfPrefix(p netip.Prefix) corev1.IPFamily {
	if p.Addr().Is4() {
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}

// FamilyOf is the IP family of the address ip, "unknown" when it is none.
func FamilyOf(ip string) corev1.IPFamily {
	a, err := netip.ParseAddr(ip)
	switch {
	case err != nil:
		return corev1.IPFamily("unknown")
	case a.Is4() || a.Is4In6():
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}

func otherFamily(f corev1.IPFamily) corev1.IPFamily {
	if f == corev1.IPv4Protocol {
		return corev1.IPv6Protocol
	}
	return corev1.IPv4Protocol
}

// DefaultUpdate is Default for an update of old: a Service's IP family
// policy and families are defaulted from the stored Service, as
// kube-apiserver does (an update that omits ipFamilyPolicy keeps the stored
// one). Other kinds are defaulted as Default does.
func DefaultUpdate(obj, old runtime.Object, cfg Config) {
	svc, ok := obj.(*corev1.Service)
	oldSvc, ok2 := old.(*corev1.Service)
	if !ok || !ok2 || oldSvc == nil {
		Default(obj, cfg)
		return
	}
	cfg = cfg.withDefaults()
	defaultServiceFields(svc)
	initIPFamilyFields(svc, oldSvc, cfg)
}

func policyOf(svc *corev1.Service) corev1.IPFamilyPolicy {
	if svc.Spec.IPFamilyPolicy == nil {
		return ""
	}
	return *svc.Spec.IPFamilyPolicy
}

// initIPFamilyFields defaults ipFamilyPolicy and ipFamilies of svc (old is
// the stored Service on update, else nil) and returns the errors
// kube-apiserver's allocator returns for them: families the cluster does not
// have, RequireDualStack on a single-stack cluster, and a secondary IP or
// family dropped without SingleStack.
func initIPFamilyFields(svc, old *corev1.Service, cfg Config) field.ErrorList {
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	// A PreferDualStack Service is neither upgraded nor downgraded when the
	// cluster changes stacks; only an explicit change of its fields does.
	if matchingPreferDualStack(svc, old) {
		return nil
	}
	if svc.Spec.IPFamilyPolicy == nil {
		switch {
		case old != nil && old.Spec.IPFamilyPolicy != nil:
			svc.Spec.IPFamilyPolicy = ptr(*old.Spec.IPFamilyPolicy)
		case svc.Spec.ClusterIP == corev1.ClusterIPNone && len(svc.Spec.Selector) == 0:
			svc.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyRequireDualStack)
		default:
			svc.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicySingleStack)
		}
	}
	// Malformed input is reported by validateClusterIPs; defaulting from it
	// would only make those errors harder to read.
	if errs := clusterIPsFields(svc, old); len(errs) > 0 {
		return nil
	}
	polPath := specPath.Child("ipFamilyPolicy")
	var errs field.ErrorList
	if old != nil {
		if policyOf(svc) == corev1.IPFamilyPolicySingleStack {
			// SingleStack with the stored IPs and families is the intent to
			// release the secondary; clusterIPs[0] is immutable.
			if slices.Equal(svc.Spec.ClusterIPs, old.Spec.ClusterIPs) && len(svc.Spec.ClusterIPs) > 1 {
				svc.Spec.ClusterIPs = svc.Spec.ClusterIPs[:1]
			}
			if slices.Equal(svc.Spec.IPFamilies, old.Spec.IPFamilies) && len(svc.Spec.IPFamilies) > 1 {
				svc.Spec.IPFamilies = svc.Spec.IPFamilies[:1]
			}
		} else {
			if len(svc.Spec.ClusterIPs) > 0 && len(svc.Spec.ClusterIPs) < len(old.Spec.ClusterIPs) {
				errs = append(errs, field.Invalid(polPath, svc.Spec.IPFamilyPolicy, "must be 'SingleStack' to release the secondary cluster IP"))
			}
			if len(svc.Spec.IPFamilies) > 0 && len(svc.Spec.IPFamilies) < len(old.Spec.IPFamilies) {
				errs = append(errs, field.Invalid(polPath, svc.Spec.IPFamilyPolicy, "must be 'SingleStack' to release the secondary IP family"))
			}
		}
	}
	if policyOf(svc) == corev1.IPFamilyPolicySingleStack {
		if len(svc.Spec.ClusterIPs) == 2 {
			errs = append(errs, field.Invalid(polPath, svc.Spec.IPFamilyPolicy, "must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified"))
		}
		if len(svc.Spec.IPFamilies) == 2 {
			errs = append(errs, field.Invalid(polPath, svc.Spec.IPFamilyPolicy, "must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified"))
		}
	}
	// Families follow the cluster IPs the client asked for.
	for i, ip := range svc.Spec.ClusterIPs {
		if ip == corev1.ClusterIPNone {
			break
		}
		if i < len(svc.Spec.IPFamilies) {
			continue
		}
		fam := FamilyOf(ip)
		if !cfg.hasFamily(fam) {
			errs = append(errs, field.Invalid(specPath.Child("clusterIPs").Index(i), svc.Spec.ClusterIPs, fmt.Sprintf("%s is not configured on this cluster", fam)))
		} else {
			svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, fam)
		}
	}
	if len(errs) > 0 {
		return errs
	}

	// Headless without a selector: the endpoints are written by hand, so any
	// family goes, even one the cluster has no service CIDR of.
	if svc.Spec.ClusterIP == corev1.ClusterIPNone && len(svc.Spec.Selector) == 0 {
		if len(svc.Spec.IPFamilies) == 0 {
			svc.Spec.IPFamilies = []corev1.IPFamily{cfg.Families()[0]}
		}
		if len(svc.Spec.IPFamilies) < 2 && policyOf(svc) != corev1.IPFamilyPolicySingleStack {
			svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, otherFamily(svc.Spec.IPFamilies[0]))
		}
		return nil
	}

	if policyOf(svc) == corev1.IPFamilyPolicyRequireDualStack && len(cfg.Families()) < 2 {
		errs = append(errs, field.Invalid(polPath, svc.Spec.IPFamilyPolicy, "this cluster is not configured for dual-stack services"))
	}
	for i, fam := range svc.Spec.IPFamilies {
		if !cfg.hasFamily(fam) {
			errs = append(errs, field.Invalid(specPath.Child("ipFamilies").Index(i), fam, "not configured on this cluster"))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	if len(svc.Spec.IPFamilies) == 0 {
		svc.Spec.IPFamilies = []corev1.IPFamily{cfg.Families()[0]}
	}
	if policyOf(svc) != corev1.IPFamilyPolicySingleStack && len(svc.Spec.IPFamilies) == 1 && len(cfg.Families()) == 2 {
		svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, otherFamily(svc.Spec.IPFamilies[0]))
	}
	return nil
}

// matchingPreferDualStack is upstream's isMatchingPreferDualStackClusterIPFields:
// an update of a PreferDualStack Service that keeps its type, policy, cluster
// IPs and families.
func matchingPreferDualStack(svc, old *corev1.Service) bool {
	if old == nil || svc.Spec.IPFamilyPolicy == nil || old.Spec.Type != svc.Spec.Type {
		return false
	}
	switch svc.Spec.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
	default:
		return false
	}
	if policyOf(svc) != corev1.IPFamilyPolicyPreferDualStack ||
		(old.Spec.IPFamilyPolicy != nil && policyOf(old) != corev1.IPFamilyPolicyPreferDualStack) {
		return false
	}
	return slices.Equal(svc.Spec.ClusterIPs, old.Spec.ClusterIPs) && slices.Equal(svc.Spec.IPFamilies, old.Spec.IPFamilies)
}

// upgradeDowngradeErrors are upstream's validateUpgradeDowngradeClusterIPs
// and validateUpgradeDowngradeIPFamilies: on update, the primary IP and
// family stay, and releasing the secondary needs SingleStack.
func upgradeDowngradeErrors(svc, old *corev1.Service) field.ErrorList {
	if svc.Spec.Type == corev1.ServiceTypeExternalName || old.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	var errs field.ErrorList
	ipsPath, famPath, polPath := specPath.Child("clusterIPs"), specPath.Child("ipFamilies"), specPath.Child("ipFamilyPolicy")
	if !(isHeadless(svc) && isHeadless(old)) {
		cur, prev := svc.Spec.ClusterIPs, old.Spec.ClusterIPs
		switch {
		case len(prev) == len(cur):
			for i := range prev {
				if i > 0 && prev[i] != cur[i] { // [0] is reported on spec.clusterIP
					errs = append(errs, field.Invalid(ipsPath.Index(i), cur, "may not change once set"))
				}
			}
		case len(prev) > len(cur):
			if len(cur) == 1 && policyOf(svc) != corev1.IPFamilyPolicySingleStack {
				errs = append(errs, field.Invalid(polPath, svc.Spec.IPFamilyPolicy, "must be set to 'SingleStack' when releasing the secondary clusterIP"))
			}
		}
	}
	if isHeadless(svc) || isHeadless(old) {
		return errs
	}
	cur, prev := svc.Spec.IPFamilies, old.Spec.IPFamilies
	switch {
	case len(prev) == len(cur):
		if !slices.Equal(prev, cur) {
			errs = append(errs, field.Invalid(famPath.Index(0), cur, "may not change once set"))
		}
	case len(prev) > len(cur):
		if len(cur) > 0 && cur[0] != prev[0] {
			errs = append(errs, field.Invalid(famPath.Index(0), cur, "may not change once set"))
		}
		if len(cur) == 1 && policyOf(svc) != corev1.IPFamilyPolicySingleStack {
			errs = append(errs, field.Invalid(polPath, svc.Spec.IPFamilyPolicy, "must be set to 'SingleStack' when releasing the secondary ipFamily"))
		}
	case len(prev) > 0 && len(cur) > 0 && cur[0] != prev[0]:
		errs = append(errs, field.Invalid(famPath.Index(0), cur, "may not change once set"))
	}
	return errs
}
