package validation

//lint:file-ignore SA1019 core/v1 Endpoints is deprecated upstream but still served, so still validated

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/apiserver/validation/validationtest"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

// Builders for valid objects; each bad case below breaks one thing.

func with[T any](base T, muts ...func(T)) T {
	for _, m := range muts {
		m(base)
	}
	return base
}

func objMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: "default"}
}

func service(muts ...func(*corev1.Service)) *corev1.Service {
	return with(&corev1.Service{
		ObjectMeta: objMeta("web"),
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, muts...)
}

// storedService is service as the server keeps it: defaulted, with an
// identity and an allocated cluster IP.
func storedService(muts ...func(*corev1.Service)) *corev1.Service {
	s := service(muts...)
	s.UID, s.ResourceVersion = "uid-1", "7"
	if s.Spec.Type != corev1.ServiceTypeExternalName && s.Spec.ClusterIP == "" {
		s.Spec.ClusterIP = "10.96.0.10"
	}
	Default(s, DefaultConfig())
	return s
}

func container(name string) corev1.Container {
	return corev1.Container{Name: name, Image: "nginx:1.27", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80}}}
}

func pod(muts ...func(*corev1.Pod)) *corev1.Pod {
	return with(&corev1.Pod{
		ObjectMeta: objMeta("web-0"),
		Spec:       corev1.PodSpec{Containers: []corev1.Container{container("web")}},
	}, muts...)
}

func storedPod(muts ...func(*corev1.Pod)) *corev1.Pod {
	p := pod(muts...)
	p.UID = "uid-2"
	Default(p, DefaultConfig())
	return p
}

func deployment(muts ...func(*appsv1.Deployment)) *appsv1.Deployment {
	labels := map[string]string{"app": "web"}
	return with(&appsv1.Deployment{
		ObjectMeta: objMeta("web"),
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{container("web")}},
			},
		},
	}, muts...)
}

func ingress(muts ...func(*networkingv1.Ingress)) *networkingv1.Ingress {
	return with(&networkingv1.Ingress{
		ObjectMeta: objMeta("web"),
		Spec: networkingv1.IngressSpec{Rules: []networkingv1.IngressRule{{
			Host: "shop.example.com",
			IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
				Paths: []networkingv1.HTTPIngressPath{{
					Path:     "/",
					PathType: ptr(networkingv1.PathTypePrefix),
					Backend: networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
						Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80},
					}},
				}},
			}},
		}}},
	}, muts...)
}

func ingressPath(i *networkingv1.Ingress) *networkingv1.HTTPIngressPath {
	return &i.Spec.Rules[0].HTTP.Paths[0]
}

func endpointSlice(muts ...func(*discoveryv1.EndpointSlice)) *discoveryv1.EndpointSlice {
	return with(&discoveryv1.EndpointSlice{
		ObjectMeta:  objMeta("web-abc12"),
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.5"}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}},
	}, muts...)
}

func secret(muts ...func(*corev1.Secret)) *corev1.Secret {
	return with(&corev1.Secret{ObjectMeta: objMeta("db"), Data: map[string][]byte{"password": []byte("s3cr3t")}}, muts...)
}

func configMap(muts ...func(*corev1.ConfigMap)) *corev1.ConfigMap {
	return with(&corev1.ConfigMap{ObjectMeta: objMeta("app"), Data: map[string]string{"mode": "production"}}, muts...)
}

func ingressClass(muts ...func(*networkingv1.IngressClass)) *networkingv1.IngressClass {
	return with(&networkingv1.IngressClass{
		ObjectMeta: metav1.ObjectMeta{Name: "minikit"},
		Spec:       networkingv1.IngressClassSpec{Controller: "minikit.dev/ingress"},
	}, muts...)
}

func node(muts ...func(*corev1.Node)) *corev1.Node {
	return with(&corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Spec:       corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24"}},
	}, muts...)
}

func event(muts ...func(*corev1.Event)) *corev1.Event {
	return with(&corev1.Event{
		ObjectMeta:     objMeta("web-0.17a3b"),
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web-0"},
		Reason:         "Started",
		Type:           corev1.EventTypeNormal,
	}, muts...)
}

type badCase struct {
	name    string
	obj     runtime.Object
	old     runtime.Object // nil for a create
	cfg     *Config        // nil for DefaultConfig
	field   string
	message string
}

