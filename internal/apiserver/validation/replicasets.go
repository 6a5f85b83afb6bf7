package validation

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateReplicaSet follows kubernetes pkg/apis/apps/validation
// (ValidateReplicaSet, ValidateReplicaSetSpec) for apps/v1, where the
// selector is immutable.
func validateReplicaSet(rs, old *appsv1.ReplicaSet) field.ErrorList {
	allErrs := validateMeta(&rs.ObjectMeta, metaOf(old), true, nameIsSubdomain)
	spec := &rs.Spec
	if spec.Replicas != nil {
		allErrs = append(allErrs, nonNegative(int64(*spec.Replicas), specPath.Child("replicas"))...)
	}
	allErrs = append(allErrs, nonNegative(int64(spec.MinReadySeconds), specPath.Child("minReadySeconds"))...)

	selPath := specPath.Child("selector")
	// Kubernetes' ReplicaSet validation says "deployment" here too.
	allErrs = append(allErrs, validateTemplateSelector(spec.Selector, spec.Template.Labels, "deployment", false)...)
	allErrs = append(allErrs, validateControllerTemplate(&spec.Template, specPath.Child("template"))...)
	if old != nil {
		allErrs = append(allErrs, immutable(spec.Selector, old.Spec.Selector, selPath)...)
	}
	return allErrs
}

// validateReplicationController follows kubernetes pkg/apis/core/validation
// (ValidateReplicationControllerSpec): the selector is a non-empty map of
// labels the template must carry, and the template is required.
func validateReplicationController(rc, old *corev1.ReplicationController) field.ErrorList {
	allErrs := validateMeta(&rc.ObjectMeta, metaOf(old), true, nameIsSubdomain)
	spec := &rc.Spec
	if spec.Replicas != nil {
		allErrs = append(allErrs, nonNegative(int64(*spec.Replicas), specPath.Child("replicas"))...)
	}
	allErrs = append(allErrs, nonNegative(int64(spec.MinReadySeconds), specPath.Child("minReadySeconds"))...)
	selPath := specPath.Child("selector")
	if len(spec.Selector) == 0 {
		allErrs = append(allErrs, field.Required(selPath, ""))
	} else {
		allErrs = append(allErrs, metavalidation.ValidateLabels(spec.Selector, selPath)...)
	}
	tp := specPath.Child("template")
	if spec.Template == nil {
		return append(allErrs, field.Required(tp, ""))
	}
	if len(spec.Selector) > 0 && !labels.SelectorFromSet(spec.Selector).Matches(labels.Set(spec.Template.Labels)) {
		allErrs = append(allErrs, field.Invalid(tp.Child("metadata", "labels"), spec.Template.Labels, "`selector` does not match template `labels`"))
	}
	return append(allErrs, validateControllerTemplate(spec.Template, tp)...)
}

// validateControllerTemplate is what Kubernetes checks of the pod template
// of a ReplicaSet or ReplicationController beyond any pod template: its pods
// are restarted forever and have no deadline.
// validateTemplateSelector checks a workload's spec.selector as Kubernetes'
// apps validation does: required, valid and not empty ("empty selector is
// invalid for KIND"), and matching the template's labels. unparsable adds
// Deployment's "invalid label selector" when the selector does not convert.
func validateTemplateSelector(sel *metav1.LabelSelector, templateLabels map[string]string, kind string, unparsable bool) field.ErrorList {
	var allErrs field.ErrorList
	selPath := specPath.Child("selector")
	if sel == nil {
		return append(allErrs, field.Required(selPath, ""))
	}
	allErrs = append(allErrs, metavalidation.ValidateLabelSelector(sel, metavalidation.LabelSelectorValidationOptions{}, selPath)...)
	if len(sel.MatchLabels)+len(sel.MatchExpressions) == 0 {
		allErrs = append(allErrs, field.Invalid(selPath, sel, "empty selector is invalid for "+kind))
	}
	selector, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		if unparsable {
			allErrs = append(allErrs, field.Invalid(selPath, sel, "invalid label selector"))
		}
		return allErrs
	}
	if !selector.Empty() && !selector.Matches(labels.Set(templateLabels)) {
		allErrs = append(allErrs, field.Invalid(specPath.Child("template", "metadata", "labels"), templateLabels, "`selector` does not match template `labels`"))
	}
	return allErrs
}

// validateControllerTemplate checks the pod template of a Deployment,
// ReplicaSet or ReplicationController: a valid pod template whose
// restartPolicy is Always and that sets no activeDeadlineSeconds.
func validateControllerTemplate(t *corev1.PodTemplateSpec, tp *field.Path) field.ErrorList {
	allErrs := validatePodTemplateSpec(t, tp)
	if rp := t.Spec.RestartPolicy; rp != corev1.RestartPolicyAlways && rp != "" {
		allErrs = append(allErrs, field.NotSupported(tp.Child("spec", "restartPolicy"), rp, []corev1.RestartPolicy{corev1.RestartPolicyAlways}))
	}
	if t.Spec.ActiveDeadlineSeconds != nil {
		allErrs = append(allErrs, field.Invalid(tp.Child("spec", "activeDeadlineSeconds"), *t.Spec.ActiveDeadlineSeconds, "must not be specified"))
	}
	return allErrs
}

// defaultReplicaSet is apps/v1 SetDefaults_ReplicaSet plus the template's
// pod defaults.
func defaultReplicaSet(rs *appsv1.ReplicaSet) {
	setIfNil(&rs.Spec.Replicas, 1)
	defaultPodSpec(&rs.Spec.Template.Spec)
}

// defaultReplicationController is core/v1 SetDefaults_ReplicationController:
// the selector and the labels come from the template's labels when unset.
func defaultReplicationController(rc *corev1.ReplicationController) {
	if t := rc.Spec.Template; t != nil {
		if len(rc.Spec.Selector) == 0 {
			rc.Spec.Selector = t.Labels
		}
		if len(rc.Labels) == 0 {
			rc.Labels = t.Labels
		}
		defaultPodSpec(&t.Spec)
	}
	setIfNil(&rc.Spec.Replicas, 1)
}
