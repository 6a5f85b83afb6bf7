package validation

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var (
	supportedRestartPolicies = []corev1.RestartPolicy{corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever}
	supportedDNSPolicies     = []corev1.DNSPolicy{corev1.DNSClusterFirstWithHostNet, corev1.DNSClusterFirst, corev1.DNSDefault, corev1.DNSNone}
	supportedPullPolicies    = []corev1.PullPolicy{corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever}
	supportedTermMsgPolicies = []corev1.TerminationMessagePolicy{corev1.TerminationMessageReadFile, corev1.TerminationMessageFallbackToLogsOnError}
	supportedHTTPSchemes     = []corev1.URIScheme{corev1.URISchemeHTTP, corev1.URISchemeHTTPS}
	supportedTaintEffects    = []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}
	supportedTolerationOps   = []corev1.TolerationOperator{corev1.TolerationOpEqual, corev1.TolerationOpExists}
)

// updatablePodSpecFields is Kubernetes' list, quoted in the error for a
// forbidden pod update.
var updatablePodSpecFields = []string{
	"`spec.containers[*].image`",
	"`spec.initContainers[*].image`",
	"`spec.activeDeadlineSeconds`",
	"`spec.tolerations` (only additions to existing tolerations)",
	"`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
}

// Limits from libc's resolver, as in Kubernetes.
const (
	maxDNSNameservers     = 3
	maxDNSSearchPaths     = 32
	maxDNSSearchListChars = 2048
)

func validatePod(pod, old *corev1.Pod) field.ErrorList {
	allErrs := validateMeta(&pod.ObjectMeta, metaOf(old), true, nameIsSubdomain)
	allErrs = append(allErrs, validatePodSpec(&pod.Spec, specPath, true)...)
	if old == nil {
		if len(pod.Spec.EphemeralContainers) > 0 {
			allErrs = append(allErrs, field.Forbidden(specPath.Child("ephemeralContainers"), "cannot be set on create"))
		}
		if pod.Spec.NodeName != "" && len(pod.Spec.SchedulingGates) > 0 {
			allErrs = append(allErrs, field.Forbidden(specPath.Child("nodeName"), "cannot be set until all schedulingGates have been cleared"))
		}
		return allErrs
	}
	return append(allErrs, validatePodSpecUpdate(&pod.Spec, &old.Spec)...)
}

// validatePodTemplateSpec validates the pod template of a workload; its
// spec is checked like a pod's, less the rules that only hold once a pod
// exists.
func validatePodTemplateSpec(t *corev1.PodTemplateSpec, fldPath *field.Path) field.ErrorList {
	allErrs := metavalidation.ValidateLabels(t.Labels, fldPath.Child("labels"))
	allErrs = append(allErrs, apimachineryvalidation.ValidateAnnotations(t.Annotations, fldPath.Child("annotations"))...)
	allErrs = append(allErrs, validatePodSpec(&t.Spec, fldPath.Child("spec"), false)...)
	if len(t.Spec.EphemeralContainers) > 0 {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("spec", "ephemeralContainers"), "ephemeral containers not allowed in pod template"))
	}
	return allErrs
}

