package validation

//lint:file-ignore SA1019 core/v1 Endpoints is deprecated upstream but still served, so still validated

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// defaultedContainer is container("web") as Kubernetes stores it.
func defaultedContainer(name string) corev1.Container {
	c := container(name)
	c.ImagePullPolicy = corev1.PullIfNotPresent
	c.TerminationMessagePath = "/dev/termination-log"
	c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	c.Ports[0].Protocol = corev1.ProtocolTCP
	return c
}

func defaultedPodSpec(containers ...corev1.Container) corev1.PodSpec {
	return corev1.PodSpec{
		Containers:                    containers,
		RestartPolicy:                 corev1.RestartPolicyAlways,
		DNSPolicy:                     corev1.DNSClusterFirst,
		TerminationGracePeriodSeconds: ptr(int64(30)),
		SchedulerName:                 "default-scheduler",
		SecurityContext:               &corev1.PodSecurityContext{},
	}
}

func TestDefault(t *testing.T) {
	tests := []struct {
		name    string
		in, out runtime.Object
	}{
		{
			name: "ClusterIP service",
			in:   service(func(s *corev1.Service) { s.Spec.Ports[0].TargetPort = intstr.IntOrString{} }),
			out: service(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeClusterIP
				s.Spec.Ports[0].Protocol = corev1.ProtocolTCP
				s.Spec.Ports[0].TargetPort = intstr.FromInt32(80)
				s.Spec.SessionAffinity = corev1.ServiceAffinityNone
				s.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyCluster)
				s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
				s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicySingleStack)
			}),
		},
		{
			name: "LoadBalancer service with ClientIP affinity",
			in: service(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
				s.Spec.Ports[0].TargetPort = intstr.FromString("http")
			}),
			out: service(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.Ports[0].Protocol = corev1.ProtocolTCP
				s.Spec.Ports[0].TargetPort = intstr.FromString("http")
				s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
				s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(10800))}}
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
				s.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyCluster)
				s.Spec.AllocateLoadBalancerNodePorts = ptr(true)
				s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
				s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicySingleStack)
			}),
		},
		{
			name: "NodePort service keeps its nodePort and gets no clusterIP",
			in: service(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeNodePort
				s.Spec.Ports[0].NodePort = 30080
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			}),
			out: service(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeNodePort
				s.Spec.Ports[0].NodePort = 30080
				s.Spec.Ports[0].Protocol = corev1.ProtocolTCP
				s.Spec.SessionAffinity = corev1.ServiceAffinityNone
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyCluster)
				s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
				s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicySingleStack)
			}),
		},
		{
			name: "ClusterIP service with external IPs is externally accessible",
			in:   service(func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"198.51.100.7"} }),
			out: service(func(s *corev1.Service) {
				s.Spec.ExternalIPs = []string{"198.51.100.7"}
				s.Spec.Type = corev1.ServiceTypeClusterIP
				s.Spec.Ports[0].Protocol = corev1.ProtocolTCP
				s.Spec.SessionAffinity = corev1.ServiceAffinityNone
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
				s.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyCluster)
				s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
				s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicySingleStack)
			}),
		},
		{
			name: "pinned clusterIP is mirrored into clusterIPs",
			in:   service(func(s *corev1.Service) { s.Spec.ClusterIP = "10.96.0.10" }),
			out: service(func(s *corev1.Service) {
				s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.10", []string{"10.96.0.10"}
				s.Spec.Type = corev1.ServiceTypeClusterIP
				s.Spec.Ports[0].Protocol = corev1.ProtocolTCP
				s.Spec.SessionAffinity = corev1.ServiceAffinityNone
				s.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyCluster)
				s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
				s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicySingleStack)
			}),
		},
		{
			name: "headless service without selector takes every family",
			in: service(func(s *corev1.Service) {
				s.Spec.ClusterIP, s.Spec.Selector, s.Spec.Ports = "None", nil, nil
			}),
			out: service(func(s *corev1.Service) {
				s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.Selector, s.Spec.Ports = "None", []string{"None"}, nil, nil
				s.Spec.Type = corev1.ServiceTypeClusterIP
				s.Spec.SessionAffinity = corev1.ServiceAffinityNone
				s.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyCluster)
				// Both, even in a single-stack cluster, as upstream's
				// TestCreateInitIPFields (HeadlessSelectorless) expects.
				s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
				s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyRequireDualStack)
			}),
		},
		{
			name: "ExternalName service gets no families nor internal policy",
			in: service(func(s *corev1.Service) {
				s.Spec.Type, s.Spec.ExternalName, s.Spec.Selector, s.Spec.Ports = corev1.ServiceTypeExternalName, "db.example.com", nil, nil
			}),
			out: service(func(s *corev1.Service) {
				s.Spec.Type, s.Spec.ExternalName, s.Spec.Selector, s.Spec.Ports = corev1.ServiceTypeExternalName, "db.example.com", nil, nil
				s.Spec.SessionAffinity = corev1.ServiceAffinityNone
			}),
		},
		{
			name: "pod",
			in: pod(func(p *corev1.Pod) {
				p.Spec.Containers[0].Image = "nginx"
				p.Spec.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(80)}}}
				p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}
				p.Spec.Volumes = []corev1.Volume{{Name: "scratch"}, {Name: "cfg", VolumeSource: corev1.VolumeSource{
					ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}}}}
			}),
			out: pod(func(p *corev1.Pod) {
				c := defaultedContainer("web")
				c.Image, c.ImagePullPolicy = "nginx", corev1.PullAlways
				c.LivenessProbe = &corev1.Probe{
					ProbeHandler:   corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(80), Scheme: corev1.URISchemeHTTP}},
					TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3,
				}
				c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}
				c.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}
				p.Spec = defaultedPodSpec(c)
				p.Spec.EnableServiceLinks = ptr(true)
				p.Spec.Volumes = []corev1.Volume{
					{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: "app"}, DefaultMode: ptr(int32(0o644))}}},
				}
			}),
		},
		{
			name: "pod on the host network listens on the host port",
			in:   pod(func(p *corev1.Pod) { p.Spec.HostNetwork = true }),
			out: pod(func(p *corev1.Pod) {
				c := defaultedContainer("web")
				c.Ports[0].HostPort = 80
				p.Spec = defaultedPodSpec(c)
				p.Spec.HostNetwork = true
				p.Spec.EnableServiceLinks = ptr(true)
			}),
		},
		{
			name: "deployment",
			in:   deployment(),
			out: deployment(func(d *appsv1.Deployment) {
				d.Spec.Replicas = ptr(int32(1))
				d.Spec.Strategy = appsv1.DeploymentStrategy{
					Type: appsv1.RollingUpdateDeploymentStrategyType,
					RollingUpdate: &appsv1.RollingUpdateDeployment{
						MaxUnavailable: ptr(intstr.FromString("25%")),
						MaxSurge:       ptr(intstr.FromString("25%")),
					},
				}
				d.Spec.RevisionHistoryLimit = ptr(int32(10))
				d.Spec.ProgressDeadlineSeconds = ptr(int32(600))
				// Templates get the pod spec defaults but not the pod-only
				// ones (enableServiceLinks).
				d.Spec.Template.Spec = defaultedPodSpec(defaultedContainer("web"))
			}),
		},
		{
			name: "namespace",
			in:   &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{corev1.LabelMetadataName: "other"}}},
			out: &corev1.Namespace{
				ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{corev1.LabelMetadataName: "team-a"}},
				Status:     corev1.NamespaceStatus{Phase: corev1.NamespaceActive},
			},
		},
		{
			name: "secret folds stringData into data",
			in:   secret(func(s *corev1.Secret) { s.StringData = map[string]string{"user": "admin"} }),
			out: secret(func(s *corev1.Secret) {
				s.Type = corev1.SecretTypeOpaque
				s.Data["user"] = []byte("admin")
			}),
		},
		{
			name: "endpointslice ports",
			in: endpointSlice(func(s *discoveryv1.EndpointSlice) {
				s.Ports = []discoveryv1.EndpointPort{{Port: ptr(int32(53)), Protocol: ptr(corev1.ProtocolUDP)}, {Port: ptr(int32(80))}}
				s.Endpoints[0].Conditions.Ready = ptr(true)
			}),
			out: endpointSlice(func(s *discoveryv1.EndpointSlice) {
				s.Ports = []discoveryv1.EndpointPort{
					{Name: ptr(""), Port: ptr(int32(53)), Protocol: ptr(corev1.ProtocolUDP)},
					{Name: ptr(""), Port: ptr(int32(80)), Protocol: ptr(corev1.ProtocolTCP)},
				}
				s.Endpoints[0].Conditions.Ready = ptr(true)
			}),
		},
		{
			name: "endpoints ports",
			in: &corev1.Endpoints{ObjectMeta: objMeta("db"), Subsets: []corev1.EndpointSubset{{
				Addresses: []corev1.EndpointAddress{{IP: "10.244.1.5"}}, Ports: []corev1.EndpointPort{{Port: 5432}}}}},
			out: &corev1.Endpoints{ObjectMeta: objMeta("db"), Subsets: []corev1.EndpointSubset{{
				Addresses: []corev1.EndpointAddress{{IP: "10.244.1.5"}}, Ports: []corev1.EndpointPort{{Port: 5432, Protocol: corev1.ProtocolTCP}}}}},
		},
		{
			name: "node podCIDR",
			in:   node(func(n *corev1.Node) { n.Spec.PodCIDRs, n.Spec.PodCIDR = nil, "10.244.3.0/24" }),
			out:  node(func(n *corev1.Node) { n.Spec.PodCIDRs, n.Spec.PodCIDR = []string{"10.244.3.0/24"}, "10.244.3.0/24" }),
		},
		{
			name: "ingress has no defaults, not even pathType",
			in:   ingress(func(i *networkingv1.Ingress) { ingressPath(i).PathType = nil }),
			out:  ingress(func(i *networkingv1.Ingress) { ingressPath(i).PathType = nil }),
		},
		{
			name: "ingressclass parameters scope",
			in: ingressClass(func(c *networkingv1.IngressClass) {
				c.Spec.Parameters = &networkingv1.IngressClassParametersReference{Kind: "Config", Name: "x"}
			}),
			out: ingressClass(func(c *networkingv1.IngressClass) {
				c.Spec.Parameters = &networkingv1.IngressClassParametersReference{Kind: "Config", Name: "x", Scope: ptr("Cluster")}
			}),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.in.DeepCopyObject()
			Default(got, DefaultConfig())
			if !apiequality.Semantic.DeepEqual(got, tc.out) {
				t.Errorf("got:\n%s\nwant:\n%s", asJSON(got), asJSON(tc.out))
			}
			// Defaulting twice changes nothing.
			again := got.DeepCopyObject()
			Default(again, DefaultConfig())
			if !apiequality.Semantic.DeepEqual(got, again) {
				t.Errorf("not idempotent:\n%s", asJSON(again))
			}
		})
	}
}

