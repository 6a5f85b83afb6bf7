package validation

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateServiceAccount follows Kubernetes' ValidateServiceAccount: the name
// is a DNS-1123 subdomain (it is part of the system:serviceaccount:NS:NAME
// user name) and the secrets it lists are named.
func validateServiceAccount(sa, old *corev1.ServiceAccount) field.ErrorList {
	allErrs := validateMeta(&sa.ObjectMeta, metaOf(old), true, nameIsSubdomain)
	p := field.NewPath("secrets")
	for i, ref := range sa.Secrets {
		if ref.Name == "" {
			allErrs = append(allErrs, field.Required(p.Index(i).Child("name"), ""))
		}
	}
	p = field.NewPath("imagePullSecrets")
	for i, ref := range sa.ImagePullSecrets {
		if ref.Name == "" {
			allErrs = append(allErrs, field.Required(p.Index(i).Child("name"), ""))
		}
	}
	return allErrs
}

// validateLease follows Kubernetes' ValidateLease (coordination/validation).
func validateLease(l, old *coordinationv1.Lease) field.ErrorList {
	allErrs := validateMeta(&l.ObjectMeta, metaOf(old), true, nameIsSubdomain)
	if d := l.Spec.LeaseDurationSeconds; d != nil && *d <= 0 {
		allErrs = append(allErrs, field.Invalid(specPath.Child("leaseDurationSeconds"), *d, "must be greater than 0"))
	}
	if t := l.Spec.LeaseTransitions; t != nil && *t < 0 {
		allErrs = append(allErrs, field.Invalid(specPath.Child("leaseTransitions"), *t, "must be greater than or equal to 0"))
	}
	return allErrs
}