// validatePodSpec is Kubernetes' ValidatePodSpec for the fields minikit
// cares about; isPod is false for templates.
func validatePodSpec(spec *corev1.PodSpec, fldPath *field.Path, isPod bool) field.ErrorList {
	allErrs := field.ErrorList{}
	if spec.TerminationGracePeriodSeconds == nil {
		allErrs = append(allErrs, field.Required(fldPath.Child("terminationGracePeriodSeconds"), ""))
	}
	volumes, vErrs := validateVolumes(spec.Volumes, fldPath.Child("volumes"))
	allErrs = append(allErrs, vErrs...)

	cp := fldPath.Child("containers")
	if len(spec.Containers) == 0 {
		allErrs = append(allErrs, field.Required(cp, ""))
	}
	names := map[string]bool{}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		p := cp.Index(i)
		allErrs = append(allErrs, validateContainer(c, volumes, p)...)
		if names[c.Name] {
			allErrs = append(allErrs, field.Duplicate(p.Child("name"), c.Name))
		}
		names[c.Name] = true
		allErrs = append(allErrs, validateContainerHooks(c, p)...)
		if c.RestartPolicy != nil {
			allErrs = append(allErrs, field.Forbidden(p.Child("restartPolicy"), "may not be set for non-init containers"))
		}
	}
	allErrs = append(allErrs, hostPortConflicts(spec.Containers, cp)...)

	ip := fldPath.Child("initContainers")
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		p := ip.Index(i)
		allErrs = append(allErrs, validateContainer(c, volumes, p)...)
		if names[c.Name] {
			allErrs = append(allErrs, field.Duplicate(p.Child("name"), c.Name))
		} else if c.Name != "" {
			names[c.Name] = true
		}
		allErrs = append(allErrs, hostPortConflicts([]corev1.Container{*c}, ip)...)
		sidecar := false
		if c.RestartPolicy != nil {
			if *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
				allErrs = append(allErrs, field.NotSupported(p.Child("restartPolicy"), *c.RestartPolicy, []corev1.ContainerRestartPolicy{corev1.ContainerRestartPolicyAlways}))
			}
			sidecar = *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		}
		if sidecar {
			allErrs = append(allErrs, validateContainerHooks(c, p)...)
			continue
		}
		const why = "may not be set for init containers without restartPolicy=Always"
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"lifecycle", c.Lifecycle != nil},
			{"livenessProbe", c.LivenessProbe != nil},
			{"readinessProbe", c.ReadinessProbe != nil},
			{"startupProbe", c.StartupProbe != nil},
		} {
			if f.set {
				allErrs = append(allErrs, field.Forbidden(p.Child(f.name), why))
			}
		}
	}

	hostNetwork := spec.HostNetwork
	if hostNetwork {
		// A pod on the host network listens on the node's own ports.
		for i, c := range spec.Containers {
			for j, port := range c.Ports {
				if (isPod || port.HostPort != 0) && port.HostPort != port.ContainerPort {
					allErrs = append(allErrs, field.Invalid(cp.Index(i).Child("ports").Index(j).Child("hostPort"), port.HostPort,
						"must match `containerPort` when `hostNetwork` is true"))
				}
			}
		}
	}

	switch {
	case spec.RestartPolicy == "":
		allErrs = append(allErrs, field.Required(fldPath.Child("restartPolicy"), ""))
	case !slices.Contains(supportedRestartPolicies, spec.RestartPolicy):
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("restartPolicy"), spec.RestartPolicy, supportedRestartPolicies))
	}
	switch {
	case spec.DNSPolicy == "":
		allErrs = append(allErrs, field.Required(fldPath.Child("dnsPolicy"), ""))
	case !slices.Contains(supportedDNSPolicies, spec.DNSPolicy):
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("dnsPolicy"), spec.DNSPolicy, supportedDNSPolicies))
	}
	allErrs = append(allErrs, validateDNSConfig(spec.DNSConfig, spec.DNSPolicy, fldPath.Child("dnsConfig"))...)
	allErrs = append(allErrs, metavalidation.ValidateLabels(spec.NodeSelector, fldPath.Child("nodeSelector"))...)

	if spec.ServiceAccountName != "" {
		allErrs = append(allErrs, msgs(fldPath.Child("serviceAccountName"), spec.ServiceAccountName, nameIsSubdomain(spec.ServiceAccountName, false))...)
	}
	if spec.NodeName != "" {
		allErrs = append(allErrs, msgs(fldPath.Child("nodeName"), spec.NodeName, nameIsSubdomain(spec.NodeName, false))...)
	}
	if spec.ActiveDeadlineSeconds != nil {
		if v := *spec.ActiveDeadlineSeconds; v < 1 || v > math.MaxInt32 {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("activeDeadlineSeconds"), v, validation.InclusiveRangeError(1, math.MaxInt32)))
		}
	}
	if spec.Hostname != "" {
		allErrs = append(allErrs, dns1123Label(spec.Hostname, fldPath.Child("hostname"))...)
	}
	if spec.Subdomain != "" {
		allErrs = append(allErrs, dns1123Label(spec.Subdomain, fldPath.Child("subdomain"))...)
	}
	allErrs = append(allErrs, validateTolerations(spec.Tolerations, fldPath.Child("tolerations"))...)
	for i, ha := range spec.HostAliases {
		p := fldPath.Child("hostAliases").Index(i)
		allErrs = append(allErrs, validation.IsValidIP(p.Child("ip"), ha.IP)...)
		for j, h := range ha.Hostnames {
			allErrs = append(allErrs, dns1123Subdomain(h, p.Child("hostnames").Index(j))...)
		}
	}
	if spec.PriorityClassName != "" {
		allErrs = append(allErrs, msgs(fldPath.Child("priorityClassName"), spec.PriorityClassName, nameIsSubdomain(spec.PriorityClassName, false))...)
	}
	if sc := spec.SecurityContext; sc != nil {
		scp := fldPath.Child("securityContext")
		if sc.RunAsUser != nil {
			allErrs = append(allErrs, msgs(scp.Child("runAsUser"), *sc.RunAsUser, validation.IsValidUserID(*sc.RunAsUser))...)
		}
		if sc.RunAsGroup != nil {
			allErrs = append(allErrs, msgs(scp.Child("runAsGroup"), *sc.RunAsGroup, validation.IsValidGroupID(*sc.RunAsGroup))...)
		}
		if sc.FSGroup != nil {
			allErrs = append(allErrs, msgs(scp.Child("fsGroup"), *sc.FSGroup, validation.IsValidGroupID(*sc.FSGroup))...)
		}
	}
	return allErrs
}

