package validation

import (
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Labels the API server puts on a Job's pod template (and so its pods) when
// it generates the selector, as Kubernetes' job registry strategy does; the
// unprefixed ones are the legacy names Kubernetes still writes.
const (
	JobControllerUIDLabel       = batchv1.ControllerUidLabel // batch.kubernetes.io/controller-uid
	JobNameLabel                = batchv1.JobNameLabel       // batch.kubernetes.io/job-name
	legacyJobControllerUIDLabel = "controller-uid"
	legacyJobNameLabel          = "job-name"
)

// validateJob follows kubernetes pkg/apis/batch/validation (ValidateJob,
// ValidateJobUpdate) for the features minikit runs: NonIndexed jobs, with
// the selector generated unless manualSelector is true.
func validateJob(j, old *batchv1.Job) field.ErrorList {
	allErrs := validateMeta(&j.ObjectMeta, metaOf(old), true, nameIsSubdomain)
	spec := &j.Spec
	if spec.Parallelism != nil {
		allErrs = append(allErrs, nonNegative(int64(*spec.Parallelism), specPath.Child("parallelism"))...)
	}
	if spec.Completions != nil {
		allErrs = append(allErrs, nonNegative(int64(*spec.Completions), specPath.Child("completions"))...)
	}
	if spec.ActiveDeadlineSeconds != nil {
		allErrs = append(allErrs, nonNegative(*spec.ActiveDeadlineSeconds, specPath.Child("activeDeadlineSeconds"))...)
	}
	if spec.BackoffLimit != nil {
		allErrs = append(allErrs, nonNegative(int64(*spec.BackoffLimit), specPath.Child("backoffLimit"))...)
	}
	if spec.TTLSecondsAfterFinished != nil {
		allErrs = append(allErrs, nonNegative(int64(*spec.TTLSecondsAfterFinished), specPath.Child("ttlSecondsAfterFinished"))...)
	}
	if spec.CompletionMode != nil {
		switch *spec.CompletionMode {
		case batchv1.NonIndexedCompletion:
		case batchv1.IndexedCompletion:
			allErrs = append(allErrs, field.Forbidden(specPath.Child("completionMode"), "Indexed jobs are not supported by minikit; use NonIndexed"))
		default:
			allErrs = append(allErrs, field.NotSupported(specPath.Child("completionMode"), *spec.CompletionMode,
				[]batchv1.CompletionMode{batchv1.NonIndexedCompletion, batchv1.IndexedCompletion}))
		}
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"podFailurePolicy", spec.PodFailurePolicy != nil},
		{"successPolicy", spec.SuccessPolicy != nil},
		{"backoffLimitPerIndex", spec.BackoffLimitPerIndex != nil},
		{"maxFailedIndexes", spec.MaxFailedIndexes != nil},
		{"managedBy", spec.ManagedBy != nil},
	} {
		if f.set {
			allErrs = append(allErrs, field.Forbidden(specPath.Child(f.name), "not supported by minikit"))
		}
	}
	allErrs = append(allErrs, validateWorkloadTemplate(spec.Selector, &spec.Template, "job", true)...)
	if spec.ManualSelector == nil || !*spec.ManualSelector {
		// The selector must be the one the server generated from the UID.
		if spec.Selector != nil && j.UID != "" {
			s, err := metav1.LabelSelectorAsSelector(spec.Selector)
			if err == nil && !s.Matches(labels.Set{JobControllerUIDLabel: string(j.UID)}) {
				allErrs = append(allErrs, field.Invalid(specPath.Child("selector"), spec.Selector, "`selector` not auto-generated"))
			}
		}
	}
	if old != nil {
		allErrs = append(allErrs, immutable(spec.Selector, old.Spec.Selector, specPath.Child("selector"))...)
		allErrs = append(allErrs, immutable(spec.Template, old.Spec.Template, specPath.Child("template"))...)
		allErrs = append(allErrs, immutable(spec.Completions, old.Spec.Completions, specPath.Child("completions"))...)
		allErrs = append(allErrs, immutable(spec.CompletionMode, old.Spec.CompletionMode, specPath.Child("completionMode"))...)
	}
	return allErrs
}

// defaultJob applies batch/v1's defaults and, once the object has its UID
// (the server sets it before defaulting), generates the selector and pod
// labels unless manualSelector is true.
func defaultJob(j *batchv1.Job) {
	spec := &j.Spec
	if spec.Completions == nil && spec.Parallelism == nil {
		spec.Completions = ptr[int32](1)
	}
	setIfNil(&spec.Parallelism, 1)
	setIfNil(&spec.BackoffLimit, 6)
	setIfNil(&spec.CompletionMode, batchv1.NonIndexedCompletion)
	setIfNil(&spec.Suspend, false)
	setIfNil(&spec.PodReplacementPolicy, batchv1.TerminatingOrFailed)
	if (spec.ManualSelector == nil || !*spec.ManualSelector) && j.UID != "" {
		uid := string(j.UID)
		if spec.Template.Labels == nil {
			spec.Template.Labels = map[string]string{}
		}
		for k, v := range map[string]string{
			JobControllerUIDLabel: uid, legacyJobControllerUIDLabel: uid,
			JobNameLabel: j.Name, legacyJobNameLabel: j.Name,
		} {
			spec.Template.Labels[k] = v
		}
		if spec.Selector == nil {
			spec.Selector = &metav1.LabelSelector{}
		}
		if spec.Selector.MatchLabels == nil {
			spec.Selector.MatchLabels = map[string]string{}
		}
		if _, ok := spec.Selector.MatchLabels[JobControllerUIDLabel]; !ok {
			spec.Selector.MatchLabels[JobControllerUIDLabel] = uid
		}
	}
	if len(j.Labels) == 0 && len(spec.Template.Labels) > 0 {
		j.Labels = map[string]string{}
		for k, v := range spec.Template.Labels {
			j.Labels[k] = v
		}
	}
	defaultPodSpec(&spec.Template.Spec)
}