func badCases() []badCase {
	smallRange := DefaultConfig()
	smallRange.NodePortMin, smallRange.NodePortMax = 31000, 31999
	k3s := DefaultConfig()
	k3s.ServiceCIDR = netip.MustParsePrefix("10.43.0.0/16")

	return []badCase{
		// Services.
		{
			name: "service nodePort 8080 from the docs", field: "spec.ports[0].nodePort",
			message: "Invalid value: 8080: provided port is not in the valid range. The range of valid ports is 30000-32767",
			obj: service(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeNodePort
				s.Spec.Ports[0].NodePort = 8080
			}),
		},
		{
			name: "service nodePort outside a configured range", cfg: &smallRange, field: "spec.ports[0].nodePort",
			message: "The range of valid ports is 31000-31999",
			obj: service(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.Ports[0].NodePort = 30080
			}),
		},
		{
			name: "service clusterIP outside a configured CIDR", cfg: &k3s, field: "spec.clusterIP",
			message: "provided IP is not in the valid range. The range of valid IPs is 10.43.0.0/16",
			obj:     service(func(s *corev1.Service) { s.Spec.ClusterIP = "10.96.0.10" }),
		},
		{
			name: "service clusterIP is the network address", field: "spec.clusterIP",
			message: "provided IP is not in the valid range",
			obj:     service(func(s *corev1.Service) { s.Spec.ClusterIP = "10.96.0.0" }),
		},
		{
			name: "service clusterIP is the broadcast address", field: "spec.clusterIP",
			message: "provided IP is not in the valid range",
			obj:     service(func(s *corev1.Service) { s.Spec.ClusterIP = "10.111.255.255" }),
		},
		{
			name: "service clusterIP changed on update", field: "spec.clusterIP",
			message: "may not change once set",
			old:     storedService(),
			obj:     storedService(func(s *corev1.Service) { s.Spec.ClusterIP = "10.96.0.11" }),
		},
		{
			name: "service clusterIP cleared on update", field: "spec.clusterIP",
			message: "primary clusterIP can not be unset",
			old:     storedService(),
			obj: with(storedService(), func(s *corev1.Service) {
				s.Spec.ClusterIP, s.Spec.ClusterIPs = "", nil
			}),
		},
		{
			name: "service ExternalName with a clusterIP", field: "spec.clusterIP",
			message: "may not be set for ExternalName services",
			obj: service(func(s *corev1.Service) {
				s.Spec.Type, s.Spec.ExternalName, s.Spec.ClusterIP = corev1.ServiceTypeExternalName, "db.example.com", "10.96.0.20"
				s.Spec.Ports = nil
			}),
		},
		{
			name: "service IPv6 family on an IPv4 cluster", field: "spec.ipFamilies[0]",
			message: "not configured on this cluster",
			obj:     service(func(s *corev1.Service) { s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol} }),
		},
		{
			name: "service requires dual stack", field: "spec.ipFamilyPolicy",
			message: "this cluster is not configured for dual-stack services",
			obj: service(func(s *corev1.Service) {
				s.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicyRequireDualStack)
			}),
		},
		{
			name: "service clusterIP of the wrong family", field: "spec.clusterIP",
			message: "expected an IPv4 value as indicated by `ipFamilies[0]`",
			obj: service(func(s *corev1.Service) {
				s.Spec.ClusterIP = "fd00::10"
				s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol}
			}),
		},
		{
			name: "service clusterIPs not matching clusterIP", field: "spec.clusterIPs",
			message: "first value must match `clusterIP`",
			obj: service(func(s *corev1.Service) {
				s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.10", []string{"10.96.0.11"}
			}),
		},
		{
			name: "service health check port outside the range", field: "spec.healthCheckNodePort",
			message: "provided port is not in the valid range",
			obj: service(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 10256
			}),
		},
		{
			name: "service health check port changed on update", field: "spec.healthCheckNodePort",
			message: "field is immutable",
			old: storedService(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 32000
				s.Spec.Ports[0].NodePort = 31000
			}),
			obj: storedService(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				s.Spec.HealthCheckNodePort = 32001
				s.Spec.Ports[0].NodePort = 31000
			}),
		},
		{
			name: "service duplicate nodePort", field: "spec.ports[1].nodePort",
			message: "Duplicate value: 30080",
			obj: service(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeNodePort
				s.Spec.Ports = []corev1.ServicePort{
					{Name: "http", Port: 80, NodePort: 30080},
					{Name: "alt", Port: 8080, NodePort: 30080},
				}
			}),
		},
		{
			name: "service source ranges on ClusterIP", field: "spec.loadBalancerSourceRanges",
			message: "may only be used when `type` is 'LoadBalancer'",
			obj:     service(func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/24"} }),
		},
		{
			name: "service allocateLoadBalancerNodePorts on NodePort", field: "spec.allocateLoadBalancerNodePorts",
			message: "may only be used when `type` is 'LoadBalancer'",
			obj: service(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeNodePort
				s.Spec.AllocateLoadBalancerNodePorts = ptr(false)
			}),
		},
		{
			name: "service appProtocol with a space", field: "spec.ports[0].appProtocol",
			message: "name part must consist of alphanumeric characters",
			obj:     service(func(s *corev1.Service) { s.Spec.Ports[0].AppProtocol = ptr("http web") }),
		},
		{
			name: "service loopback external IP", field: "spec.externalIPs[0]",
			message: "may not be in the loopback range",
			obj:     service(func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"127.0.0.1"} }),
		},
		{
			name: "service renamed on update", field: "metadata.name",
			message: "field is immutable",
			old:     storedService(),
			obj:     storedService(func(s *corev1.Service) { s.Name = "web2" }),
		},
		{
			name: "service uid changed on update", field: "metadata.uid",
			message: "field is immutable",
			old:     storedService(),
			obj:     with(storedService(), func(s *corev1.Service) { s.UID = "uid-9" }),
		},
		{
			name: "service without a namespace", field: "metadata.namespace",
			message: "Required value",
			obj:     service(func(s *corev1.Service) { s.Namespace = "" }),
		},
		{
			name: "service label key with two slashes", field: "metadata.labels",
			message: "a valid label key must consist of alphanumeric characters",
			obj:     service(func(s *corev1.Service) { s.Labels = map[string]string{"example.com/app/name": "web"} }),
		},
		{
			name: "service annotation key with a space", field: "metadata.annotations",
			message: "name part must consist of alphanumeric characters",
			obj:     service(func(s *corev1.Service) { s.Annotations = map[string]string{"owner team": "net"} }),
		},

		// Pods.
		{
			name: "pod restartPolicy changed on update", field: "spec",
			message: "pod updates may not change fields other than `spec.containers[*].image`",
			old:     storedPod(),
			obj:     storedPod(func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyNever }),
		},
		{
			name: "pod container added on update", field: "spec.containers",
			message: "pod updates may not add or remove containers",
			old:     storedPod(),
			obj: storedPod(func(p *corev1.Pod) {
				p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "sidecar", Image: "busybox:1.36"})
			}),
		},
		{
			name: "pod moved to another node", field: "spec",
			message: "changed: spec.nodeName",
			old:     storedPod(func(p *corev1.Pod) { p.Spec.NodeName = "node-1" }),
			obj:     storedPod(func(p *corev1.Pod) { p.Spec.NodeName = "node-2" }),
		},
		{
			name: "pod deadline extended", field: "spec.activeDeadlineSeconds",
			message: "must be less than or equal to previous value",
			old:     storedPod(func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr(int64(60)) }),
			obj:     storedPod(func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr(int64(120)) }),
		},
		{
			name: "pod toleration removed", field: "spec.tolerations",
			message: "existing toleration can not be modified except its tolerationSeconds",
			old: storedPod(func(p *corev1.Pod) {
				p.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}
			}),
			obj: storedPod(),
		},
		{
			name: "pod init container with a liveness probe", field: "spec.initContainers[0].livenessProbe",
			message: "may not be set for init containers without restartPolicy=Always",
			obj: pod(func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox:1.36",
					LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}}}
			}),
		},
		{
			name: "pod dnsPolicy None without dnsConfig", field: "spec.dnsConfig",
			message: "must provide `dnsConfig` when `dnsPolicy` is None",
			obj:     pod(func(p *corev1.Pod) { p.Spec.DNSPolicy = corev1.DNSNone }),
		},
		{
			name: "pod on the host network with another hostPort", field: "spec.containers[0].ports[0].hostPort",
			message: "must match `containerPort` when `hostNetwork` is true",
			obj: pod(func(p *corev1.Pod) {
				p.Spec.HostNetwork = true
				p.Spec.Containers[0].Ports[0].HostPort = 8080
			}),
		},
		{
			name: "pod requests above limits", field: "spec.containers[0].resources.requests",
			message: "must be less than or equal to cpu limit of 500m",
			obj: pod(func(p *corev1.Pod) {
				p.Spec.Containers[0].Resources = corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")},
				}
			}),
		},
		{
			name: "pod volume with two sources", field: "spec.volumes[0].configMap",
			message: "may not specify more than 1 volume type",
			obj: pod(func(p *corev1.Pod) {
				p.Spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{
					EmptyDir:  &corev1.EmptyDirVolumeSource{},
					ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}},
				}}}
			}),
		},
		{
			name: "pod duplicate volume names", field: "spec.volumes[1].name",
			message: `Duplicate value: "data"`,
			obj: pod(func(p *corev1.Pod) {
				p.Spec.Volumes = []corev1.Volume{{Name: "data"}, {Name: "data"}}
			}),
		},
		{
			name: "pod created with ephemeral containers", field: "spec.ephemeralContainers",
			message: "cannot be set on create",
			obj: pod(func(p *corev1.Pod) {
				p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox:1.36"}}}
			}),
		},
		{
			name: "pod probe with two handlers", field: "spec.containers[0].readinessProbe.tcpSocket",
			message: "may not specify more than 1 handler type",
			obj: pod(func(p *corev1.Pod) {
				p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
					HTTPGet:   &corev1.HTTPGetAction{Port: intstr.FromString("http")},
					TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(80)},
				}}
			}),
		},
		{
			name: "pod toleration without key must be Exists", field: "spec.tolerations[0].operator",
			message: "operator must be Exists when `key` is empty",
			obj: pod(func(p *corev1.Pod) {
				p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpEqual, Value: "x"}}
			}),
		},

		// Deployments.
		{
			name: "deployment selector changed on update", field: "spec.selector",
			message: "field is immutable",
			old:     deployment(),
			obj: deployment(func(d *appsv1.Deployment) {
				d.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web", "tier": "front"}}
				d.Spec.Template.Labels = map[string]string{"app": "web", "tier": "front"}
			}),
		},
		{
			name: "deployment maxUnavailable above 100%", field: "spec.strategy.rollingUpdate.maxUnavailable",
			message: "must not be greater than 100%",
			obj: deployment(func(d *appsv1.Deployment) {
				d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxUnavailable: ptr(intstr.FromString("150%"))}
			}),
		},
		{
			name: "deployment maxSurge not a percentage", field: "spec.strategy.rollingUpdate.maxSurge",
			message: "a valid percent string must be a numeric string followed by an ending '%'",
			obj: deployment(func(d *appsv1.Deployment) {
				d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxSurge: ptr(intstr.FromString("half"))}
			}),
		},
		{
			name: "deployment progress deadline not above minReadySeconds", field: "spec.progressDeadlineSeconds",
			message: "must be greater than minReadySeconds",
			obj: deployment(func(d *appsv1.Deployment) {
				d.Spec.MinReadySeconds = 600
			}),
		},
		{
			name: "deployment empty selector", field: "spec.selector",
			message: "empty selector is invalid for deployment",
			obj:     deployment(func(d *appsv1.Deployment) { d.Spec.Selector = &metav1.LabelSelector{} }),
		},
		{
			name: "deployment Recreate with rollingUpdate", field: "spec.strategy.rollingUpdate",
			message: "may not be specified when strategy `type` is 'Recreate'",
			obj: deployment(func(d *appsv1.Deployment) {
				d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{}}
			}),
		},

		// Namespaces, nodes, secrets, config maps, events.
		{
			name: "namespace unqualified finalizer", field: "spec.finalizers[0]",
			message: "name is neither a standard finalizer name nor is it fully qualified",
			obj: &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"},
				Spec: corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{"cleanup"}}},
		},
		{
			name: "namespace inside a namespace", field: "metadata.namespace",
			message: "not allowed on this type",
			obj:     &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Namespace: "default"}},
		},
		{
			name: "node podCIDR changed on update", field: "spec.podCIDRs",
			message: `node updates may not change podCIDR except from "" to valid`,
			old:     node(),
			obj:     node(func(n *corev1.Node) { n.Spec.PodCIDRs = []string{"10.244.2.0/24"} }),
		},
		{
			name: "node taint with an unknown effect", field: "spec.taints[0].effect",
			message: `Unsupported value: "NoDeploy"`,
			obj: node(func(n *corev1.Node) {
				n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: "NoDeploy"}}
			}),
		},
		{
			name: "node pod CIDRs of one family", field: "spec.podCIDRs",
			message: "may specify no more than one CIDR for each IP family",
			obj:     node(func(n *corev1.Node) { n.Spec.PodCIDRs = []string{"10.244.1.0/24", "10.244.2.0/24"} }),
		},
		{
			name: "secret type changed on update", field: "type",
			message: "field is immutable",
			old:     secret(),
			obj:     secret(func(s *corev1.Secret) { s.Type = corev1.SecretTypeBasicAuth; s.Data["username"] = []byte("u") }),
		},
		{
			name: "immutable secret data changed", field: "data",
			message: "field is immutable when `immutable` is set",
			old:     secret(func(s *corev1.Secret) { s.Immutable = ptr(true) }),
			obj: secret(func(s *corev1.Secret) {
				s.Immutable = ptr(true)
				s.Data["password"] = []byte("n3w")
			}),
		},
		{
			name: "docker config secret with broken JSON", field: "data[.dockerconfigjson]",
			message: "<secret contents redacted>",
			obj: secret(func(s *corev1.Secret) {
				s.Type = corev1.SecretTypeDockerConfigJson
				s.Data = map[string][]byte{corev1.DockerConfigJsonKey: []byte("{not json")}
			}),
		},
		{
			name: "immutable config map made mutable", field: "immutable",
			message: "field is immutable when `immutable` is set",
			old:     configMap(func(c *corev1.ConfigMap) { c.Immutable = ptr(true) }),
			obj:     configMap(),
		},
		{
			name: "event about an object in another namespace", field: "involvedObject.namespace",
			message: "does not match event.namespace",
			obj:     event(func(e *corev1.Event) { e.InvolvedObject.Namespace = "kube-system" }),
		},

		// Discovery and networking.
		{
			name: "endpointslice addressType changed on update", field: "addressType",
			message: "field is immutable",
			old:     endpointSlice(),
			obj: endpointSlice(func(s *discoveryv1.EndpointSlice) {
				s.AddressType = discoveryv1.AddressTypeFQDN
				s.Endpoints[0].Addresses = []string{"db.example.com"}
			}),
		},
		{
			name: "endpointslice FQDN with one label", field: "endpoints[0].addresses[0]",
			message: "should be a domain with at least two segments separated by dots",
			obj: endpointSlice(func(s *discoveryv1.EndpointSlice) {
				s.AddressType = discoveryv1.AddressTypeFQDN
				s.Endpoints[0].Addresses = []string{"db"}
			}),
		},
		{
			name: "endpointslice port zero", field: "ports[0].port",
			message: "must be between 1 and 65535, inclusive",
			obj:     endpointSlice(func(s *discoveryv1.EndpointSlice) { s.Ports[0].Port = ptr(int32(0)) }),
		},
		{
			name: "ingress path escaping with ..", field: "spec.rules[0].http.paths[0].path",
			message: "must not contain '/../'",
			obj:     ingress(func(i *networkingv1.Ingress) { ingressPath(i).Path = "/api/../admin" }),
		},
		{
			name: "ingress backend with service and resource", field: "spec.rules[0].http.paths[0].backend",
			message: "cannot set both resource and service backends",
			obj: ingress(func(i *networkingv1.Ingress) {
				ingressPath(i).Backend.Resource = &corev1.TypedLocalObjectReference{Kind: "Bucket", Name: "static"}
			}),
		},
		{
			name: "ingress tls wildcard in the middle", field: "spec.tls[0].hosts[0]",
			message: "a wildcard DNS-1123 subdomain must start with '*.'",
			obj: ingress(func(i *networkingv1.Ingress) {
				i.Spec.TLS = []networkingv1.IngressTLS{{Hosts: []string{"shop.*.example.com"}, SecretName: "shop-tls"}}
			}),
		},
		{
			name: "ingress class annotation disagrees", field: "metadata.annotations[kubernetes.io/ingress.class]",
			message: "must match `ingressClassName` when both are specified",
			obj: ingress(func(i *networkingv1.Ingress) {
				i.Spec.IngressClassName = ptr("minikit")
				i.Annotations = map[string]string{"kubernetes.io/ingress.class": "nginx"}
			}),
		},
		{
			name: "ingressclass controller changed on update", field: "spec.controller",
			message: "field is immutable",
			old:     ingressClass(),
			obj:     ingressClass(func(c *networkingv1.IngressClass) { c.Spec.Controller = "example.com/other" }),
		},
		{
			name: "ingressclass namespaced parameters without namespace", field: "spec.parameters.namespace",
			message: "`parameters.scope` is set to 'Namespace'",
			obj: ingressClass(func(c *networkingv1.IngressClass) {
				c.Spec.Parameters = &networkingv1.IngressClassParametersReference{
					Kind: "Config", Name: "default", Scope: ptr(networkingv1.IngressClassParametersReferenceScopeNamespace),
				}
			}),
		},
		{
			name: "ingressclass controller too long", field: "spec.controller",
			message: "Too long",
			obj: ingressClass(func(c *networkingv1.IngressClass) {
				c.Spec.Controller = "minikit.dev/" + strings.Repeat("x", 240)
			}),
		},
	}
}