// validateVolumes checks names and that each volume has exactly one source;
// it returns the names that may be mounted.
func validateVolumes(volumes []corev1.Volume, fldPath *field.Path) (map[string]bool, field.ErrorList) {
	allErrs := field.ErrorList{}
	names := map[string]bool{}
	for i, v := range volumes {
		p := fldPath.Index(i)
		var errs field.ErrorList
		if v.Name == "" {
			errs = append(errs, field.Required(p.Child("name"), ""))
		} else {
			errs = append(errs, dns1123Label(v.Name, p.Child("name"))...)
		}
		if names[v.Name] {
			errs = append(errs, field.Duplicate(p.Child("name"), v.Name))
		}
		errs = append(errs, validateVolumeSource(&v.VolumeSource, p)...)
		if len(errs) == 0 {
			names[v.Name] = true
		}
		allErrs = append(allErrs, errs...)
	}
	return names, allErrs
}

func validateVolumeSource(src *corev1.VolumeSource, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	n := 0
	v := reflect.ValueOf(src).Elem()
	for i := 0; i < v.NumField(); i++ {
		if v.Field(i).IsNil() {
			continue
		}
		if n++; n > 1 {
			allErrs = append(allErrs, field.Forbidden(fldPath.Child(jsonName(v.Type().Field(i))), "may not specify more than 1 volume type"))
		}
	}
	if n == 0 {
		allErrs = append(allErrs, field.Required(fldPath, "must specify a volume type"))
	}
	switch {
	case src.HostPath != nil && src.HostPath.Path == "":
		allErrs = append(allErrs, field.Required(fldPath.Child("hostPath", "path"), ""))
	case src.Secret != nil && src.Secret.SecretName == "":
		allErrs = append(allErrs, field.Required(fldPath.Child("secret", "secretName"), ""))
	case src.ConfigMap != nil && src.ConfigMap.Name == "":
		allErrs = append(allErrs, field.Required(fldPath.Child("configMap", "name"), ""))
	case src.PersistentVolumeClaim != nil && src.PersistentVolumeClaim.ClaimName == "":
		allErrs = append(allErrs, field.Required(fldPath.Child("persistentVolumeClaim", "claimName"), ""))
	}
	return allErrs
}

// jsonName is the wire name of a struct field.
func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "" {
		return f.Name
	}
	return name
}

