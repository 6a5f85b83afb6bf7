package validation

//lint:file-ignore SA1019 core/v1 Endpoints is deprecated upstream but still served, so still validated

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// standardFinalizers may be written without a domain prefix.
var standardFinalizers = []string{string(corev1.FinalizerKubernetes), metav1.FinalizerOrphanDependents, metav1.FinalizerDeleteDependents}

func validateNamespace(ns, old *corev1.Namespace) field.ErrorList {
	allErrs := validateMeta(&ns.ObjectMeta, metaOf(old), false, nameIsLabel)
	p := specPath.Child("finalizers")
	for i, f := range ns.Spec.Finalizers {
		allErrs = append(allErrs, apimachineryvalidation.ValidateFinalizerName(string(f), p.Index(i))...)
		if !strings.Contains(string(f), "/") && !slices.Contains(standardFinalizers, string(f)) {
			allErrs = append(allErrs, field.Invalid(p.Index(i), string(f), "name is neither a standard finalizer name nor is it fully qualified"))
		}
	}
	return allErrs
}

func validateNode(node, old *corev1.Node) field.ErrorList {
	allErrs := validateMeta(&node.ObjectMeta, metaOf(old), false, nameIsSubdomain)
	allErrs = append(allErrs, validateTaints(node.Spec.Taints, specPath.Child("taints"))...)

	cidrs := specPath.Child("podCIDRs")
	for i, c := range node.Spec.PodCIDRs {
		allErrs = append(allErrs, validation.IsValidCIDR(cidrs.Index(i), c)...)
	}
	if len(node.Spec.PodCIDRs) > 1 {
		v4 := 0
		for _, c := range node.Spec.PodCIDRs {
			if p, err := netip.ParsePrefix(c); err == nil && p.Addr().Is4() {
				v4++
			}
		}
		if len(node.Spec.PodCIDRs) > 2 || v4 != 1 {
			allErrs = append(allErrs, field.Invalid(cidrs, node.Spec.PodCIDRs, "may specify no more than one CIDR for each IP family"))
		}
	}
	for k, q := range node.Status.Capacity {
		if q.Sign() < 0 {
			allErrs = append(allErrs, field.Invalid(field.NewPath("status", "capacity", string(k)), q.String(), apimachineryvalidation.IsNegativeErrorMsg))
		}
	}
	for k, q := range node.Status.Allocatable {
		if q.Sign() < 0 {
			allErrs = append(allErrs, field.Invalid(field.NewPath("status", "allocatable", string(k)), q.String(), apimachineryvalidation.IsNegativeErrorMsg))
		}
	}
	if old == nil {
		return allErrs
	}
	// The pod CIDR and provider ID are assigned once, by whoever registers
	// or allocates for the node, and then never move.
	if len(old.Spec.PodCIDRs) > 0 && !slices.Equal(old.Spec.PodCIDRs, node.Spec.PodCIDRs) {
		allErrs = append(allErrs, field.Forbidden(cidrs, "node updates may not change podCIDR except from \"\" to valid"))
	}
	if old.Spec.ProviderID != "" && old.Spec.ProviderID != node.Spec.ProviderID {
		allErrs = append(allErrs, field.Forbidden(specPath.Child("providerID"), "node updates may not change providerID except from \"\" to valid"))
	}
	return allErrs
}

func validateTaints(taints []corev1.Taint, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	seen := map[corev1.TaintEffect]map[string]bool{}
	for i, t := range taints {
		p := fldPath.Index(i)
		allErrs = append(allErrs, metavalidation.ValidateLabelName(t.Key, p.Child("key"))...)
		if errs := content.IsLabelValue(t.Value); len(errs) > 0 {
			allErrs = append(allErrs, field.Invalid(p.Child("value"), t.Value, strings.Join(errs, ";")))
		}
		switch {
		case t.Effect == "":
			allErrs = append(allErrs, field.Required(p.Child("effect"), ""))
		case !slices.Contains(supportedTaintEffects, t.Effect):
			allErrs = append(allErrs, field.NotSupported(p.Child("effect"), t.Effect, supportedTaintEffects))
		}
		if seen[t.Effect][t.Key] {
			e := field.Duplicate(p, t)
			e.Detail = "taints must be unique by key and effect pair"
			allErrs = append(allErrs, e)
			continue
		}
		if seen[t.Effect] == nil {
			seen[t.Effect] = map[string]bool{}
		}
		seen[t.Effect][t.Key] = true
	}
	return allErrs
}