// checkOnly asserts that errs is not empty, that every error is on fieldPath
// (the object is invalid for that one reason) and that one mentions message.
func checkOnly(t *testing.T, errs field.ErrorList, fieldPath, message string) {
	t.Helper()
	if len(errs) == 0 {
		t.Fatalf("valid, want an error on %s containing %q", fieldPath, message)
	}
	found := false
	for _, e := range errs {
		if e.Field != fieldPath {
			t.Errorf("unexpected error (want only %s): %v", fieldPath, e)
		}
		if strings.Contains(e.Error(), message) {
			found = true
		}
	}
	if !found {
		t.Errorf("no error on %s contains %q; got:\n%s", fieldPath, message, errorLines(errs))
	}
}

func errorLines(errs field.ErrorList) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "  %v\n", e)
	}
	return b.String()
}

func TestValidateRejects(t *testing.T) {
	cases := badCases()
	if len(cases) < 40 {
		t.Fatalf("only %d bad cases, want at least 40", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tc.cfg != nil {
				cfg = *tc.cfg
			}
			obj := tc.obj.DeepCopyObject()
			Default(obj, cfg)
			var old runtime.Object
			if tc.old != nil {
				old = tc.old.DeepCopyObject()
				Default(old, cfg)
			}
			checkOnly(t, Validate(obj, old, cfg), tc.field, tc.message)
		})
	}
}