func TestImagePullPolicy(t *testing.T) {
	tests := map[string]corev1.PullPolicy{
		"nginx":                            corev1.PullAlways,
		"nginx:latest":                     corev1.PullAlways,
		"nginx:1.27":                       corev1.PullIfNotPresent,
		"registry.local:5000/web":          corev1.PullAlways,
		"registry.local:5000/web:v2":       corev1.PullIfNotPresent,
		"web@sha256:0123abcd":              corev1.PullIfNotPresent,
		"web:latest@sha256:0123abcd":       corev1.PullAlways,
		"registry.local:5000/web@sha256:0": corev1.PullIfNotPresent,
	}
	for image, want := range tests {
		c := corev1.Container{Image: image}
		defaultContainer(&c)
		if c.ImagePullPolicy != want {
			t.Errorf("%s: got %s, want %s", image, c.ImagePullPolicy, want)
		}
	}
}

func TestPrepareForUpdate(t *testing.T) {
	nodePort := func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.Ports[0].NodePort = 30080
		s.Spec.HealthCheckNodePort = 32100
	}
	t.Run("keeps allocated values", func(t *testing.T) {
		old := storedService(nodePort)
		obj := service(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		})
		Default(obj, DefaultConfig())
		PrepareForUpdate(obj, old)
		if obj.Spec.ClusterIP != "10.96.0.10" || len(obj.Spec.ClusterIPs) != 1 || obj.Spec.Ports[0].NodePort != 30080 || obj.Spec.HealthCheckNodePort != 32100 {
			t.Errorf("allocated values lost: %s", asJSON(obj.Spec))
		}
	})
	t.Run("drops what the new type does not use", func(t *testing.T) {
		old := storedService(nodePort)
		obj := old.DeepCopy()
		obj.Spec.Type = corev1.ServiceTypeExternalName
		obj.Spec.ExternalName = "db.example.com"
		PrepareForUpdate(obj, old)
		s := obj.Spec
		if s.ClusterIP != "" || s.ClusterIPs != nil || s.IPFamilies != nil || s.IPFamilyPolicy != nil ||
			s.Ports[0].NodePort != 0 || s.HealthCheckNodePort != 0 || s.ExternalTrafficPolicy != "" || s.AllocateLoadBalancerNodePorts != nil {
			t.Errorf("type-dependent fields kept: %s", asJSON(s))
		}
		if errs := Validate(obj, old, DefaultConfig()); len(errs) > 0 {
			t.Errorf("rejected:\n%s", errorLines(errs))
		}
	})
	t.Run("keeps status", func(t *testing.T) {
		old := storedService(nodePort)
		old.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.7"}}
		obj := old.DeepCopy()
		obj.Status = corev1.ServiceStatus{}
		PrepareForUpdate(obj, old)
		if len(obj.Status.LoadBalancer.Ingress) != 1 {
			t.Errorf("status lost")
		}
	})
	t.Run("other kinds untouched", func(t *testing.T) {
		old, obj := storedPod(), storedPod(func(p *corev1.Pod) { p.Spec.NodeName = "node-1" })
		want := obj.DeepCopy()
		PrepareForUpdate(obj, old)
		if !apiequality.Semantic.DeepEqual(obj, want) {
			t.Errorf("pod changed")
		}
	})
}
