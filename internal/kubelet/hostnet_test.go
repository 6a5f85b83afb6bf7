package kubelet

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The pod's /etc/hosts, as the kubelet writes it (pkg/kubelet/kubelet_pods.go).
func TestPodHostsFile(t *testing.T) {
	const header = "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n"
	aliases := []corev1.HostAlias{{IP: "1.2.3.4", Hostnames: []string{"foo", "bar"}}}
	for _, tc := range []struct {
		name string
		spec corev1.PodSpec
		want string
	}{
		{"plain", corev1.PodSpec{}, header + "10.244.1.5\tweb\n"},
		{"hostname and subdomain", corev1.PodSpec{Hostname: "dns-querier-1", Subdomain: "dns-test-service"},
			header + "10.244.1.5\tdns-querier-1.dns-test-service.ns.svc.cluster.local\tdns-querier-1\n"},
		{"hostnameOverride", corev1.PodSpec{Hostname: "h", Subdomain: "s", HostnameOverride: ptr("override.example.host")},
			header + "10.244.1.5\toverride.example.host\n"},
		{"host aliases", corev1.PodSpec{HostAliases: aliases},
			header + "10.244.1.5\tweb\n\n# Entries added by HostAliases.\n1.2.3.4\tfoo\tbar\n"},
		{"host network", corev1.PodSpec{HostNetwork: true, NodeName: "node1", HostAliases: aliases},
			"# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n\n# Entries added by HostAliases.\n1.2.3.4\tfoo\tbar\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}, Spec: tc.spec}
			got := string(podHostsFile(pod, []string{"10.244.1.5"}, []byte("127.0.0.1 localhost\n")))
			if got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// An exec whose argv[0] is the image's own program runs the built-in image;
// anything else runs as it is.
func TestExecImageArgv(t *testing.T) {
	a := &Agent{cfg: Config{Executable: "/usr/bin/minikit"}}
	for _, tc := range []struct {
		image string
		argv  []string
		want  []string
	}{
		{"registry.k8s.io/e2e-test-images/agnhost:2.66.1", []string{"/agnhost", "dns-suffix"},
			[]string{"/usr/bin/minikit", "__image-run", "registry.k8s.io/e2e-test-images/agnhost", "dns-suffix"}},
		{"registry.k8s.io/e2e-test-images/agnhost:2.66.1", []string{"/bin/sh", "-c", "curl x"}, []string{"/bin/sh", "-c", "curl x"}},
		{"busybox", []string{"/agnhost", "dns-suffix"}, []string{"/agnhost", "dns-suffix"}},
	} {
		got := a.execImageArgv(tc.image, tc.argv)
		if len(got) != len(tc.want) {
			t.Errorf("%s %q: got %q, want %q", tc.image, tc.argv, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s %q: got %q, want %q", tc.image, tc.argv, got, tc.want)
				break
			}
		}
	}
}

func TestPodHostname(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec corev1.PodSpec
		want string
	}{
		{"name", corev1.PodSpec{}, "web"},
		{"hostname", corev1.PodSpec{Hostname: "h"}, "h"},
		{"override", corev1.PodSpec{Hostname: "h", Subdomain: "s", HostnameOverride: ptr("override.example.host")}, "override.example.host"},
		{"FQDN", corev1.PodSpec{Hostname: "h", Subdomain: "s", SetHostnameAsFQDN: ptr(true)}, "h.s.ns.svc.cluster.local"},
		{"FQDN without subdomain", corev1.PodSpec{SetHostnameAsFQDN: ptr(true)}, "web"},
		{"host network", corev1.PodSpec{HostNetwork: true, NodeName: "node1", Hostname: "h"}, "node1"},
		{"long", corev1.PodSpec{Hostname: strings.Repeat("a", 62) + "-b"}, strings.Repeat("a", 62)},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns"}, Spec: tc.spec}
		if got := podHostname(pod); got != tc.want {
			t.Errorf("%s: hostname %q, want %q", tc.name, got, tc.want)
		}
	}
}