// decodeManifest decodes a manifest into its typed object, strictly, so a
// typo in a test manifest cannot pass for the error under test.
func decodeManifest(t *testing.T, manifest string) runtime.Object {
	t.Helper()
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal([]byte(manifest), &tm); err != nil {
		t.Fatalf("decoding type: %v", err)
	}
	var obj runtime.Object
	switch tm.APIVersion + "/" + tm.Kind {
	case "v1/Namespace":
		obj = &corev1.Namespace{}
	case "v1/Node":
		obj = &corev1.Node{}
	case "v1/Pod":
		obj = &corev1.Pod{}
	case "v1/Service":
		obj = &corev1.Service{}
	case "v1/Endpoints":
		obj = &corev1.Endpoints{}
	case "v1/Secret":
		obj = &corev1.Secret{}
	case "v1/ConfigMap":
		obj = &corev1.ConfigMap{}
	case "v1/Event":
		obj = &corev1.Event{}
	case "apps/v1/Deployment":
		obj = &appsv1.Deployment{}
	case "apps/v1/ReplicaSet":
		obj = &appsv1.ReplicaSet{}
	case "v1/ReplicationController":
		obj = &corev1.ReplicationController{}
	case "discovery.k8s.io/v1/EndpointSlice":
		obj = &discoveryv1.EndpointSlice{}
	case "networking.k8s.io/v1/Ingress":
		obj = &networkingv1.Ingress{}
	case "networking.k8s.io/v1/IngressClass":
		obj = &networkingv1.IngressClass{}
	case "networking.k8s.io/v1/NetworkPolicy":
		obj = &networkingv1.NetworkPolicy{}
	case "networking.k8s.io/v1/ServiceCIDR":
		obj = &networkingv1.ServiceCIDR{}
	case "networking.k8s.io/v1/IPAddress":
		obj = &networkingv1.IPAddress{}
	case "apps/v1/StatefulSet":
		obj = &appsv1.StatefulSet{}
	case "apps/v1/DaemonSet":
		obj = &appsv1.DaemonSet{}
	case "batch/v1/Job":
		obj = &batchv1.Job{}
	default:
		t.Fatalf("unknown kind %s %s", tm.APIVersion, tm.Kind)
	}
	if err := yaml.UnmarshalStrict([]byte(manifest), obj); err != nil {
		t.Fatalf("decoding %s: %v", tm.Kind, err)
	}
	// The server puts namespaced objects in the request's namespace.
	switch obj.(type) {
	case *corev1.Namespace, *corev1.Node, *networkingv1.IngressClass, *networkingv1.ServiceCIDR, *networkingv1.IPAddress:
	default:
		m := obj.(metav1.Object)
		if m.GetNamespace() != "" {
			t.Fatalf("manifest sets metadata.namespace")
		}
		m.SetNamespace("default")
	}
	// The server gives a Job its UID before defaulting generates its selector.
	if j, ok := obj.(*batchv1.Job); ok {
		j.UID = "9d1f6c3e-0d9b-4f7e-9a55-2b0c8a1f4e21"
	}
	return obj
}