// validateContainer holds the checks common to all container kinds.
func validateContainer(c *corev1.Container, volumes map[string]bool, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	if c.Name == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("name"), ""))
	} else {
		allErrs = append(allErrs, dns1123Label(c.Name, fldPath.Child("name"))...)
	}
	if c.Image == "" {
		allErrs = append(allErrs, field.Required(fldPath.Child("image"), ""))
	}
	switch {
	case c.TerminationMessagePolicy == "":
		allErrs = append(allErrs, field.Required(fldPath.Child("terminationMessagePolicy"), ""))
	case !slices.Contains(supportedTermMsgPolicies, c.TerminationMessagePolicy):
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("terminationMessagePolicy"), c.TerminationMessagePolicy, supportedTermMsgPolicies))
	}
	allErrs = append(allErrs, validateContainerPorts(c.Ports, fldPath.Child("ports"))...)
	for i, e := range c.Env {
		p := fldPath.Child("env").Index(i)
		if e.Name == "" {
			allErrs = append(allErrs, field.Required(p.Child("name"), ""))
		} else {
			allErrs = append(allErrs, msgs(p.Child("name"), e.Name, validation.IsRelaxedEnvVarName(e.Name))...)
		}
	}
	mountPaths := map[string]bool{}
	for i, m := range c.VolumeMounts {
		p := fldPath.Child("volumeMounts").Index(i)
		if m.Name == "" {
			allErrs = append(allErrs, field.Required(p.Child("name"), ""))
		}
		if !volumes[m.Name] {
			allErrs = append(allErrs, field.NotFound(p.Child("name"), m.Name))
		}
		if m.MountPath == "" {
			allErrs = append(allErrs, field.Required(p.Child("mountPath"), ""))
		}
		if mountPaths[m.MountPath] {
			allErrs = append(allErrs, field.Invalid(p.Child("mountPath"), m.MountPath, "must be unique"))
		}
		mountPaths[m.MountPath] = true
	}
	switch {
	case c.ImagePullPolicy == "":
		allErrs = append(allErrs, field.Required(fldPath.Child("imagePullPolicy"), ""))
	case !slices.Contains(supportedPullPolicies, c.ImagePullPolicy):
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("imagePullPolicy"), c.ImagePullPolicy, supportedPullPolicies))
	}
	allErrs = append(allErrs, validateResources(&c.Resources, fldPath.Child("resources"))...)
	return allErrs
}

func validateContainerPorts(ports []corev1.ContainerPort, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	names := map[string]bool{}
	for i, port := range ports {
		p := fldPath.Index(i)
		if port.Name != "" {
			if errs := msgs(p.Child("name"), port.Name, validation.IsValidPortName(port.Name)); len(errs) > 0 {
				allErrs = append(allErrs, errs...)
			} else if names[port.Name] {
				allErrs = append(allErrs, field.Duplicate(p.Child("name"), port.Name))
			}
			names[port.Name] = true
		}
		if port.ContainerPort == 0 {
			allErrs = append(allErrs, field.Required(p.Child("containerPort"), ""))
		} else {
			allErrs = append(allErrs, portNum(port.ContainerPort, p.Child("containerPort"))...)
		}
		if port.HostPort != 0 {
			allErrs = append(allErrs, portNum(port.HostPort, p.Child("hostPort"))...)
		}
		allErrs = append(allErrs, validateProtocol(port.Protocol, p.Child("protocol"))...)
		if port.HostIP != "" {
			allErrs = append(allErrs, validation.IsValidIP(p.Child("hostIP"), port.HostIP)...)
		}
	}
	return allErrs
}

// hostPortConflicts rejects two containers binding the same host port.
func hostPortConflicts(containers []corev1.Container, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	seen := map[string]bool{}
	for i, c := range containers {
		for j, port := range c.Ports {
			if port.HostPort == 0 {
				continue
			}
			key := fmt.Sprintf("%s/%s/%d", port.Protocol, port.HostIP, port.HostPort)
			if seen[key] {
				allErrs = append(allErrs, field.Duplicate(fldPath.Index(i).Child("ports").Index(j).Child("hostPort"), key))
			}
			seen[key] = true
		}
	}
	return allErrs
}

func validateResources(r *corev1.ResourceRequirements, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	for name, q := range r.Limits {
		if q.Sign() < 0 {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("limits").Key(string(name)), q.String(), apimachineryvalidation.IsNegativeErrorMsg))
		}
	}
	for name, q := range r.Requests {
		if q.Sign() < 0 {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("requests").Key(string(name)), q.String(), apimachineryvalidation.IsNegativeErrorMsg))
		}
		if limit, ok := r.Limits[name]; ok && q.Cmp(limit) > 0 {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("requests"), q.String(),
				fmt.Sprintf("must be less than or equal to %s limit of %s", name, limit.String())))
		}
	}
	return allErrs
}

