package cluster

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/minikit/minikit/internal/dns"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// The cluster DNS add-on, as kubeadm installs it (its CoreDNS manifests):
// the ServiceAccount, ClusterRole and ClusterRoleBinding system:coredns, the
// ConfigMap coredns holding the Corefile, the Deployment coredns whose pods
// run the built-in coredns image, and the kube-dns Service selecting them.
// Every server ensures the objects at start; an object that exists is left
// as it is (a user's edits of the Corefile survive restarts), except that a
// kube-dns Service without a selector (the node listeners of minikit before
// the add-on) gets the selector.
//
// Where the pods run depends on where the API listens. Off loopback (labs,
// HA, agents) they are kubeadm's: two replicas in pods' own network
// namespaces, reaching the API through the kubernetes Service with their
// service account. A loopback-only API (plain `minikit server`) is plain
// HTTP without a token, on purpose reachable from the node's own network
// namespace only: the kubernetes Service has no endpoint a pod could use,
// and exposing that API to pods would hand them the cluster (their commands
// run as root on the host). There the Deployment has one replica with
// hostNetwork: true, its Corefile's kubernetes plugin names the API's
// loopback URL as its endpoint, as any process of the node may use it, and
// `bind {$POD_IP}` (the downward API's status.podIP, the node's InternalIP)
// keeps port 53 off every other address, systemd-resolved's 127.0.0.53
// among them. kube-dns then selects that pod, whose endpoint is the node.
const (
	coreDNSName      = "coredns"
	kubeDNSName      = "kube-dns"
	kubeSystem       = "kube-system"
	coreDNSImage     = "registry.k8s.io/coredns/coredns:v1.12.0"
	coreDNSReplicas  = 2
	coreDNSConfigKey = "Corefile"
)

var coreDNSLabels = map[string]string{"k8s-app": "kube-dns"}

// Corefile renders kubeadm's default Corefile with the server's DNS flags:
// --cluster-domain, --dns-pod-records (pods), the TTL, --dns-upstream
// (forward to those resolvers instead of the pod's /etc/resolv.conf, which
// is the node's under dnsPolicy Default) and autopath.
func Corefile(o DNSConfig) string { return corefile(o, "") }

// corefile is Corefile for pods on the node's network, reaching the API at
// the loopback URL hostAPI ("": pods of their own network, in-cluster).
func corefile(o DNSConfig, hostAPI string) string {
	zone := o.Zone
	if zone == "" {
		zone = "cluster.local"
	}
	pods := o.Pods
	if pods == "" {
		pods = "insecure"
	}
	ttl := o.TTL
	if ttl == 0 {
		ttl = 30
	}
	forward := "/etc/resolv.conf"
	if len(o.Upstream) > 0 {
		forward = strings.Join(o.Upstream, " ")
	}
	var b strings.Builder
	fmt.Fprintf(&b, ".:53 {\n")
	if hostAPI != "" {
		fmt.Fprintf(&b, "    bind {$POD_IP}\n")
	}
	fmt.Fprintf(&b, "    errors\n    health {\n       lameduck 5s\n    }\n    ready\n")
	fmt.Fprintf(&b, "    kubernetes %s in-addr.arpa ip6.arpa {\n", zone)
	if hostAPI != "" {
		fmt.Fprintf(&b, "       endpoint %s\n", hostAPI)
	}
	fmt.Fprintf(&b, "       pods %s\n       fallthrough in-addr.arpa ip6.arpa\n       ttl %d\n    }\n", pods, ttl)
	if o.Autopath {
		fmt.Fprintf(&b, "    autopath @kubernetes\n")
	}
	fmt.Fprintf(&b, "    prometheus :9153\n    forward . %s {\n       max_concurrent 1000\n    }\n", forward)
	fmt.Fprintf(&b, "    cache 30 {\n       disable success %s\n       disable denial %s\n    }\n    loop\n    reload\n    loadbalance\n}\n", zone, zone)
	return b.String()
}