// TestBadManifests checks every manifest of testdata/*.yaml (see
// validationtest) against Validate.
func TestBadManifests(t *testing.T) {
	manifests := validationtest.BadManifests(t, "testdata")
	if len(manifests) < 30 {
		t.Fatalf("only %d bad manifests, want at least 30", len(manifests))
	}
	kinds := map[string]bool{}
	names := map[string]bool{}
	for _, m := range manifests {
		t.Run(m.Name, func(t *testing.T) {
			if names[m.Name] {
				t.Fatalf("duplicate name")
			}
			names[m.Name] = true
			obj := decodeManifest(t, m.YAML)
			kinds[fmt.Sprintf("%T", obj)] = true
			Default(obj, DefaultConfig())
			checkOnly(t, Validate(obj, nil, DefaultConfig()), m.Field, m.Message)
		})
	}
	for _, k := range []string{"*v1.Service", "*v1.Pod", "*v1.Deployment", "*v1.Namespace", "*v1.Ingress",
		"*v1.ConfigMap", "*v1.Secret", "*v1.Endpoints", "*v1.EndpointSlice",
		"*v1.ReplicaSet", "*v1.ReplicationController", "*v1.StatefulSet", "*v1.DaemonSet", "*v1.Job"} {
		if !kinds[k] {
			t.Errorf("no bad manifest of kind %s", k)
		}
	}
}