// validateContainerHooks checks probes and lifecycle handlers, allowed on
// regular containers and sidecars.
func validateContainerHooks(c *corev1.Container, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	if c.Lifecycle != nil {
		if h := c.Lifecycle.PostStart; h != nil {
			allErrs = append(allErrs, validateHandler(h.Exec, h.HTTPGet, h.TCPSocket, nil, h.Sleep != nil, fldPath.Child("lifecycle", "postStart"))...)
		}
		if h := c.Lifecycle.PreStop; h != nil {
			allErrs = append(allErrs, validateHandler(h.Exec, h.HTTPGet, h.TCPSocket, nil, h.Sleep != nil, fldPath.Child("lifecycle", "preStop"))...)
		}
	}
	for _, pr := range []struct {
		name       string
		probe      *corev1.Probe
		successOne bool
	}{
		{"livenessProbe", c.LivenessProbe, true},
		{"readinessProbe", c.ReadinessProbe, false},
		{"startupProbe", c.StartupProbe, true},
	} {
		if pr.probe == nil {
			continue
		}
		p := fldPath.Child(pr.name)
		probe := pr.probe
		allErrs = append(allErrs, validateHandler(probe.Exec, probe.HTTPGet, probe.TCPSocket, probe.GRPC, false, p)...)
		allErrs = append(allErrs, nonNegative(int64(probe.InitialDelaySeconds), p.Child("initialDelaySeconds"))...)
		allErrs = append(allErrs, nonNegative(int64(probe.TimeoutSeconds), p.Child("timeoutSeconds"))...)
		allErrs = append(allErrs, nonNegative(int64(probe.PeriodSeconds), p.Child("periodSeconds"))...)
		allErrs = append(allErrs, nonNegative(int64(probe.SuccessThreshold), p.Child("successThreshold"))...)
		allErrs = append(allErrs, nonNegative(int64(probe.FailureThreshold), p.Child("failureThreshold"))...)
		if pr.successOne && probe.SuccessThreshold != 1 {
			allErrs = append(allErrs, field.Invalid(p.Child("successThreshold"), probe.SuccessThreshold, "must be 1"))
		}
		if probe.TerminationGracePeriodSeconds != nil {
			if !pr.successOne {
				allErrs = append(allErrs, field.Invalid(p.Child("terminationGracePeriodSeconds"), *probe.TerminationGracePeriodSeconds, "must not be set for readinessProbes"))
			} else if *probe.TerminationGracePeriodSeconds <= 0 {
				allErrs = append(allErrs, field.Invalid(p.Child("terminationGracePeriodSeconds"), *probe.TerminationGracePeriodSeconds, "must be greater than 0"))
			}
		}
	}
	return allErrs
}

// validateHandler requires exactly one handler type and checks it.
func validateHandler(exec *corev1.ExecAction, get *corev1.HTTPGetAction, tcp *corev1.TCPSocketAction, grpc *corev1.GRPCAction, sleep bool, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	n := 0
	more := func(name string) bool {
		if n++; n > 1 {
			allErrs = append(allErrs, field.Forbidden(fldPath.Child(name), "may not specify more than 1 handler type"))
			return true
		}
		return false
	}
	if exec != nil && !more("exec") && len(exec.Command) == 0 {
		allErrs = append(allErrs, field.Required(fldPath.Child("exec", "command"), ""))
	}
	if get != nil && !more("httpGet") {
		p := fldPath.Child("httpGet")
		if get.Path == "" {
			allErrs = append(allErrs, field.Required(p.Child("path"), ""))
		}
		allErrs = append(allErrs, portNumOrName(get.Port, p.Child("port"))...)
		if !slices.Contains(supportedHTTPSchemes, get.Scheme) {
			allErrs = append(allErrs, field.NotSupported(p.Child("scheme"), get.Scheme, supportedHTTPSchemes))
		}
		for _, h := range get.HTTPHeaders {
			allErrs = append(allErrs, msgs(p.Child("httpHeaders"), h.Name, validation.IsHTTPHeaderName(h.Name))...)
		}
	}
	if tcp != nil && !more("tcpSocket") {
		allErrs = append(allErrs, portNumOrName(tcp.Port, fldPath.Child("tcpSocket", "port"))...)
	}
	if grpc != nil && !more("grpc") {
		allErrs = append(allErrs, portNumOrName(intstr.FromInt32(grpc.Port), fldPath.Child("grpc", "port"))...)
	}
	if sleep {
		more("sleep")
	}
	if n == 0 {
		allErrs = append(allErrs, field.Required(fldPath, "must specify a handler type"))
	}
	return allErrs
}

