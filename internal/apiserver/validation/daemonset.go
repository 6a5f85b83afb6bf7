package validation

import (
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// validateDaemonSet follows kubernetes pkg/apis/apps/validation
// (ValidateDaemonSet, ValidateDaemonSetUpdate): the selector is immutable.
func validateDaemonSet(d, old *appsv1.DaemonSet) field.ErrorList {
	allErrs := validateMeta(&d.ObjectMeta, metaOf(old), true, nameIsSubdomain)
	spec := &d.Spec
	allErrs = append(allErrs, validateWorkloadTemplate(spec.Selector, &spec.Template, "daemonset", false)...)
	if spec.Template.Spec.ActiveDeadlineSeconds != nil {
		allErrs = append(allErrs, field.Invalid(specPath.Child("template", "spec", "activeDeadlineSeconds"),
			*spec.Template.Spec.ActiveDeadlineSeconds, "activeDeadlineSeconds in DaemonSet is not Supported"))
	}
	allErrs = append(allErrs, nonNegative(int64(spec.MinReadySeconds), specPath.Child("minReadySeconds"))...)
	if spec.RevisionHistoryLimit != nil {
		allErrs = append(allErrs, nonNegative(int64(*spec.RevisionHistoryLimit), specPath.Child("revisionHistoryLimit"))...)
	}
	up := specPath.Child("updateStrategy")
	switch spec.UpdateStrategy.Type {
	case appsv1.OnDeleteDaemonSetStrategyType:
	case appsv1.RollingUpdateDaemonSetStrategyType:
		ru := spec.UpdateStrategy.RollingUpdate
		if ru == nil {
			allErrs = append(allErrs, field.Required(up.Child("rollingUpdate"), ""))
			break
		}
		p := up.Child("rollingUpdate")
		allErrs = append(allErrs, intOrPercent(ru.MaxUnavailable, p.Child("maxUnavailable"))...)
		allErrs = append(allErrs, intOrPercent(ru.MaxSurge, p.Child("maxSurge"))...)
		if percentOrInt(ru.MaxUnavailable) == 0 && percentOrInt(ru.MaxSurge) == 0 {
			allErrs = append(allErrs, field.Invalid(p.Child("maxUnavailable"), ru.MaxUnavailable, "may not be 0 when `maxSurge` is 0"))
		}
		if percentOrInt(ru.MaxSurge) != 0 {
			// Reported rather than ignored: a rollout that relies on surging
			// (maxUnavailable 0) would never progress.
			allErrs = append(allErrs, field.Forbidden(p.Child("maxSurge"), "minikit's DaemonSet controller does not surge pods; use maxUnavailable"))
		}
		if v := ru.MaxUnavailable; v != nil && v.Type == intstr.String && percentOrInt(v) > 100 {
			allErrs = append(allErrs, field.Invalid(p.Child("maxUnavailable"), v, "must not be greater than 100%"))
		}
	default:
		allErrs = append(allErrs, field.NotSupported(up.Child("type"), spec.UpdateStrategy.Type,
			[]string{string(appsv1.RollingUpdateDaemonSetStrategyType), string(appsv1.OnDeleteDaemonSetStrategyType)}))
	}
	if old != nil {
		allErrs = append(allErrs, immutable(spec.Selector, old.Spec.Selector, specPath.Child("selector"))...)
	}
	return allErrs
}

func defaultDaemonSet(d *appsv1.DaemonSet) {
	st := &d.Spec.UpdateStrategy
	setIfEmpty(&st.Type, appsv1.RollingUpdateDaemonSetStrategyType)
	if st.Type == appsv1.RollingUpdateDaemonSetStrategyType {
		if st.RollingUpdate == nil {
			st.RollingUpdate = &appsv1.RollingUpdateDaemonSet{}
		}
		setIfNil(&st.RollingUpdate.MaxUnavailable, intstr.FromInt32(1))
		setIfNil(&st.RollingUpdate.MaxSurge, intstr.FromInt32(0))
	}
	setIfNil(&d.Spec.RevisionHistoryLimit, defaultRevisionHistoryLimit)
	defaultPodSpec(&d.Spec.Template.Spec)
}
