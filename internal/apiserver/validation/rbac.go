package validation

import (
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// RBAC validation and defaulting, as Kubernetes' pkg/apis/rbac/validation and
// rbac/v1 defaults (not importable from k8s.io/kubernetes): names are path
// segments, rules name verbs and either resources with their groups or
// non-resource URLs (never in a Role), a binding's roleRef is in
// rbac.authorization.k8s.io, of kind Role or ClusterRole (ClusterRole only in
// a ClusterRoleBinding), and never changes; subjects are ServiceAccounts
// (with a namespace in a ClusterRoleBinding), Users or Groups.

// nameIsPathSegment is ValidateRBACName.
func nameIsPathSegment(name string, _ bool) []string { return content.IsPathSegmentName(name) }

func defaultRoleRef(r *rbacv1.RoleRef) {
	setIfEmpty(&r.APIGroup, rbacv1.GroupName)
}

func defaultSubjects(subjects []rbacv1.Subject) {
	for i := range subjects {
		if s := &subjects[i]; s.APIGroup == "" && (s.Kind == rbacv1.UserKind || s.Kind == rbacv1.GroupKind) {
			s.APIGroup = rbacv1.GroupName
		}
	}
}

func validateRole(r, old *rbacv1.Role) field.ErrorList {
	allErrs := validateMeta(&r.ObjectMeta, metaOf(old), true, nameIsPathSegment)
	for i, rule := range r.Rules {
		allErrs = append(allErrs, validatePolicyRule(rule, true, field.NewPath("rules").Index(i))...)
	}
	return allErrs
}

func validateClusterRole(r, old *rbacv1.ClusterRole) field.ErrorList {
	allErrs := validateMeta(&r.ObjectMeta, metaOf(old), false, nameIsPathSegment)
	for i, rule := range r.Rules {
		allErrs = append(allErrs, validatePolicyRule(rule, false, field.NewPath("rules").Index(i))...)
	}
	if r.AggregationRule != nil {
		p := field.NewPath("aggregationRule", "clusterRoleSelectors")
		if len(r.AggregationRule.ClusterRoleSelectors) == 0 {
			allErrs = append(allErrs, field.Required(p, "at least one clusterRoleSelector required if aggregationRule is non-nil"))
		}
		// Kubernetes tolerates label values an older server accepted when
		// the stored object already has them.
		opts := metav1validation.LabelSelectorValidationOptions{}
		if old != nil && old.AggregationRule != nil {
			opts.AllowInvalidLabelValueInSelector = true
		}
		for i, sel := range r.AggregationRule.ClusterRoleSelectors {
			allErrs = append(allErrs, metav1validation.ValidateLabelSelector(&sel, opts, p.Index(i))...)
			if s, err := metav1.LabelSelectorAsSelector(&sel); err != nil {
				allErrs = append(allErrs, field.Invalid(p.Index(i), s, "invalid label selector."))
			}
		}
	}
	return allErrs
}

// validatePolicyRule is ValidatePolicyRule.
func validatePolicyRule(rule rbacv1.PolicyRule, namespaced bool, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(rule.Verbs) == 0 {
		allErrs = append(allErrs, field.Required(p.Child("verbs"), "verbs must contain at least one value"))
	}
	if len(rule.NonResourceURLs) > 0 {
		if namespaced {
			allErrs = append(allErrs, field.Invalid(p.Child("nonResourceURLs"), rule.NonResourceURLs, "namespaced rules cannot apply to non-resource URLs"))
		}
		if len(rule.APIGroups) > 0 || len(rule.Resources) > 0 || len(rule.ResourceNames) > 0 {
			allErrs = append(allErrs, field.Invalid(p.Child("nonResourceURLs"), rule.NonResourceURLs, "rules cannot apply to both regular resources and non-resource URLs"))
		}
		return allErrs
	}
	if len(rule.APIGroups) == 0 {
		allErrs = append(allErrs, field.Required(p.Child("apiGroups"), "resource rules must supply at least one api group"))
	}
	if len(rule.Resources) == 0 {
		allErrs = append(allErrs, field.Required(p.Child("resources"), "resource rules must supply at least one resource"))
	}
	return allErrs
}

func validateRoleBinding(b, old *rbacv1.RoleBinding) field.ErrorList {
	allErrs := validateMeta(&b.ObjectMeta, metaOf(old), true, nameIsPathSegment)
	allErrs = append(allErrs, validateBinding(b.RoleRef, b.Subjects, true)...)
	if old != nil {
		allErrs = append(allErrs, immutable(b.RoleRef, old.RoleRef, field.NewPath("roleRef"))...)
	}
	return allErrs
}

func validateClusterRoleBinding(b, old *rbacv1.ClusterRoleBinding) field.ErrorList {
	allErrs := validateMeta(&b.ObjectMeta, metaOf(old), false, nameIsPathSegment)
	allErrs = append(allErrs, validateBinding(b.RoleRef, b.Subjects, false)...)
	if old != nil {
		allErrs = append(allErrs, immutable(b.RoleRef, old.RoleRef, field.NewPath("roleRef"))...)
	}
	return allErrs
}

// validateBinding is the part ValidateRoleBinding and
// ValidateClusterRoleBinding share: the roleRef and the subjects.
func validateBinding(ref rbacv1.RoleRef, subjects []rbacv1.Subject, namespaced bool) field.ErrorList {
	var allErrs field.ErrorList
	refPath := field.NewPath("roleRef")
	if ref.APIGroup != rbacv1.GroupName {
		allErrs = append(allErrs, field.NotSupported(refPath.Child("apiGroup"), ref.APIGroup, []string{rbacv1.GroupName}))
	}
	kinds := []string{"ClusterRole"}
	if namespaced {
		kinds = []string{"Role", "ClusterRole"}
	}
	if ref.Kind != "ClusterRole" && (!namespaced || ref.Kind != "Role") {
		allErrs = append(allErrs, field.NotSupported(refPath.Child("kind"), ref.Kind, kinds))
	}
	if ref.Name == "" {
		allErrs = append(allErrs, field.Required(refPath.Child("name"), ""))
	} else {
		for _, msg := range nameIsPathSegment(ref.Name, false) {
			allErrs = append(allErrs, field.Invalid(refPath.Child("name"), ref.Name, msg))
		}
	}
	for i, s := range subjects {
		allErrs = append(allErrs, validateSubject(s, namespaced, field.NewPath("subjects").Index(i))...)
	}
	return allErrs
}

// validateSubject is ValidateRoleBindingSubject.
func validateSubject(s rbacv1.Subject, namespaced bool, p *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if s.Name == "" {
		allErrs = append(allErrs, field.Required(p.Child("name"), ""))
	}
	switch s.Kind {
	case rbacv1.ServiceAccountKind:
		if s.Name != "" {
			for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(s.Name, false) {
				allErrs = append(allErrs, field.Invalid(p.Child("name"), s.Name, msg))
			}
		}
		if s.APIGroup != "" {
			allErrs = append(allErrs, field.NotSupported(p.Child("apiGroup"), s.APIGroup, []string{""}))
		}
		if !namespaced && s.Namespace == "" {
			allErrs = append(allErrs, field.Required(p.Child("namespace"), ""))
		}
	case rbacv1.UserKind, rbacv1.GroupKind:
		if s.APIGroup != rbacv1.GroupName {
			allErrs = append(allErrs, field.NotSupported(p.Child("apiGroup"), s.APIGroup, []string{rbacv1.GroupName}))
		}
	default:
		allErrs = append(allErrs, field.NotSupported(p.Child("kind"), s.Kind, []string{rbacv1.ServiceAccountKind, rbacv1.UserKind, rbacv1.GroupKind}))
	}
	return allErrs
}