func validateDNSConfig(cfg *corev1.PodDNSConfig, policy corev1.DNSPolicy, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	if policy == corev1.DNSNone {
		if cfg == nil {
			return append(allErrs, field.Required(fldPath, fmt.Sprintf("must provide `dnsConfig` when `dnsPolicy` is %s", corev1.DNSNone)))
		}
		if len(cfg.Nameservers) == 0 {
			return append(allErrs, field.Required(fldPath.Child("nameservers"), fmt.Sprintf("must provide at least one DNS nameserver when `dnsPolicy` is %s", corev1.DNSNone)))
		}
	}
	if cfg == nil {
		return allErrs
	}
	if len(cfg.Nameservers) > maxDNSNameservers {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("nameservers"), cfg.Nameservers, fmt.Sprintf("must not have more than %v nameservers", maxDNSNameservers)))
	}
	for i, ns := range cfg.Nameservers {
		allErrs = append(allErrs, validation.IsValidIP(fldPath.Child("nameservers").Index(i), ns)...)
	}
	if len(cfg.Searches) > maxDNSSearchPaths {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("searches"), cfg.Searches, fmt.Sprintf("must not have more than %v search paths", maxDNSSearchPaths)))
	}
	if len(strings.Join(cfg.Searches, " ")) > maxDNSSearchListChars {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("searches"), cfg.Searches, fmt.Sprintf("must not have more than %v characters (including spaces) in the search list", maxDNSSearchListChars)))
	}
	for i, s := range cfg.Searches {
		if s == "." {
			continue
		}
		allErrs = append(allErrs, msgs(fldPath.Child("searches").Index(i), s, validation.IsDNS1123SubdomainWithUnderscore(strings.TrimSuffix(s, ".")))...)
	}
	for i, o := range cfg.Options {
		if o.Name == "" {
			allErrs = append(allErrs, field.Required(fldPath.Child("options").Index(i), "must not be empty"))
		}
	}
	return allErrs
}

func validateTolerations(tolerations []corev1.Toleration, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	for i, t := range tolerations {
		p := fldPath.Index(i)
		if t.Key != "" {
			allErrs = append(allErrs, metavalidation.ValidateLabelName(t.Key, p.Child("key"))...)
		}
		if t.Key == "" && t.Operator != corev1.TolerationOpExists {
			allErrs = append(allErrs, field.Invalid(p.Child("operator"), t.Operator,
				"operator must be Exists when `key` is empty, which means \"match all values and all keys\""))
		}
		if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
			allErrs = append(allErrs, field.Invalid(p.Child("effect"), t.Effect, "effect must be 'NoExecute' when `tolerationSeconds` is set"))
		}
		switch t.Operator {
		case corev1.TolerationOpEqual, "":
			if errs := content.IsLabelValue(t.Value); len(errs) > 0 {
				allErrs = append(allErrs, field.Invalid(p.Child("operator"), t.Value, strings.Join(errs, ";")))
			}
		case corev1.TolerationOpExists:
			if t.Value != "" {
				allErrs = append(allErrs, field.Invalid(p.Child("operator"), t.Value, "value must be empty when `operator` is 'Exists'"))
			}
		default:
			allErrs = append(allErrs, field.NotSupported(p.Child("operator"), t.Operator, supportedTolerationOps))
		}
		if t.Effect != "" && !slices.Contains(supportedTaintEffects, t.Effect) {
			allErrs = append(allErrs, field.NotSupported(p.Child("effect"), t.Effect, supportedTaintEffects))
		}
	}
	return allErrs
}

