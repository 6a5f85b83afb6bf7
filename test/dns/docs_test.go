package dnslab

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// kubectl runs the real kubectl against the lab, with extra environment.
func (e *env) kubectl(env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(e.ctx, "kubectl", append([]string{"--kubeconfig", e.l.Kubeconfig()}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// eventuallyKubectl polls a kubectl command until its output satisfies ok.
func (e *env) eventuallyKubectl(d time.Duration, ok func(string) bool, args ...string) string {
	e.t.Helper()
	var out string
	e.eventually("kubectl "+strings.Join(args, " "), d, func() (bool, string) {
		var err error
		out, err = e.kubectl(nil, args...)
		return err == nil && ok(out), fmt.Sprintf("%v: %s", err, out)
	})
	return out
}

// editCorefile is `kubectl -n kube-system edit configmap coredns` with an
// editor that applies change to the Corefile.
func (e *env) editCorefile(change func(string) string) {
	e.t.Helper()
	cm, err := e.c.CoreV1().ConfigMaps("kube-system").Get(e.ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	cm.Data["Corefile"] = change(cm.Data["Corefile"])
	cm.APIVersion, cm.Kind = "v1", "ConfigMap"
	b, err := yaml.Marshal(cm)
	if err != nil {
		e.t.Fatal(err)
	}
	dir := e.t.TempDir()
	edited := filepath.Join(dir, "coredns.yaml")
	if err := os.WriteFile(edited, b, 0o644); err != nil {
		e.t.Fatal(err)
	}
	if out, err := e.kubectl([]string{"KUBE_EDITOR=cp " + edited}, "-n", "kube-system", "edit", "configmap", "coredns"); err != nil ||
		!strings.Contains(out, "configmap/coredns edited") {
		e.t.Fatalf("kubectl edit configmap coredns: %v\n%s", err, out)
	}
}

// TestLabDNSDocs follows the Kubernetes docs' "Debug DNS Resolution" and
// "Customizing DNS Service" pages command by command: the coredns pods are
// listed and their logs read, the log plugin added through the ConfigMap
// shows the queries, and a stub domain and an upstream forward added through
// the ConfigMap answer once the kubelet has refreshed the mounted ConfigMap
// and the reload plugin has seen it.
func TestLabDNSDocs(t *testing.T) {
	e := up(t, "dnsd", 1)
	// "Check the local DNS configuration first".
	resolv, err := e.exec("client", "cat", "/etc/resolv.conf")
	if err != nil || !strings.Contains(resolv, "nameserver 10.96.0.10") || !strings.Contains(resolv, "options ndots:5") {
		t.Fatalf("resolv.conf (%v):\n%s", err, resolv)
	}
	e.expectDig([]string{"10.96.0.1"}, "+search", "kubernetes.default", "A")

	// "Check if the DNS pod is running".
	e.eventuallyKubectl(2*time.Minute, func(out string) bool {
		return strings.Count(out, "coredns-") == 2 && strings.Count(out, "1/1     Running") == 2
	}, "get", "pods", "--namespace=kube-system", "-l", "k8s-app=kube-dns")

	// "Check for errors in the DNS pod".
	logs := e.eventuallyKubectl(time.Minute, func(out string) bool {
		return strings.Contains(out, ".:53") && strings.Contains(out, "CoreDNS-")
	}, "logs", "--namespace=kube-system", "-l", "k8s-app=kube-dns")
	if strings.Contains(logs, "[ERROR]") {
		t.Errorf("coredns logs show errors:\n%s", logs)
	}

	// "Is DNS service up?" and "Are DNS endpoints exposed?"
	e.eventuallyKubectl(time.Minute, func(out string) bool {
		return strings.Contains(out, "kube-dns") && strings.Contains(out, "10.96.0.10") && strings.Contains(out, "53/UDP,53/TCP,9153/TCP")
	}, "get", "svc", "--namespace=kube-system")
	ips := e.dnsPodIPs()
	e.eventuallyKubectl(time.Minute, func(out string) bool {
		return strings.Contains(out, ips[0]) && strings.Contains(out, ips[1])
	}, "get", "endpointslices", "-l", "kubernetes.io/service-name=kube-dns", "--namespace=kube-system")

	// "Are DNS queries being received/processed?": add log to the Corefile.
	// A Consul-like server for the stub domain, and an upstream, both the
	// built-in coredns image in a pod of their own.
	upstream := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "consul-dns"}, Data: map[string]string{"Corefile": `consul.local:53 {
    hosts {
        10.150.0.7 web.consul.local
    }
}
.:53 {
    hosts {
        10.150.0.8 only.upstream.test
    }
}
`}}
	if _, err := e.c.CoreV1().ConfigMaps("default").Create(e.ctx, upstream, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	consul := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "consul-dns"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "coredns", Image: "registry.k8s.io/coredns/coredns:v1.12.0", Args: []string{"-conf", "/etc/coredns/Corefile"},
			VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns"}}}},
		Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "consul-dns"}}}}}}}
	if _, err := e.c.CoreV1().Pods("default").Create(e.ctx, consul, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitReadyPods(6)
	consulIP := e.podIPs["consul-dns"]
	e.expectDig([]string{"10.150.0.7"}, "@"+consulIP, "web.consul.local", "A")

	e.expectDig(nil, "only.upstream.test", "A")
	e.editCorefile(func(c string) string {
		c = strings.Replace(c, "    errors\n", "    log\n    errors\n", 1)
		c = strings.Replace(c, "forward . "+e.l.Addr(lab.External).String(), "forward . "+consulIP, 1)
		return c + "consul.local:53 {\n    errors\n    cache 30\n    forward . " + consulIP + "\n}\n"
	})
	// Within the kubelet's ConfigMap refresh and reload's interval.
	const reload = 3 * time.Minute
	e.eventually("stub domain consul.local", reload, func() (bool, string) {
		got, err := e.dig("web.consul.local", "A")
		return err == nil && len(got) == 1 && got[0] == "10.150.0.7", fmt.Sprintf("%v %v", got, err)
	})
	e.eventually("upstream forward", reload, func() (bool, string) {
		got, err := e.dig("only.upstream.test", "A")
		return err == nil && len(got) == 1 && got[0] == "10.150.0.8", fmt.Sprintf("%v %v", got, err)
	})
	// The log plugin shows the queries in the pods' logs.
	e.eventually("queries in the coredns logs", reload, func() (bool, string) {
		if _, err := e.dig("kubernetes.default.svc.cluster.local", "A"); err != nil {
			return false, err.Error()
		}
		out, err := e.kubectl(nil, "logs", "--namespace=kube-system", "-l", "k8s-app=kube-dns", "--tail=-1")
		return err == nil && strings.Contains(out, "[INFO] Reloading complete") &&
			strings.Contains(out, `"A IN kubernetes.default.svc.cluster.local. udp`), out
	})
}
