package validation

import (
	"fmt"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var supportedDeploymentStrategies = []string{string(appsv1.RecreateDeploymentStrategyType), string(appsv1.RollingUpdateDeploymentStrategyType)}

// validateDeployment follows kubernetes pkg/apis/apps/validation for
// apps/v1, where the selector is immutable.
func validateDeployment(d, old *appsv1.Deployment) field.ErrorList {
	allErrs := validateMeta(&d.ObjectMeta, metaOf(old), true, nameIsSubdomain)
	spec := &d.Spec
	if spec.Replicas != nil {
		allErrs = append(allErrs, nonNegative(int64(*spec.Replicas), specPath.Child("replicas"))...)
	}

	selPath := specPath.Child("selector")
	allErrs = append(allErrs, validateTemplateSelector(spec.Selector, spec.Template.Labels, "deployment", true)...)
	allErrs = append(allErrs, validateControllerTemplate(&spec.Template, specPath.Child("template"))...)

	allErrs = append(allErrs, validateStrategy(&spec.Strategy, specPath.Child("strategy"))...)
	allErrs = append(allErrs, nonNegative(int64(spec.MinReadySeconds), specPath.Child("minReadySeconds"))...)
	if spec.RevisionHistoryLimit != nil {
		allErrs = append(allErrs, nonNegative(int64(*spec.RevisionHistoryLimit), specPath.Child("revisionHistoryLimit"))...)
	}
	if spec.ProgressDeadlineSeconds != nil {
		p := specPath.Child("progressDeadlineSeconds")
		allErrs = append(allErrs, nonNegative(int64(*spec.ProgressDeadlineSeconds), p)...)
		if *spec.ProgressDeadlineSeconds <= spec.MinReadySeconds {
			allErrs = append(allErrs, field.Invalid(p, *spec.ProgressDeadlineSeconds, "must be greater than minReadySeconds"))
		}
	}
	if old != nil {
		allErrs = append(allErrs, immutable(spec.Selector, old.Spec.Selector, selPath)...)
	}
	return allErrs
}

func validateStrategy(s *appsv1.DeploymentStrategy, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	switch s.Type {
	case appsv1.RecreateDeploymentStrategyType:
		if s.RollingUpdate != nil {
			allErrs = append(allErrs, field.Forbidden(fldPath.Child("rollingUpdate"),
				fmt.Sprintf("may not be specified when strategy `type` is '%s'", appsv1.RecreateDeploymentStrategyType)))
		}
	case appsv1.RollingUpdateDeploymentStrategyType:
		if s.RollingUpdate == nil {
			return append(allErrs, field.Required(fldPath.Child("rollingUpdate"), "this should be defaulted and never be nil"))
		}
		p := fldPath.Child("rollingUpdate")
		allErrs = append(allErrs, intOrPercent(s.RollingUpdate.MaxUnavailable, p.Child("maxUnavailable"))...)
		allErrs = append(allErrs, intOrPercent(s.RollingUpdate.MaxSurge, p.Child("maxSurge"))...)
		if percentOrInt(s.RollingUpdate.MaxUnavailable) == 0 && percentOrInt(s.RollingUpdate.MaxSurge) == 0 {
			allErrs = append(allErrs, field.Invalid(p.Child("maxUnavailable"), s.RollingUpdate.MaxUnavailable, "may not be 0 when `maxSurge` is 0"))
		}
		if v := s.RollingUpdate.MaxUnavailable; v != nil && v.Type == intstr.String && percentOrInt(v) > 100 {
			allErrs = append(allErrs, field.Invalid(p.Child("maxUnavailable"), v, "must not be greater than 100%"))
		}
	default:
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("type"), s.Type, supportedDeploymentStrategies))
	}
	return allErrs
}

// intOrPercent accepts a non-negative integer or a percentage string.
func intOrPercent(v *intstr.IntOrString, fldPath *field.Path) field.ErrorList {
	if v == nil {
		return nil
	}
	if v.Type == intstr.String {
		return msgs(fldPath, v.StrVal, validation.IsValidPercent(v.StrVal))
	}
	return nonNegative(int64(v.IntValue()), fldPath)
}

// percentOrInt is the number in v, a percentage or not; -1 when unparsable.
func percentOrInt(v *intstr.IntOrString) int {
	if v == nil {
		return 0
	}
	if v.Type == intstr.Int {
		return v.IntValue()
	}
	n, err := strconv.Atoi(strings.TrimSuffix(v.StrVal, "%"))
	if err != nil {
		return -1
	}
	return n
}
