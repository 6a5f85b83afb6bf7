package validation

import (
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateServiceCIDR follows kubernetes pkg/apis/networking/validation:
// one or two CIDRs in canonical form, at most one per IP family. On update
// the CIDRs are immutable, except that a single-stack range may gain a
// second family (the dual-stack upgrade kube-apiserver itself performs).
func validateServiceCIDR(sc, old *networkingv1.ServiceCIDR) field.ErrorList {
	allErrs := validateMeta(&sc.ObjectMeta, metaOf(old), false, nameIsSubdomain)
	cidrsPath := specPath.Child("cidrs")
	if old == nil {
		return append(allErrs, validateServiceCIDRSpec(sc.Spec.CIDRs, cidrsPath)...)
	}
	switch cur, prev := sc.Spec.CIDRs, old.Spec.CIDRs; {
	case len(cur) == len(prev):
		for i := range prev {
			if cur[i] != prev[i] {
				allErrs = append(allErrs, field.Invalid(cidrsPath.Index(i), cur[i], apimachineryvalidation.FieldImmutableErrorMsg))
			}
		}
	case len(prev) == 1 && len(cur) == 2:
		if cur[0] != prev[0] {
			allErrs = append(allErrs, field.Invalid(cidrsPath.Index(0), cur[0], apimachineryvalidation.FieldImmutableErrorMsg))
		}
		allErrs = append(allErrs, validateServiceCIDRSpec(cur, cidrsPath)...)
	default:
		allErrs = append(allErrs, field.Invalid(cidrsPath, cur, apimachineryvalidation.FieldImmutableErrorMsg))
	}
	return allErrs
}

func validateServiceCIDRSpec(cidrs []string, fldPath *field.Path) field.ErrorList {
	switch {
	case len(cidrs) == 0:
		return field.ErrorList{field.Required(fldPath, "at least one CIDR required")}
	case len(cidrs) > 2:
		return field.ErrorList{field.Invalid(fldPath, networkingv1.ServiceCIDRSpec{CIDRs: cidrs}, "may only hold up to 2 values")}
	}
	var allErrs field.ErrorList
	for i, c := range cidrs {
		allErrs = append(allErrs, validation.IsValidCIDR(fldPath.Index(i), c)...)
	}
	if len(cidrs) == 2 {
		a, errA := netip.ParsePrefix(cidrs[0])
		b, errB := netip.ParsePrefix(cidrs[1])
		if errA == nil && errB == nil && a.Addr().Is4() == b.Addr().Is4() {
			allErrs = append(allErrs, field.Invalid(fldPath, cidrs, "may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64"))
		}
	}
	return allErrs
}

// validateIPAddress follows kubernetes pkg/apis/networking/validation: the
// name is the address in canonical form, parentRef names the object that
// owns the address and is immutable.
func validateIPAddress(ip, old *networkingv1.IPAddress) field.ErrorList {
	allErrs := validateMeta(&ip.ObjectMeta, metaOf(old), false, ipAddressName)
	refPath := specPath.Child("parentRef")
	ref := ip.Spec.ParentRef
	if ref == nil {
		allErrs = append(allErrs, field.Required(refPath, ""))
	} else {
		if ref.Group != "" { // the core group of Services is empty
			allErrs = append(allErrs, dns1123Subdomain(ref.Group, refPath.Child("group"))...)
		}
		if ref.Resource == "" {
			allErrs = append(allErrs, field.Required(refPath.Child("resource"), ""))
		} else {
			allErrs = append(allErrs, msgs(refPath.Child("resource"), ref.Resource, content.IsPathSegmentName(ref.Resource))...)
		}
		if ref.Name == "" {
			allErrs = append(allErrs, field.Required(refPath.Child("name"), ""))
		} else {
			allErrs = append(allErrs, msgs(refPath.Child("name"), ref.Name, content.IsPathSegmentName(ref.Name))...)
		}
		if ref.Namespace != "" {
			allErrs = append(allErrs, msgs(refPath.Child("namespace"), ref.Namespace, content.IsPathSegmentName(ref.Namespace))...)
		}
	}
	if old != nil {
		allErrs = append(allErrs, immutable(ip.Spec.ParentRef, old.Spec.ParentRef, refPath)...)
	}
	return allErrs
}

// ipAddressName is Kubernetes' ValidateIPAddressName: a valid IP in
// canonical form ("10.0.0.1", "2001:db8::1"; not "10.01.0.1").
func ipAddressName(name string, prefix bool) []string {
	var out []string
	for _, err := range validation.IsValidIP(&field.Path{}, name) {
		out = append(out, err.Detail)
	}
	return out
}