// goodManifests are realistic manifests, most from the Kubernetes docs, that
// must pass once defaulted.
var goodManifests = map[string]string{
	// The NetworkPolicy of the Kubernetes documentation (and of the book).
	"test-network-policy": `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: test-network-policy
spec:
  podSelector:
    matchLabels:
      role: db
  policyTypes:
  - Ingress
  - Egress
  ingress:
  - from:
    - ipBlock:
        cidr: 172.17.0.0/16
        except:
        - 172.17.1.0/24
    - namespaceSelector:
        matchLabels:
          project: myproject
    - podSelector:
        matchLabels:
          role: frontend
    ports:
    - protocol: TCP
      port: 6379
  egress:
  - to:
    - ipBlock:
        cidr: 10.0.0.0/24
    ports:
    - protocol: TCP
      port: 5978
`,
	"multi-port-egress": `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: multi-port-egress
spec:
  podSelector:
    matchLabels:
      role: db
  policyTypes:
  - Egress
  egress:
  - to:
    - ipBlock:
        cidr: 10.0.0.0/24
    ports:
    - protocol: TCP
      port: 32000
      endPort: 32768
`,
	// The chapters' StatefulSet behind a headless Service (serviceName is
	// optional as of Kubernetes 1.37, so both forms are valid).
	"web-statefulset": `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  serviceName: nginx
  replicas: 2
  podManagementPolicy: Parallel
  updateStrategy:
    type: RollingUpdate
    rollingUpdate:
      partition: 1
  selector:
    matchLabels:
      app: nginx
  template:
    metadata:
      labels:
        app: nginx
    spec:
      containers:
      - name: nginx
        image: nginx
`,
	"statefulset-without-service-name": `apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
spec:
  selector:
    matchLabels:
      app: db
  template:
    metadata:
      labels:
        app: db
    spec:
      containers:
      - name: db
        image: nginx
`,
	"ingress-daemonset": `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: ingress
spec:
  updateStrategy:
    type: OnDelete
  selector:
    matchLabels:
      app: ingress
  template:
    metadata:
      labels:
        app: ingress
    spec:
      nodeSelector:
        kubernetes.io/os: linux
      tolerations:
      - key: node-role.kubernetes.io/control-plane
        effect: NoSchedule
      containers:
      - name: nginx
        image: nginx
`,
	"lookup-job": `apiVersion: batch/v1
kind: Job
metadata:
  name: lookup
spec:
  completions: 3
  parallelism: 2
  backoffLimit: 2
  activeDeadlineSeconds: 60
  ttlSecondsAfterFinished: 100
  template:
    spec:
      restartPolicy: OnFailure
      containers:
      - name: lookup
        image: busybox
        command: ["nslookup", "kubernetes.default"]
`,
	"frontend-replicaset": `apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: frontend
  labels:
    app: guestbook
    tier: frontend
spec:
  replicas: 3
  selector:
    matchLabels:
      tier: frontend
  template:
    metadata:
      labels:
        tier: frontend
    spec:
      containers:
      - name: php-redis
        image: us-docker.pkg.dev/google-samples/containers/gke/gb-frontend:v5
`,
	"nginx-replicationcontroller": `apiVersion: v1
kind: ReplicationController
metadata:
  name: nginx
spec:
  replicas: 3
  template:
    metadata:
      name: nginx
      labels:
        app: nginx
    spec:
      containers:
      - name: nginx
        image: nginx
        ports:
        - containerPort: 80
`,
	"nginx-deployment": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: nginx-deployment
  labels:
    app: nginx
spec:
  replicas: 3
  selector:
    matchLabels:
      app: nginx
  template:
    metadata:
      labels:
        app: nginx
    spec:
      containers:
      - name: nginx
        image: nginx:1.14.2
        ports:
        - containerPort: 80
        readinessProbe:
          httpGet:
            port: 80
        resources:
          limits:
            memory: 128Mi
`,
	"nodeport-service": `apiVersion: v1
kind: Service
metadata:
  name: my-service
spec:
  type: NodePort
  selector:
    app.kubernetes.io/name: MyApp
  ports:
  - port: 80
    targetPort: 80
    nodePort: 30007
`,
	"multi-port-service": `apiVersion: v1
kind: Service
metadata:
  name: my-service
spec:
  selector:
    app.kubernetes.io/name: MyApp
  ports:
  - name: http
    protocol: TCP
    port: 80
    targetPort: 9376
  - name: https
    protocol: TCP
    port: 443
    targetPort: 9377
`,
	"headless-service": `apiVersion: v1
kind: Service
metadata:
  name: nginx
spec:
  clusterIP: None
  selector:
    app: nginx
  ports:
  - port: 80
    name: web
`,
	"selectorless-headless-service": `apiVersion: v1
kind: Service
metadata:
  name: external-db
spec:
  clusterIP: None
`,
	"externalname-service": `apiVersion: v1
kind: Service
metadata:
  name: my-service
spec:
  type: ExternalName
  externalName: my.database.example.com.
`,
	"loadbalancer-local": `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  sessionAffinity: ClientIP
  loadBalancerSourceRanges:
  - 203.0.113.0/24
  selector:
    app: web
  ports:
  - port: 443
    targetPort: https
`,
	"pinned-cluster-ip": `apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  labels:
    k8s-app: kube-dns
spec:
  clusterIP: 10.96.0.10
  selector:
    k8s-app: kube-dns
  ports:
  - name: dns
    port: 53
    protocol: UDP
  - name: dns-tcp
    port: 53
    protocol: TCP
`,
	"pod-with-everything": `apiVersion: v1
kind: Pod
metadata:
  name: web-0
  labels:
    app: web
spec:
  hostname: web-0
  subdomain: web
  nodeSelector:
    kubernetes.io/os: linux
  tolerations:
  - key: node-role.kubernetes.io/control-plane
    operator: Exists
    effect: NoSchedule
  volumes:
  - name: config
    configMap:
      name: web
  - name: scratch
  containers:
  - name: web
    image: registry.example.com:5000/web@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
    env:
    - name: POD_IP
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
    ports:
    - name: http
      containerPort: 8080
    livenessProbe:
      httpGet:
        path: /healthz
        port: http
    startupProbe:
      exec:
        command: ["cat", "/tmp/ready"]
    volumeMounts:
    - name: config
      mountPath: /etc/web
    - name: scratch
      mountPath: /tmp
  initContainers:
  - name: wait
    image: busybox:1.36
    command: ["sh", "-c", "until nslookup db; do sleep 1; done"]
`,
	"ingress-fanout": `apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: simple-fanout-example
spec:
  ingressClassName: minikit
  tls:
  - hosts:
    - "*.foo.bar.com"
    secretName: foo-tls
  rules:
  - host: foo.bar.com
    http:
      paths:
      - path: /foo
        pathType: Prefix
        backend:
          service:
            name: service1
            port:
              number: 4200
      - path: /bar
        pathType: Exact
        backend:
          service:
            name: service2
            port:
              name: http
  - host: "*.foo.bar.com"
    http:
      paths:
      - pathType: ImplementationSpecific
        backend:
          service:
            name: service3
            port:
              number: 80
`,
	"ingressclass": `apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: minikit
  annotations:
    ingressclass.kubernetes.io/is-default-class: "true"
spec:
  controller: minikit.dev/ingress
`,
	"endpointslice": `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: example-abc
  labels:
    kubernetes.io/service-name: example
addressType: IPv4
ports:
- name: http
  protocol: TCP
  port: 80
endpoints:
- addresses:
  - "10.1.2.3"
  conditions:
    ready: true
  hostname: pod-1
  nodeName: node-1
  zone: us-west2-a
`,
	"endpoints": `apiVersion: v1
kind: Endpoints
metadata:
  name: my-service
subsets:
- addresses:
  - ip: 192.0.2.42
  notReadyAddresses:
  - ip: 192.0.2.43
  ports:
  - port: 9376
`,
	"tls-secret": `apiVersion: v1
kind: Secret
metadata:
  name: secret-tls
type: kubernetes.io/tls
data:
  tls.crt: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
  tls.key: LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCg==
`,
	"configmap": `apiVersion: v1
kind: ConfigMap
metadata:
  name: game-demo
data:
  player_initial_lives: "3"
  ui_properties_file_name: user-interface.properties
  game.properties: |
    enemy.types=aliens,monsters
`,
	"namespace": `apiVersion: v1
kind: Namespace
metadata:
  name: team-a
`,
	"node": `apiVersion: v1
kind: Node
metadata:
  name: node-1
  labels:
    kubernetes.io/hostname: node-1
spec:
  podCIDR: 10.244.1.0/24
  taints:
  - key: node-role.kubernetes.io/control-plane
    effect: NoSchedule
`,
	"event": `apiVersion: v1
kind: Event
metadata:
  name: web-0.17a3b2c1d0e9f8a7
involvedObject:
  kind: Pod
  namespace: default
  name: web-0
reason: Scheduled
message: Successfully assigned default/web-0 to node-1
type: Normal
source:
  component: default-scheduler
`,
}

func TestGoodManifests(t *testing.T) {
	for name, m := range goodManifests {
		t.Run(name, func(t *testing.T) {
			obj := decodeManifest(t, m)
			Default(obj, DefaultConfig())
			if errs := Validate(obj, nil, DefaultConfig()); len(errs) > 0 {
				t.Errorf("valid manifest rejected:\n%s", errorLines(errs))
			}
		})
	}
}

// TestGoodUpdates checks updates Kubernetes allows, after Default and
// PrepareForUpdate as the server runs them.
func TestGoodUpdates(t *testing.T) {
	nodePort := func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = 30080
	}
	tests := []struct {
		name     string
		old, obj runtime.Object
	}{
		{"pod image bumped", storedPod(), storedPod(func(p *corev1.Pod) { p.Spec.Containers[0].Image = "nginx:1.28" })},
		{"pod bound to a node", storedPod(), storedPod(func(p *corev1.Pod) { p.Spec.NodeName = "node-1" })},
		{"pod toleration added", storedPod(), storedPod(func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}
		})},
		{"pod deadline shortened", storedPod(func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr(int64(60)) }),
			storedPod(func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr(int64(30)) })},
		{"service replaced without its clusterIP", storedService(), service()},
		{"service ports changed", storedService(), storedService(func(s *corev1.Service) { s.Spec.Ports[0].Port = 8080 })},
		{"service to ExternalName", storedService(), with(storedService(), func(s *corev1.Service) {
			s.Spec.Type, s.Spec.ExternalName = corev1.ServiceTypeExternalName, "db.example.com"
		})},
		{"service from ExternalName", storedService(func(s *corev1.Service) {
			s.Spec.Type, s.Spec.ExternalName = corev1.ServiceTypeExternalName, "db.example.com"
		}), service()},
		{"service NodePort to ClusterIP", storedService(nodePort), with(storedService(nodePort), func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeClusterIP
		})},
		{"service NodePort keeps an out-of-range port it already has", storedService(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort = 8080 // allocated before the range shrank
		}), storedService(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort = 8080
			s.Labels = map[string]string{"tier": "front"}
		})},
		{"deployment scaled", deployment(), deployment(func(d *appsv1.Deployment) { d.Spec.Replicas = ptr(int32(5)) })},
		{"node gets its podCIDR", node(func(n *corev1.Node) { n.Spec.PodCIDRs = nil }), node()},
		{"secret data changed", secret(), secret(func(s *corev1.Secret) { s.Data["password"] = []byte("n3w") })},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			old := tc.old.DeepCopyObject()
			Default(old, cfg)
			obj := tc.obj.DeepCopyObject()
			// The server keeps the identity of the stored object.
			om, nm := old.(metav1.Object), obj.(metav1.Object)
			nm.SetUID(om.GetUID())
			nm.SetCreationTimestamp(om.GetCreationTimestamp())
			Default(obj, cfg)
			PrepareForUpdate(obj, old)
			if errs := Validate(obj, old, cfg); len(errs) > 0 {
				t.Errorf("valid update rejected:\n%s", errorLines(errs))
			}
		})
	}
}

func TestGoodObjects(t *testing.T) {
	objects := map[string]runtime.Object{
		"service":       service(),
		"pod":           pod(),
		"deployment":    deployment(),
		"ingress":       ingress(),
		"endpointslice": endpointSlice(),
		"secret":        secret(),
		"configmap":     configMap(),
		"ingressclass":  ingressClass(),
		"node":          node(),
		"event":         event(),
		"sidecar": pod(func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "proxy", Image: "envoy:1.30", RestartPolicy: ptr(corev1.ContainerRestartPolicyAlways),
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(15000)}}}}}
		}),
		"new-style event": event(func(e *corev1.Event) {
			e.EventTime = metav1.NewMicroTime(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
			e.ReportingController, e.ReportingInstance, e.Action = "minikit.dev/scheduler", "node-1", "Binding"
		}),
	}
	for name, obj := range objects {
		t.Run(name, func(t *testing.T) {
			Default(obj, DefaultConfig())
			if errs := Validate(obj, nil, DefaultConfig()); len(errs) > 0 {
				t.Errorf("valid object rejected:\n%s", errorLines(errs))
			}
		})
	}
}

func TestUnknownTypesPass(t *testing.T) {
	obj := &corev1.PersistentVolume{}
	Default(obj, DefaultConfig())
	if errs := Validate(obj, nil, DefaultConfig()); errs != nil {
		t.Errorf("unknown type validated: %v", errs)
	}
}

// TestErrorWording pins whole error strings as kubectl prints them.
func TestErrorWording(t *testing.T) {
	tests := []struct {
		obj  runtime.Object
		want string
	}{
		{
			service(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeNodePort
				s.Spec.Ports[0].NodePort = 8080
			}),
			"spec.ports[0].nodePort: Invalid value: 8080: provided port is not in the valid range. The range of valid ports is 30000-32767",
		},
		{
			service(func(s *corev1.Service) { s.Spec.Ports[0].Port = 0 }),
			"spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive",
		},
		{
			service(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort; s.Spec.ClusterIP = "None" }),
			`spec.clusterIP: Invalid value: "None": may not be set to 'None' for NodePort services`,
		},
		{
			service(func(s *corev1.Service) { s.Spec.ClusterIP = "10.0.0.1" }),
			`spec.clusterIP: Invalid value: "10.0.0.1": failed to allocate IP 10.0.0.1: provided IP is not in the valid range. The range of valid IPs is 10.96.0.0/12`,
		},
		{
			deployment(func(d *appsv1.Deployment) { d.Spec.Template.Labels = map[string]string{"app": "api"} }),
			`spec.template.metadata.labels: Invalid value: {"app":"api"}: ` + "`selector` does not match template `labels`",
		},
	}
	for _, tc := range tests {
		Default(tc.obj, DefaultConfig())
		errs := Validate(tc.obj, nil, DefaultConfig())
		if len(errs) != 1 || errs[0].Error() != tc.want {
			t.Errorf("got:\n%s\nwant:\n  %s", errorLines(errs), tc.want)
		}
	}
}

func TestZeroConfigMeansDefaults(t *testing.T) {
	s := service(func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = 8080
	})
	Default(s, Config{})
	checkOnly(t, Validate(s, nil, Config{}), "spec.ports[0].nodePort", "30000-32767")
}

func asJSON(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}