// coreDNSObjects are the add-on's objects for a cluster whose kube-dns
// ClusterIP is clusterIP; hostAPI is the URL of a loopback-only API ("" for
// an API off loopback).
func coreDNSObjects(o DNSConfig, clusterIP netip.Addr, hostAPI string) (sa *corev1.ServiceAccount, role *rbacv1.ClusterRole, binding *rbacv1.ClusterRoleBinding,
	cm *corev1.ConfigMap, dep *appsv1.Deployment, svc *corev1.Service) {
	sa = &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: kubeSystem, Name: coreDNSName}}
	role = &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
	}}
	binding = &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:coredns"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: kubeSystem, Name: coreDNSName}}}
	cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: kubeSystem, Name: coreDNSName},
		Data: map[string]string{coreDNSConfigKey: corefile(o, hostAPI)}}
	probe := func(path string, port int32) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(port), Scheme: corev1.URISchemeHTTP}},
			PeriodSeconds: 10, TimeoutSeconds: 5, SuccessThreshold: 1, FailureThreshold: 5}
	}
	live := probe("/health", 8080)
	live.InitialDelaySeconds = 60
	ready := probe("/ready", 8181)
	ready.PeriodSeconds, ready.FailureThreshold = 2, 3
	dep = &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: kubeSystem, Name: coreDNSName, Labels: coreDNSLabels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](coreDNSReplicas),
			Selector: &metav1.LabelSelector{MatchLabels: coreDNSLabels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: ptr.To(intstr.FromInt32(1)), MaxSurge: ptr.To(intstr.FromString("25%"))}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: coreDNSLabels},
				Spec: corev1.PodSpec{
					ServiceAccountName: coreDNSName,
					DNSPolicy:          corev1.DNSDefault,
					NodeSelector:       map[string]string{"kubernetes.io/os": "linux"},
					Tolerations: []corev1.Toleration{{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
						{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}},
					Containers: []corev1.Container{{
						Name: coreDNSName, Image: coreDNSImage, ImagePullPolicy: corev1.PullIfNotPresent,
						Args:         []string{"-conf", "/etc/coredns/Corefile"},
						VolumeMounts: []corev1.VolumeMount{{Name: "config-volume", MountPath: "/etc/coredns", ReadOnly: true}},
						Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
							{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
							{Name: "metrics", ContainerPort: 9153, Protocol: corev1.ProtocolTCP}},
						LivenessProbe: live, ReadinessProbe: ready,
					}},
					Volumes: []corev1.Volume{{Name: "config-volume", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: coreDNSName},
						Items:                []corev1.KeyToPath{{Key: coreDNSConfigKey, Path: coreDNSConfigKey}}}}}},
				},
			},
		}}
	if hostAPI != "" {
		spec := &dep.Spec.Template.Spec
		dep.Spec.Replicas = ptr.To[int32](1)
		spec.HostNetwork = true
		spec.DNSPolicy = corev1.DNSDefault
		// Port 53 of the node is the pod's: a second pod on the node could
		// not bind it, so a rollout replaces the pod rather than surging.
		dep.Spec.Strategy.RollingUpdate.MaxSurge = ptr.To(intstr.FromInt32(0))
		ctr := &spec.Containers[0]
		ctr.Env = []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "status.podIP"}}}}
		for i := range ctr.Ports {
			ctr.Ports[i].HostPort = ctr.Ports[i].ContainerPort
		}
	}
	svc = &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: kubeSystem, Name: kubeDNSName,
			Labels:      map[string]string{"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"},
			Annotations: map[string]string{"prometheus.io/port": "9153", "prometheus.io/scrape": "true"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Selector: coreDNSLabels, ClusterIP: clusterIP.String(),
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
				{Name: "metrics", Port: 9153, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(9153)},
			}},
	}
	return
}

// startCoreDNSAddon ensures the add-on's objects, retrying until they exist
// or ctx ends (unless --disable-dns).
func startCoreDNSAddon(ctx context.Context, wg *sync.WaitGroup, sc serverContext) error {
	if sc.DNS.Disabled {
		return nil
	}
	if _, err := coreDNSUpstreams(sc.DNS); err != nil {
		return err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		log := sc.Logger.With("component", "dns-addon")
		for backoff := 200 * time.Millisecond; ; backoff = min(2*backoff, 5*time.Second) {
			err := ensureCoreDNS(ctx, sc.Client, sc.DNS, ClusterDNSIP(sc.ServiceCIDR), sc.LoopbackAPI)
			if err == nil {
				return
			}
			log.Warn("installing the coredns add-on", "err", err)
			if !sleepCtx(ctx, backoff) {
				return
			}
		}
	}()
	return nil
}

func coreDNSUpstreams(o DNSConfig) ([]netip.AddrPort, error) {
	var ups []netip.AddrPort
	for _, s := range o.Upstream {
		ap, err := dns.ParseUpstream(s)
		if err != nil {
			return nil, fmt.Errorf("--dns-upstream: %w", err)
		}
		ups = append(ups, ap)
	}
	return ups, nil
}

func ensureCoreDNS(ctx context.Context, c kubernetes.Interface, o DNSConfig, clusterIP netip.Addr, hostAPI string) error {
	sa, role, binding, cm, dep, svc := coreDNSObjects(o, clusterIP, hostAPI)
	create := func(what string, err error) error {
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s: %w", what, err)
		}
		return nil
	}
	if err := create("serviceaccount kube-system/coredns", ignoreObj(c.CoreV1().ServiceAccounts(kubeSystem).Create(ctx, sa, metav1.CreateOptions{}))); err != nil {
		return err
	}
	if err := create("clusterrole system:coredns", ignoreObj(c.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}))); err != nil {
		return err
	}
	if err := create("clusterrolebinding system:coredns", ignoreObj(c.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}))); err != nil {
		return err
	}
	if err := create("configmap kube-system/coredns", ignoreObj(c.CoreV1().ConfigMaps(kubeSystem).Create(ctx, cm, metav1.CreateOptions{}))); err != nil {
		return err
	}
	if err := create("deployment kube-system/coredns", ignoreObj(c.AppsV1().Deployments(kubeSystem).Create(ctx, dep, metav1.CreateOptions{}))); err != nil {
		return err
	}
	cur, err := c.CoreV1().Services(kubeSystem).Get(ctx, kubeDNSName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return create("service kube-system/kube-dns", ignoreObj(c.CoreV1().Services(kubeSystem).Create(ctx, svc, metav1.CreateOptions{})))
	case err != nil:
		return err
	case len(cur.Spec.Selector) == 0:
		// The Service of the node listeners: select the pods, drop the
		// listeners' own slices.
		cur.Spec.Selector = coreDNSLabels
		cur.Spec.Ports = svc.Spec.Ports
		if _, err := c.CoreV1().Services(kubeSystem).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("updating service kube-system/kube-dns: %w", err)
		}
		sl, err := c.DiscoveryV1().EndpointSlices(kubeSystem).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelManagedBy + "=minikit-dns"})
		if err != nil {
			return err
		}
		for _, s := range sl.Items {
			if err := c.DiscoveryV1().EndpointSlices(kubeSystem).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting endpointslice kube-system/%s: %w", s.Name, err)
			}
		}
	}
	return nil
}

func ignoreObj[T any](_ T, err error) error { return err }
