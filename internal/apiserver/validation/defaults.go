package validation

//lint:file-ignore SA1019 core/v1 Endpoints is deprecated upstream but still served, so still validated

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Default values, as in kubernetes pkg/apis/*/v1/defaults.go.
const (
	defaultGracePeriodSeconds      int64 = 30
	defaultTerminationMessagePath        = "/dev/termination-log"
	defaultProbeTimeoutSeconds     int32 = 1
	defaultProbePeriodSeconds      int32 = 10
	defaultProbeSuccessThreshold   int32 = 1
	defaultProbeFailureThreshold   int32 = 3
	defaultVolumeMode              int32 = 0o644
	defaultTokenExpirationSeconds  int64 = 3600
	defaultRevisionHistoryLimit    int32 = 10
	defaultProgressDeadlineSeconds int32 = 600
)

// Default fills in defaults the way the Kubernetes API server does on
// create/update (mutates obj). It never allocates: cluster IPs and node
// ports left empty stay empty for the server's allocator. Unknown types are
// left alone.
func Default(obj runtime.Object, cfg Config) {
	cfg = cfg.withDefaults()
	switch o := obj.(type) {
	case *corev1.Namespace:
		defaultNamespace(o)
	case *corev1.Node:
		defaultNode(o)
	case *corev1.Pod:
		defaultPod(o)
	case *corev1.Service:
		defaultService(o, cfg)
	case *corev1.Endpoints:
		for i := range o.Subsets {
			for j := range o.Subsets[i].Ports {
				setIfEmpty(&o.Subsets[i].Ports[j].Protocol, corev1.ProtocolTCP)
			}
		}
	case *corev1.Secret:
		defaultSecret(o)
	case *appsv1.Deployment:
		defaultDeployment(o)
	case *appsv1.ReplicaSet:
		defaultReplicaSet(o)
	case *corev1.ReplicationController:
		defaultReplicationController(o)
	case *discoveryv1.EndpointSlice:
		for i := range o.Ports {
			p := &o.Ports[i]
			if p.Name == nil {
				p.Name = ptr("")
			}
			if p.Protocol == nil {
				p.Protocol = ptr(corev1.ProtocolTCP)
			}
		}
	case *networkingv1.NetworkPolicy:
		defaultNetworkPolicy(o)
	case *networkingv1.IngressClass:
		if p := o.Spec.Parameters; p != nil && p.Scope == nil {
			p.Scope = ptr(networkingv1.IngressClassParametersReferenceScopeCluster)
		}
	case *appsv1.StatefulSet:
		defaultStatefulSet(o)
	case *appsv1.DaemonSet:
		defaultDaemonSet(o)
	case *rbacv1.RoleBinding:
		defaultRoleRef(&o.RoleRef)
		defaultSubjects(o.Subjects)
	case *rbacv1.ClusterRoleBinding:
		defaultRoleRef(&o.RoleRef)
		defaultSubjects(o.Subjects)
	case *batchv1.Job:
		defaultJob(o)
	}
}

func ptr[T any](v T) *T { return &v }

func setIfEmpty[T comparable](dst *T, v T) {
	var zero T
	if *dst == zero {
		*dst = v
	}
}

func setIfNil[T any](dst **T, v T) {
	if *dst == nil {
		*dst = &v
	}
}

func defaultNamespace(ns *corev1.Namespace) {
	setIfEmpty(&ns.Status.Phase, corev1.NamespaceActive)
	// The label lets selectors (network policies, webhooks) pick namespaces
	// by name; Kubernetes always sets it, overwriting whatever was there.
	// An invalid name is left to fail on metadata.name alone rather than
	// also as a label value.
	if ns.Name != "" && len(nameIsLabel(ns.Name, false)) == 0 {
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[corev1.LabelMetadataName] = ns.Name
	}
}

func defaultNode(node *corev1.Node) {
	// podCIDR is the old singular form of podCIDRs; keep them in step as
	// the v1 conversion does.
	if node.Spec.PodCIDR != "" && len(node.Spec.PodCIDRs) == 0 {
		node.Spec.PodCIDRs = []string{node.Spec.PodCIDR}
	}
	if node.Spec.PodCIDR == "" && len(node.Spec.PodCIDRs) > 0 {
		node.Spec.PodCIDR = node.Spec.PodCIDRs[0]
	}
	if node.Status.Allocatable == nil && node.Status.Capacity != nil {
		node.Status.Allocatable = node.Status.Capacity.DeepCopy()
	}
}

func defaultService(svc *corev1.Service, cfg Config) {
	defaultServiceFields(svc)
	initIPFamilyFields(svc, nil, cfg)
}

// defaultServiceFields are the defaults of a Service that do not depend on
// the stored object or the cluster.
func defaultServiceFields(svc *corev1.Service) {
	spec := &svc.Spec
	setIfEmpty(&spec.SessionAffinity, corev1.ServiceAffinityNone)
	switch spec.SessionAffinity {
	case corev1.ServiceAffinityNone:
		spec.SessionAffinityConfig = nil
	case corev1.ServiceAffinityClientIP:
		c := spec.SessionAffinityConfig
		if c == nil || c.ClientIP == nil || c.ClientIP.TimeoutSeconds == nil {
			spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{
				ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(corev1.DefaultClientIPServiceAffinitySeconds)},
			}
		}
	}
	setIfEmpty(&spec.Type, corev1.ServiceTypeClusterIP)
	for i := range spec.Ports {
		p := &spec.Ports[i]
		setIfEmpty(&p.Protocol, corev1.ProtocolTCP)
		if p.TargetPort == intstr.FromInt32(0) || p.TargetPort == intstr.FromString("") {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}
	if externallyAccessible(svc) {
		setIfEmpty(&spec.ExternalTrafficPolicy, corev1.ServiceExternalTrafficPolicyCluster)
	}
	if spec.Type == corev1.ServiceTypeClusterIP || spec.Type == corev1.ServiceTypeNodePort || spec.Type == corev1.ServiceTypeLoadBalancer {
		setIfNil(&spec.InternalTrafficPolicy, corev1.ServiceInternalTrafficPolicyCluster)
	}
	if spec.Type == corev1.ServiceTypeLoadBalancer {
		setIfNil(&spec.AllocateLoadBalancerNodePorts, true)
	}

	// An old client writes only clusterIP; mirror it into clusterIPs as the
	// registry does on create.
	if spec.ClusterIP != "" && len(spec.ClusterIPs) == 0 {
		spec.ClusterIPs = []string{spec.ClusterIP}
	}
}

func defaultSecret(s *corev1.Secret) {
	setIfEmpty(&s.Type, corev1.SecretTypeOpaque)
	// stringData is a write-only convenience: Kubernetes folds it into data
	// when decoding, so it is never stored.
	if len(s.StringData) > 0 {
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		for k, v := range s.StringData {
			s.Data[k] = []byte(v)
		}
	}
	s.StringData = nil
}

func defaultDeployment(d *appsv1.Deployment) {
	setIfNil(&d.Spec.Replicas, 1)
	st := &d.Spec.Strategy
	setIfEmpty(&st.Type, appsv1.RollingUpdateDeploymentStrategyType)
	if st.Type == appsv1.RollingUpdateDeploymentStrategyType {
		if st.RollingUpdate == nil {
			st.RollingUpdate = &appsv1.RollingUpdateDeployment{}
		}
		setIfNil(&st.RollingUpdate.MaxUnavailable, intstr.FromString("25%"))
		setIfNil(&st.RollingUpdate.MaxSurge, intstr.FromString("25%"))
	}
	setIfNil(&d.Spec.RevisionHistoryLimit, defaultRevisionHistoryLimit)
	setIfNil(&d.Spec.ProgressDeadlineSeconds, defaultProgressDeadlineSeconds)
	defaultPodSpec(&d.Spec.Template.Spec)
}

// defaultPod adds, to the pod spec defaults shared with templates, the ones
// Kubernetes applies only to real pods.
func defaultPod(pod *corev1.Pod) {
	defaultPodSpec(&pod.Spec)
	setIfNil(&pod.Spec.EnableServiceLinks, corev1.DefaultEnableServiceLinks)
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range cs {
			c := &cs[i]
			// Requests default to limits so the scheduler sees what the
			// container may use.
			for name, q := range c.Resources.Limits {
				if _, ok := c.Resources.Requests[name]; !ok {
					if c.Resources.Requests == nil {
						c.Resources.Requests = corev1.ResourceList{}
					}
					c.Resources.Requests[name] = q.DeepCopy()
				}
			}
			if pod.Spec.HostNetwork {
				for j := range c.Ports {
					setIfEmpty(&c.Ports[j].HostPort, c.Ports[j].ContainerPort)
				}
			}
		}
	}
}

func defaultPodSpec(spec *corev1.PodSpec) {
	setIfEmpty(&spec.DNSPolicy, corev1.DNSClusterFirst)
	setIfEmpty(&spec.RestartPolicy, corev1.RestartPolicyAlways)
	setIfNil(&spec.SecurityContext, corev1.PodSecurityContext{})
	setIfNil(&spec.TerminationGracePeriodSeconds, defaultGracePeriodSeconds)
	setIfEmpty(&spec.SchedulerName, corev1.DefaultSchedulerName)
	for i := range spec.Volumes {
		defaultVolumeSource(&spec.Volumes[i].VolumeSource)
	}
	for i := range spec.Containers {
		defaultContainer(&spec.Containers[i])
	}
	for i := range spec.InitContainers {
		defaultContainer(&spec.InitContainers[i])
	}
	for i := range spec.EphemeralContainers {
		c := corev1.Container(spec.EphemeralContainers[i].EphemeralContainerCommon)
		defaultContainer(&c)
		spec.EphemeralContainers[i].EphemeralContainerCommon = corev1.EphemeralContainerCommon(c)
	}
}

func defaultVolumeSource(v *corev1.VolumeSource) {
	if *v == (corev1.VolumeSource{}) {
		v.EmptyDir = &corev1.EmptyDirVolumeSource{}
	}
	if v.HostPath != nil {
		setIfNil(&v.HostPath.Type, corev1.HostPathUnset)
	}
	if v.Secret != nil {
		setIfNil(&v.Secret.DefaultMode, defaultVolumeMode)
	}
	if v.ConfigMap != nil {
		setIfNil(&v.ConfigMap.DefaultMode, defaultVolumeMode)
	}
	if v.DownwardAPI != nil {
		setIfNil(&v.DownwardAPI.DefaultMode, defaultVolumeMode)
		for i := range v.DownwardAPI.Items {
			if f := v.DownwardAPI.Items[i].FieldRef; f != nil {
				setIfEmpty(&f.APIVersion, "v1")
			}
		}
	}
	if v.Projected != nil {
		setIfNil(&v.Projected.DefaultMode, defaultVolumeMode)
		for i := range v.Projected.Sources {
			if t := v.Projected.Sources[i].ServiceAccountToken; t != nil {
				setIfNil(&t.ExpirationSeconds, defaultTokenExpirationSeconds)
			}
		}
	}
}

func defaultContainer(c *corev1.Container) {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = corev1.PullIfNotPresent
		if imageTag(c.Image) == "latest" {
			c.ImagePullPolicy = corev1.PullAlways
		}
	}
	setIfEmpty(&c.TerminationMessagePath, defaultTerminationMessagePath)
	setIfEmpty(&c.TerminationMessagePolicy, corev1.TerminationMessageReadFile)
	for i := range c.Ports {
		setIfEmpty(&c.Ports[i].Protocol, corev1.ProtocolTCP)
	}
	for i := range c.Env {
		if vf := c.Env[i].ValueFrom; vf != nil && vf.FieldRef != nil {
			setIfEmpty(&vf.FieldRef.APIVersion, "v1")
		}
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		if p == nil {
			continue
		}
		setIfEmpty(&p.TimeoutSeconds, defaultProbeTimeoutSeconds)
		setIfEmpty(&p.PeriodSeconds, defaultProbePeriodSeconds)
		setIfEmpty(&p.SuccessThreshold, defaultProbeSuccessThreshold)
		setIfEmpty(&p.FailureThreshold, defaultProbeFailureThreshold)
		defaultHTTPGet(p.HTTPGet)
	}
	if l := c.Lifecycle; l != nil {
		for _, h := range []*corev1.LifecycleHandler{l.PostStart, l.PreStop} {
			if h != nil {
				defaultHTTPGet(h.HTTPGet)
			}
		}
	}
}

func defaultHTTPGet(h *corev1.HTTPGetAction) {
	if h == nil {
		return
	}
	setIfEmpty(&h.Path, "/")
	setIfEmpty(&h.Scheme, corev1.URISchemeHTTP)
}

// imageTag returns the tag of an image reference the way the kubelet's
// parser does: "latest" when there is neither tag nor digest, "" when only
// a digest pins the image.
func imageTag(image string) string {
	name, _, digested := strings.Cut(image, "@")
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		return name[i+1:]
	}
	if digested {
		return ""
	}
	return "latest"
}