func validateEndpoints(ep, old *corev1.Endpoints) field.ErrorList {
	allErrs := validateMeta(&ep.ObjectMeta, metaOf(old), true, nameIsSubdomain)
	subsets := field.NewPath("subsets")
	for i, ss := range ep.Subsets {
		p := subsets.Index(i)
		if len(ss.Addresses) == 0 && len(ss.NotReadyAddresses) == 0 {
			allErrs = append(allErrs, field.Required(p, "must specify `addresses` or `notReadyAddresses`"))
		}
		for j := range ss.Addresses {
			allErrs = append(allErrs, validateEndpointAddress(&ss.Addresses[j], p.Child("addresses").Index(j))...)
		}
		for j := range ss.NotReadyAddresses {
			allErrs = append(allErrs, validateEndpointAddress(&ss.NotReadyAddresses[j], p.Child("notReadyAddresses").Index(j))...)
		}
		names := map[string]bool{}
		for j, port := range ss.Ports {
			pp := p.Child("ports").Index(j)
			if len(ss.Ports) > 1 && port.Name == "" {
				allErrs = append(allErrs, field.Required(pp.Child("name"), ""))
			} else if port.Name != "" {
				allErrs = append(allErrs, dns1123Label(port.Name, pp.Child("name"))...)
				if names[port.Name] {
					allErrs = append(allErrs, field.Duplicate(pp.Child("name"), port.Name))
				}
				names[port.Name] = true
			}
			allErrs = append(allErrs, portNum(port.Port, pp.Child("port"))...)
			allErrs = append(allErrs, validateProtocol(port.Protocol, pp.Child("protocol"))...)
			if port.AppProtocol != nil {
				allErrs = append(allErrs, qualifiedName(*port.AppProtocol, pp.Child("appProtocol"))...)
			}
		}
	}
	return allErrs
}

func validateEndpointAddress(a *corev1.EndpointAddress, fldPath *field.Path) field.ErrorList {
	errs := validation.IsValidIP(fldPath.Child("ip"), a.IP)
	if len(errs) > 0 {
		return errs
	}
	if a.Hostname != "" {
		errs = append(errs, dns1123Label(a.Hostname, fldPath.Child("hostname"))...)
	}
	if a.NodeName != nil {
		errs = append(errs, msgs(fldPath.Child("nodeName"), *a.NodeName, nameIsSubdomain(*a.NodeName, false))...)
	}
	return append(errs, nonSpecialIP(a.IP, fldPath.Child("ip"))...)
}

// nonSpecialIP rejects addresses that can never be a service backend or an
// external IP: unspecified, loopback and link-local ones.
func nonSpecialIP(ip string, fldPath *field.Path) field.ErrorList {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return field.ErrorList{field.Invalid(fldPath, ip, "must be a valid IP address")}
	}
	allErrs := field.ErrorList{}
	if addr.IsUnspecified() {
		allErrs = append(allErrs, field.Invalid(fldPath, ip, fmt.Sprintf("may not be unspecified (%v)", ip)))
	}
	if addr.IsLoopback() {
		allErrs = append(allErrs, field.Invalid(fldPath, ip, "may not be in the loopback range (127.0.0.0/8, ::1/128)"))
	}
	if addr.IsLinkLocalUnicast() {
		allErrs = append(allErrs, field.Invalid(fldPath, ip, "may not be in the link-local range (169.254.0.0/16, fe80::/10)"))
	}
	if addr.IsLinkLocalMulticast() {
		allErrs = append(allErrs, field.Invalid(fldPath, ip, "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)"))
	}
	return allErrs
}

