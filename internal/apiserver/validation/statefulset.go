package validation

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateStatefulSet follows kubernetes pkg/apis/apps/validation
// (ValidateStatefulSet, ValidateStatefulSetUpdate). minikit has no storage,
// so volumeClaimTemplates are refused rather than silently ignored.
func validateStatefulSet(s, old *appsv1.StatefulSet) field.ErrorList {
	allErrs := validateMeta(&s.ObjectMeta, metaOf(old), true, nameIsSubdomain)
	spec := &s.Spec
	switch spec.PodManagementPolicy {
	case "":
		allErrs = append(allErrs, field.Required(specPath.Child("podManagementPolicy"), ""))
	case appsv1.OrderedReadyPodManagement, appsv1.ParallelPodManagement:
	default:
		allErrs = append(allErrs, field.Invalid(specPath.Child("podManagementPolicy"), spec.PodManagementPolicy,
			fmt.Sprintf("must be '%s' or '%s'", appsv1.OrderedReadyPodManagement, appsv1.ParallelPodManagement)))
	}
	up := specPath.Child("updateStrategy")
	switch spec.UpdateStrategy.Type {
	case "":
		allErrs = append(allErrs, field.Required(up, ""))
	case appsv1.OnDeleteStatefulSetStrategyType:
		if spec.UpdateStrategy.RollingUpdate != nil {
			allErrs = append(allErrs, field.Invalid(up.Child("rollingUpdate"), spec.UpdateStrategy.RollingUpdate,
				fmt.Sprintf("only allowed for updateStrategy '%s'", appsv1.RollingUpdateStatefulSetStrategyType)))
		}
	case appsv1.RollingUpdateStatefulSetStrategyType:
		if ru := spec.UpdateStrategy.RollingUpdate; ru != nil {
			if ru.Partition != nil {
				allErrs = append(allErrs, nonNegative(int64(*ru.Partition), up.Child("rollingUpdate", "partition"))...)
			}
			if ru.MaxUnavailable != nil {
				p := up.Child("rollingUpdate", "maxUnavailable")
				allErrs = append(allErrs, intOrPercent(ru.MaxUnavailable, p)...)
				if percentOrInt(ru.MaxUnavailable) == 0 {
					allErrs = append(allErrs, field.Invalid(p, ru.MaxUnavailable, "must be greater than 0"))
				}
				if ru.MaxUnavailable.Type == intstr.String && percentOrInt(ru.MaxUnavailable) > 100 {
					allErrs = append(allErrs, field.Invalid(p, ru.MaxUnavailable, "must not be greater than 100%"))
				}
			}
		}
	default:
		allErrs = append(allErrs, field.Invalid(up, spec.UpdateStrategy,
			fmt.Sprintf("must be '%s' or '%s'", appsv1.RollingUpdateStatefulSetStrategyType, appsv1.OnDeleteStatefulSetStrategyType)))
	}
	if spec.Replicas != nil {
		allErrs = append(allErrs, nonNegative(int64(*spec.Replicas), specPath.Child("replicas"))...)
	}
	if spec.Ordinals != nil {
		allErrs = append(allErrs, nonNegative(int64(spec.Ordinals.Start), specPath.Child("ordinals", "start"))...)
	}
	allErrs = append(allErrs, nonNegative(int64(spec.MinReadySeconds), specPath.Child("minReadySeconds"))...)
	if spec.RevisionHistoryLimit != nil {
		allErrs = append(allErrs, nonNegative(int64(*spec.RevisionHistoryLimit), specPath.Child("revisionHistoryLimit"))...)
	}
	if spec.ServiceName != "" {
		allErrs = append(allErrs, dns1123Label(spec.ServiceName, specPath.Child("serviceName"))...)
	}
	if len(spec.VolumeClaimTemplates) > 0 {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("volumeClaimTemplates"),
			"minikit has no storage: PersistentVolumeClaims are not supported; use an emptyDir volume in the pod template instead"))
	}
	allErrs = append(allErrs, validateWorkloadTemplate(spec.Selector, &spec.Template, "statefulset", false)...)
	if spec.Template.Spec.ActiveDeadlineSeconds != nil {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("template", "spec", "activeDeadlineSeconds"), "activeDeadlineSeconds in StatefulSet is not Supported"))
	}
	if old != nil {
		// Everything but these fields is frozen once the set exists.
		a, b := spec.DeepCopy(), old.Spec.DeepCopy()
		for _, x := range []*appsv1.StatefulSetSpec{a, b} {
			x.Replicas, x.Ordinals, x.Template, x.UpdateStrategy = nil, nil, corev1.PodTemplateSpec{}, appsv1.StatefulSetUpdateStrategy{}
			x.RevisionHistoryLimit, x.PersistentVolumeClaimRetentionPolicy, x.MinReadySeconds = nil, nil, 0
		}
		if !apiequality.Semantic.DeepEqual(a, b) {
			allErrs = append(allErrs, field.Forbidden(specPath, "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"))
		}
	}
	return allErrs
}

// validateWorkloadTemplate checks a workload's selector and pod template:
// the selector is required and not empty, the template's labels match it,
// the template is a valid pod template and, unless jobs, its restartPolicy
// is Always.
func validateWorkloadTemplate(sel *metav1.LabelSelector, t *corev1.PodTemplateSpec, kind string, job bool) field.ErrorList {
	allErrs := validateTemplateSelector(sel, t.Labels, kind, false)
	tp := specPath.Child("template")
	allErrs = append(allErrs, validatePodTemplateSpec(t, tp)...)
	rp := t.Spec.RestartPolicy
	switch {
	case job && rp != corev1.RestartPolicyOnFailure && rp != corev1.RestartPolicyNever:
		allErrs = append(allErrs, field.NotSupported(tp.Child("spec", "restartPolicy"), rp,
			[]corev1.RestartPolicy{corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever}))
	case !job && rp != corev1.RestartPolicyAlways && rp != "":
		allErrs = append(allErrs, field.NotSupported(tp.Child("spec", "restartPolicy"), rp, []corev1.RestartPolicy{corev1.RestartPolicyAlways}))
	}
	return allErrs
}

func defaultStatefulSet(s *appsv1.StatefulSet) {
	setIfNil(&s.Spec.Replicas, 1)
	setIfEmpty(&s.Spec.PodManagementPolicy, appsv1.OrderedReadyPodManagement)
	st := &s.Spec.UpdateStrategy
	setIfEmpty(&st.Type, appsv1.RollingUpdateStatefulSetStrategyType)
	if st.Type == appsv1.RollingUpdateStatefulSetStrategyType {
		if st.RollingUpdate == nil {
			st.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{}
		}
		setIfNil(&st.RollingUpdate.Partition, 0)
	}
	setIfNil(&s.Spec.RevisionHistoryLimit, defaultRevisionHistoryLimit)
	if s.Spec.PersistentVolumeClaimRetentionPolicy == nil {
		s.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{}
	}
	p := s.Spec.PersistentVolumeClaimRetentionPolicy
	setIfEmpty(&p.WhenDeleted, appsv1.RetainPersistentVolumeClaimRetentionPolicyType)
	setIfEmpty(&p.WhenScaled, appsv1.RetainPersistentVolumeClaimRetentionPolicyType)
	defaultPodSpec(&s.Spec.Template.Spec)
}
