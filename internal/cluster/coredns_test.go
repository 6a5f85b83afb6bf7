package cluster

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// The server's DNS flags shape kubeadm's default Corefile.
func TestCorefile(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  DNSConfig
		want []string
	}{
		{"defaults", DNSConfig{}, []string{"kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n       fallthrough in-addr.arpa ip6.arpa\n       ttl 30\n",
			"forward . /etc/resolv.conf {", "health {\n       lameduck 5s\n", "    ready\n", "prometheus :9153", "    reload\n", "    loop\n", "    loadbalance\n",
			"disable success cluster.local"}},
		{"flags", DNSConfig{Zone: "lab.local", Pods: "verified", Upstream: []string{"192.168.56.1", "10.0.0.1:5353"}, Autopath: true},
			[]string{"kubernetes lab.local in-addr.arpa ip6.arpa {\n       pods verified\n", "forward . 192.168.56.1 10.0.0.1:5353 {", "autopath @kubernetes"}},
	} {
		got := Corefile(c.cfg)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: Corefile lacks %q:\n%s", c.name, w, got)
			}
		}
	}
}

// ensureCoreDNS creates kubeadm's objects once, keeps a user's Corefile, and
// turns the selector-less kube-dns of the node listeners into the pods'.
func TestEnsureCoreDNS(t *testing.T) {
	ctx := context.Background()
	ip := netip.MustParseAddr("10.96.0.10")
	old := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10", Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}}}
	listener := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns-node1",
		Labels: map[string]string{discoveryv1.LabelManagedBy: "minikit-dns", discoveryv1.LabelServiceName: "kube-dns"}}}
	c := fake.NewClientset(old, listener)
	if err := ensureCoreDNS(ctx, c, DNSConfig{}, ip, ""); err != nil {
		t.Fatal(err)
	}
	svc, _ := c.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if svc.Spec.Selector["k8s-app"] != "kube-dns" || len(svc.Spec.Ports) != 3 {
		t.Errorf("kube-dns selector %v ports %v", svc.Spec.Selector, svc.Spec.Ports)
	}
	if sl, _ := c.DiscoveryV1().EndpointSlices("kube-system").List(ctx, metav1.ListOptions{}); len(sl.Items) != 0 {
		t.Errorf("the node listeners' slices remain: %v", sl.Items)
	}
	dep, err := c.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := dep.Spec.Template.Spec
	if dep.Spec.Template.Labels["k8s-app"] != "kube-dns" || spec.ServiceAccountName != "coredns" || spec.DNSPolicy != corev1.DNSDefault ||
		spec.Containers[0].Image != "registry.k8s.io/coredns/coredns:v1.12.0" || spec.Volumes[0].ConfigMap.Name != "coredns" {
		t.Errorf("deployment coredns: %+v", dep.Spec.Template)
	}
	for _, get := range []func() error{
		func() error {
			_, err := c.CoreV1().ServiceAccounts("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := c.RbacV1().ClusterRoles().Get(ctx, "system:coredns", metav1.GetOptions{})
			return err
		},
		func() error {
			_, err := c.RbacV1().ClusterRoleBindings().Get(ctx, "system:coredns", metav1.GetOptions{})
			return err
		},
	} {
		if err := get(); err != nil {
			t.Error(err)
		}
	}
	cm, _ := c.CoreV1().ConfigMaps("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	cm.Data["Corefile"] = ".:53 {\n    log\n}\n"
	if _, err := c.CoreV1().ConfigMaps("kube-system").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := ensureCoreDNS(ctx, c, DNSConfig{}, ip, ""); err != nil {
		t.Fatal(err)
	}
	if cm, _ := c.CoreV1().ConfigMaps("kube-system").Get(ctx, "coredns", metav1.GetOptions{}); cm.Data["Corefile"] != ".:53 {\n    log\n}\n" {
		t.Errorf("a restart rewrote the edited Corefile:\n%s", cm.Data["Corefile"])
	}
}

// With a loopback-only API the add-on's one pod runs on the node's network,
// binds the node's address and reaches the API at its loopback URL.
func TestCoreDNSOnLoopbackAPI(t *testing.T) {
	_, _, _, cm, dep, svc := coreDNSObjects(DNSConfig{}, netip.MustParseAddr("10.96.0.10"), "http://127.0.0.1:6443")
	spec := dep.Spec.Template.Spec
	if *dep.Spec.Replicas != 1 || !spec.HostNetwork || spec.DNSPolicy != corev1.DNSDefault {
		t.Errorf("replicas %d hostNetwork %v dnsPolicy %s, want 1, true, Default", *dep.Spec.Replicas, spec.HostNetwork, spec.DNSPolicy)
	}
	env := spec.Containers[0].Env
	if len(env) != 1 || env[0].Name != "POD_IP" || env[0].ValueFrom.FieldRef.FieldPath != "status.podIP" {
		t.Errorf("env %+v, want POD_IP from status.podIP", env)
	}
	for _, p := range spec.Containers[0].Ports {
		if p.HostPort != p.ContainerPort {
			t.Errorf("port %s: hostPort %d, want %d", p.Name, p.HostPort, p.ContainerPort)
		}
	}
	for _, w := range []string{".:53 {\n    bind {$POD_IP}\n", "kubernetes cluster.local in-addr.arpa ip6.arpa {\n       endpoint http://127.0.0.1:6443\n       pods insecure\n"} {
		if !strings.Contains(cm.Data["Corefile"], w) {
			t.Errorf("Corefile lacks %q:\n%s", w, cm.Data["Corefile"])
		}
	}
	if svc.Spec.Selector["k8s-app"] != "kube-dns" {
		t.Errorf("kube-dns selector %v", svc.Spec.Selector)
	}
	// Off loopback: kubeadm's two replicas in their own network, in-cluster.
	_, _, _, cm, dep, _ = coreDNSObjects(DNSConfig{}, netip.MustParseAddr("10.96.0.10"), "")
	if *dep.Spec.Replicas != 2 || dep.Spec.Template.Spec.HostNetwork || strings.Contains(cm.Data["Corefile"], "bind") || strings.Contains(cm.Data["Corefile"], "endpoint") {
		t.Errorf("off loopback: replicas %d hostNetwork %v Corefile:\n%s", *dep.Spec.Replicas, dep.Spec.Template.Spec.HostNetwork, cm.Data["Corefile"])
	}
}