func validateSecret(s, old *corev1.Secret) field.ErrorList {
	allErrs := validateMeta(&s.ObjectMeta, metaOf(old), true, nameIsSubdomain)
	data := field.NewPath("data")
	size := 0
	for k, v := range s.Data {
		allErrs = append(allErrs, msgs(data.Key(k), k, validation.IsConfigMapKey(k))...)
		size += len(v)
	}
	if size > corev1.MaxSecretSize {
		allErrs = append(allErrs, field.TooLong(data, "", corev1.MaxSecretSize))
	}
	need := func(keys ...string) {
		for _, k := range keys {
			if _, ok := s.Data[k]; !ok {
				allErrs = append(allErrs, field.Required(data.Key(k), ""))
			}
		}
	}
	switch s.Type {
	case corev1.SecretTypeServiceAccountToken:
		if s.Annotations[corev1.ServiceAccountNameKey] == "" {
			allErrs = append(allErrs, field.Required(metaPath.Child("annotations").Key(corev1.ServiceAccountNameKey), ""))
		}
	case corev1.SecretTypeDockercfg, corev1.SecretTypeDockerConfigJson:
		key := corev1.DockerConfigKey
		if s.Type == corev1.SecretTypeDockerConfigJson {
			key = corev1.DockerConfigJsonKey
		}
		b, ok := s.Data[key]
		if !ok {
			need(key)
		} else if err := json.Unmarshal(b, &map[string]any{}); err != nil {
			allErrs = append(allErrs, field.Invalid(data.Key(key), "<secret contents redacted>", err.Error()))
		}
	case corev1.SecretTypeBasicAuth:
		_, u := s.Data[corev1.BasicAuthUsernameKey]
		_, p := s.Data[corev1.BasicAuthPasswordKey]
		if !u && !p {
			need(corev1.BasicAuthUsernameKey, corev1.BasicAuthPasswordKey)
		}
	case corev1.SecretTypeSSHAuth:
		if len(s.Data[corev1.SSHAuthPrivateKey]) == 0 {
			allErrs = append(allErrs, field.Required(data.Key(corev1.SSHAuthPrivateKey), ""))
		}
	case corev1.SecretTypeTLS:
		need(corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
	}
	if old != nil {
		allErrs = append(allErrs, immutable(s.Type, old.Type, field.NewPath("type"))...)
		if old.Immutable != nil && *old.Immutable {
			allErrs = append(allErrs, immutableWhenSet(s.Immutable, s.Data, old.Data, nil, nil)...)
		}
	}
	return allErrs
}

func validateConfigMap(cm, old *corev1.ConfigMap) field.ErrorList {
	allErrs := validateMeta(&cm.ObjectMeta, metaOf(old), true, nameIsSubdomain)
	data, binary := field.NewPath("data"), field.NewPath("binaryData")
	size := 0
	for k, v := range cm.Data {
		allErrs = append(allErrs, msgs(data.Key(k), k, validation.IsConfigMapKey(k))...)
		if _, dup := cm.BinaryData[k]; dup {
			allErrs = append(allErrs, field.Invalid(data.Key(k), k, "duplicate of key present in binaryData"))
		}
		size += len(v)
	}
	for k, v := range cm.BinaryData {
		allErrs = append(allErrs, msgs(binary.Key(k), k, validation.IsConfigMapKey(k))...)
		size += len(v)
	}
	if size > corev1.MaxSecretSize {
		allErrs = append(allErrs, field.TooLong(field.NewPath(""), "", corev1.MaxSecretSize))
	}
	if old != nil && old.Immutable != nil && *old.Immutable {
		allErrs = append(allErrs, immutableWhenSet(cm.Immutable, cm.Data, old.Data, cm.BinaryData, old.BinaryData)...)
	}
	return allErrs
}

// immutableWhenSet enforces `immutable: true` on a Secret or ConfigMap.
func immutableWhenSet(flag *bool, data, oldData, binary, oldBinary any) field.ErrorList {
	const why = "field is immutable when `immutable` is set"
	allErrs := field.ErrorList{}
	if flag == nil || !*flag {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("immutable"), why))
	}
	if !reflect.DeepEqual(data, oldData) {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("data"), why))
	}
	if !reflect.DeepEqual(binary, oldBinary) {
		allErrs = append(allErrs, field.Forbidden(field.NewPath("binaryData"), why))
	}
	return allErrs
}

// Length limits of events, as in Kubernetes.
const (
	eventReportingInstanceLimit = 128
	eventActionLimit            = 128
	eventReasonLimit            = 128
	eventNoteLimit              = 1024
)

// validateEvent is Kubernetes' validation of core/v1 events: the event
// lives in the namespace of the object it is about, and events written
// through the new events API (eventTime set) say who reported them.
func validateEvent(ev, old *corev1.Event) field.ErrorList {
	allErrs := validateMeta(&ev.ObjectMeta, metaOf(old), true, nameIsSubdomain)
	io := field.NewPath("involvedObject", "namespace")
	if ev.EventTime.IsZero() {
		if ev.InvolvedObject.Namespace == "" {
			if ev.Namespace != metav1.NamespaceNone && ev.Namespace != metav1.NamespaceDefault {
				allErrs = append(allErrs, field.Invalid(io, ev.InvolvedObject.Namespace, "does not match event.namespace"))
			}
		} else if ev.Namespace != ev.InvolvedObject.Namespace {
			allErrs = append(allErrs, field.Invalid(io, ev.InvolvedObject.Namespace, "does not match event.namespace"))
		}
		return allErrs
	}
	if ev.InvolvedObject.Namespace == "" && ev.Namespace != metav1.NamespaceDefault && ev.Namespace != metav1.NamespaceSystem {
		allErrs = append(allErrs, field.Invalid(io, ev.InvolvedObject.Namespace, "does not match event.namespace"))
	}
	rc := field.NewPath("reportingComponent")
	if ev.ReportingController == "" {
		allErrs = append(allErrs, field.Required(rc, ""))
	} else {
		allErrs = append(allErrs, qualifiedName(ev.ReportingController, rc)...)
	}
	for _, f := range []struct {
		name     string
		value    string
		limit    int
		required bool
	}{
		{"reportingInstance", ev.ReportingInstance, eventReportingInstanceLimit, true},
		{"action", ev.Action, eventActionLimit, true},
		{"reason", ev.Reason, eventReasonLimit, true},
		{"message", ev.Message, eventNoteLimit, false},
	} {
		p := field.NewPath(f.name)
		if f.required && f.value == "" {
			allErrs = append(allErrs, field.Required(p, ""))
		}
		if len(f.value) > f.limit {
			allErrs = append(allErrs, field.Invalid(p, "", fmt.Sprintf("can have at most %v characters", f.limit)))
		}
	}
	return allErrs
}