// validatePodSpecUpdate allows only what Kubernetes allows on a running
// pod: new images, a shorter deadline, more tolerations; plus binding, the
// one-time setting of spec.nodeName that minikit does by update rather than
// through a binding subresource.
func validatePodSpecUpdate(spec, old *corev1.PodSpec) field.ErrorList {
	allErrs := field.ErrorList{}
	for _, l := range []struct {
		name     string
		new, old []corev1.Container
	}{
		{"containers", spec.Containers, old.Containers},
		{"initContainers", spec.InitContainers, old.InitContainers},
	} {
		p := specPath.Child(l.name)
		if len(l.new) != len(l.old) {
			return append(allErrs, field.Forbidden(p, "pod updates may not add or remove containers"))
		}
		for i, c := range l.new {
			if c.Image != strings.TrimSpace(c.Image) {
				allErrs = append(allErrs, field.Invalid(p.Index(i).Child("image"), c.Image, "must not have leading or trailing whitespace"))
			}
		}
	}

	adsPath := specPath.Child("activeDeadlineSeconds")
	if spec.ActiveDeadlineSeconds != nil {
		v := *spec.ActiveDeadlineSeconds
		if v < 0 || v > math.MaxInt32 {
			return append(allErrs, field.Invalid(adsPath, v, validation.InclusiveRangeError(0, math.MaxInt32)))
		}
		if old.ActiveDeadlineSeconds != nil && *old.ActiveDeadlineSeconds < v {
			return append(allErrs, field.Invalid(adsPath, v, "must be less than or equal to previous value"))
		}
	} else if old.ActiveDeadlineSeconds != nil {
		allErrs = append(allErrs, field.Invalid(adsPath, spec.ActiveDeadlineSeconds, "must not update from a positive integer to nil value"))
	}
	allErrs = append(allErrs, validateOnlyAddedTolerations(spec.Tolerations, old.Tolerations, specPath.Child("tolerations"))...)

	if apiequality.Semantic.DeepEqual(spec, old) {
		return allErrs
	}
	// Put the mutable fields back to their old values; whatever still
	// differs was not allowed to change.
	munged := spec.DeepCopy()
	for i := range munged.Containers {
		munged.Containers[i].Image = old.Containers[i].Image
	}
	for i := range munged.InitContainers {
		munged.InitContainers[i].Image = old.InitContainers[i].Image
	}
	munged.ActiveDeadlineSeconds = old.ActiveDeadlineSeconds
	munged.Tolerations = old.Tolerations
	munged.SchedulingGates = old.SchedulingGates
	if old.TerminationGracePeriodSeconds != nil && *old.TerminationGracePeriodSeconds < 0 &&
		munged.TerminationGracePeriodSeconds != nil && *munged.TerminationGracePeriodSeconds == 1 {
		munged.TerminationGracePeriodSeconds = old.TerminationGracePeriodSeconds
	}
	if old.NodeName == "" {
		munged.NodeName = ""
	}
	if changed := changedFields(munged, old); len(changed) > 0 {
		allErrs = append(allErrs, field.Forbidden(specPath, fmt.Sprintf("pod updates may not change fields other than %s\nchanged: %s",
			strings.Join(updatablePodSpecFields, ","), strings.Join(changed, ", "))))
	}
	return allErrs
}

// validateOnlyAddedTolerations lets tolerations be added but not removed
// or changed (bar their tolerationSeconds).
func validateOnlyAddedTolerations(tolerations, old []corev1.Toleration, fldPath *field.Path) field.ErrorList {
	allErrs := field.ErrorList{}
	for _, o := range old {
		found := false
		for _, t := range tolerations {
			o.TolerationSeconds = t.TolerationSeconds
			if apiequality.Semantic.DeepEqual(o, t) {
				found = true
				break
			}
		}
		if !found {
			allErrs = append(allErrs, field.Forbidden(fldPath, "existing toleration can not be modified except its tolerationSeconds"))
			return allErrs
		}
	}
	return append(allErrs, validateTolerations(tolerations, fldPath)...)
}

// changedFields names the top-level PodSpec fields that differ, in the
// place of the full diff Kubernetes prints.
func changedFields(spec, old *corev1.PodSpec) []string {
	var out []string
	a, b := reflect.ValueOf(spec).Elem(), reflect.ValueOf(old).Elem()
	for i := 0; i < a.NumField(); i++ {
		if !apiequality.Semantic.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			out = append(out, "spec."+jsonName(a.Type().Field(i)))
		}
	}
	return out
}
