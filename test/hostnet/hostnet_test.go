// Package hostnet_test checks, in a lab, the pod features the sig-network
// conformance specs lean on: hostNetwork pods (serving on the node's port 80,
// resolving with dnsPolicy ClusterFirstWithHostNet), hostPorts (TCP and UDP, by the
// node's address and by 127.0.0.1), emptyDir volumes shared by a pod's
// containers, and $(VAR) expansion.
package hostnet_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

var ctx = context.Background()

const agnhost = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"

// kexec runs kubectl exec through the API server and the node agent, as the
// e2e framework does.
func kexec(t *testing.T, l *lab.Lab, pod, container string, argv ...string) (string, error) {
	t.Helper()
	args := []string{"--kubeconfig", l.Kubeconfig(), "exec", pod}
	if container != "" {
		args = append(args, "-c", container)
	}
	out, err := exec.Command("kubectl", append(append(args, "--"), argv...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func createReady(t *testing.T, c kubernetes.Interface, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return testenv.WaitPodReady(t, c, "default", p.Name)
}

func deletePod(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	zero := int64(0)
	if err := c.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "pod "+name+" gone", func() error {
		if _, err := c.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("still there")
		}
		return nil
	})
}

// netexecPod is the hostport spec's pod: agnhost netexec with one hostPort.
func netexecPod(name, hostIP string, proto corev1.Protocol, hostPort int32) *corev1.Pod {
	args, probePort := []string{"netexec", "--http-port=8080", "--udp-port=-1"}, int32(8080)
	if proto == corev1.ProtocolUDP {
		args, probePort = []string{"netexec", "--http-port=8008", "--udp-port=8080"}, 8008
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: "node1",
		Containers: []corev1.Container{{Name: "agnhost", Image: agnhost, Args: args,
			Ports: []corev1.ContainerPort{{ContainerPort: 8080, HostPort: hostPort, HostIP: hostIP, Protocol: proto}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/hostname", Port: intstr.FromInt32(probePort)}}}}}}}
}

func TestHostNetworkAndHostPorts(t *testing.T) {
	l := testenv.NewLab(t, 1)
	c := testenv.Client(t, l)
	nodeIP := l.Addr("node1").String()

	hn := createReady(t, c, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "hn"}, Spec: corev1.PodSpec{
		NodeName: "node1", HostNetwork: true,
		Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "infinity"}}}}})

	t.Run("a hostNetwork pod has the node's IP and network namespace", func(t *testing.T) {
		if hn.Status.PodIP != nodeIP || len(hn.Status.PodIPs) != 1 || hn.Status.PodIPs[0].IP != nodeIP {
			t.Fatalf("podIP %q podIPs %v, want the node's %s", hn.Status.PodIP, hn.Status.PodIPs, nodeIP)
		}
		out, err := kexec(t, l, "hn", "", "ip", "-o", "link", "show", "cni0")
		if err != nil || !strings.Contains(out, "cni0") {
			t.Fatalf("the pod does not see the node's cni0: %v: %q", err, out)
		}
		inPod, err := kexec(t, l, "hn", "", "readlink", "/proc/self/ns/net")
		if err != nil {
			t.Fatal(err)
		}
		onNode, err := testenv.Run(l, "node1", "readlink", "/proc/self/ns/net")
		if err != nil || inPod != onNode {
			t.Fatalf("pod netns %q, node netns %q (%v)", inPod, onNode, err)
		}
		hosts, err := kexec(t, l, "hn", "", "cat", "/etc/hosts")
		if err != nil || !strings.HasPrefix(hosts, "# Kubernetes-managed hosts file (host network).") || !strings.Contains(hosts, "localhost") {
			t.Fatalf("/etc/hosts of a hostNetwork pod: %v: %q", err, hosts)
		}
		if out, err := kexec(t, l, "hn", "", "hostname"); err != nil || out != "node1" {
			t.Fatalf("hostname %q (%v), want the node's name", out, err)
		}
	})

	t.Run("a hostNetwork pod serves on the node's port 80 and resolves with ClusterFirstWithHostNet", func(t *testing.T) {
		// The DNS HostNetwork spec's pod: agnhost test-webserver on port 80 of
		// the node, which the ingress controller leaves free as a kubeadm node
		// does, with the cluster DNS in its resolv.conf.
		kubeDNS, err := c.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		createReady(t, c, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "hn80"}, Spec: corev1.PodSpec{
			NodeName: "node1", HostNetwork: true, DNSPolicy: corev1.DNSClusterFirstWithHostNet,
			Containers: []corev1.Container{{Name: "webserver", Image: agnhost, Args: []string{"test-webserver"},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Path: "/etc/resolv.conf", Port: intstr.FromInt32(80)}}}}}}})
		want := "nameserver " + kubeDNS.Spec.ClusterIP + "\nsearch default.svc.cluster.local svc.cluster.local cluster.local"
		testutil.Eventually(t, 20*time.Second, "hn80's resolv.conf from the client host", func() error {
			out, err := testenv.Run(l, lab.Client, "curl", "-s", "--max-time", "2", "http://"+nodeIP+"/etc/resolv.conf")
			if err != nil || !strings.HasPrefix(out, want) || !strings.Contains(out, "options ndots:5") {
				return fmt.Errorf("%v: %q, want it to start with %q and set ndots:5", err, out, want)
			}
			return nil
		})
		deletePod(t, c, "hn80")
	})

	tcp := createReady(t, c, netexecPod("hp-tcp", "", corev1.ProtocolTCP, 54323))
	createReady(t, c, netexecPod("hp-udp", nodeIP, corev1.ProtocolUDP, 54323))
	createReady(t, c, netexecPod("hp-local", "127.0.0.1", corev1.ProtocolTCP, 54324))

	curl := func(host, url string) func() (string, error) {
		return func() (string, error) { return testenv.Run(l, host, "curl", "-s", "--max-time", "2", url) }
	}
	t.Run("TCP hostPort at the node's IP from the client host", func(t *testing.T) {
		answers(t, "hp-tcp via hostPort", "hp-tcp", curl(lab.Client, "http://"+nodeIP+":54323/hostname"))
	})
	t.Run("UDP hostPort at the node's IP from the client host", func(t *testing.T) {
		answers(t, "hp-udp via hostPort", "hp-udp", func() (string, error) {
			return testenv.Run(l, lab.Client, "sh", "-c", "echo hostname | nc -u -w 2 "+nodeIP+" 54323")
		})
	})
	t.Run("a UDP hostPort answers a client whose earlier datagrams found no mapping", func(t *testing.T) {
		// Same source port each time: without the conntrack entry of the
		// unanswered datagram deleted, the later ones would follow it past
		// the new DNAT for as long as they keep coming.
		nc := func() (string, error) {
			return testenv.Run(l, lab.Client, "sh", "-c", "echo hostname | nc -u -p 40001 -w 1 "+nodeIP+" 54325")
		}
		if out, err := nc(); err == nil && out != "" {
			t.Fatalf("port 54325 answered %q before any pod had it", out)
		}
		createReady(t, c, netexecPod("hp-udp2", "", corev1.ProtocolUDP, 54325))
		answers(t, "hp-udp2 via hostPort, same client port", "hp-udp2", nc)
	})
	t.Run("hostPort at 127.0.0.1 on the node, from a loopback source and from the node's address", func(t *testing.T) {
		answers(t, "hp-tcp via 127.0.0.1", "hp-tcp", curl("node1", "http://127.0.0.1:54323/hostname"))
		answers(t, "hp-local via 127.0.0.1", "hp-local", curl("node1", "http://127.0.0.1:54324/hostname"))
		// The hostport spec's form: from a hostNetwork pod, with the node's address as source.
		answers(t, "hp-local via 127.0.0.1 from hn", "hp-local", func() (string, error) {
			return kexec(t, l, "hn", "", "sh", "-c", "curl -s --max-time 2 --interface "+nodeIP+" http://127.0.0.1:54324/hostname")
		})
		// hostIP 127.0.0.1 is loopback only.
		if out, err := testenv.Run(l, lab.Client, "curl", "-s", "--max-time", "2", "http://"+nodeIP+":54324/hostname"); err == nil {
			t.Fatalf("hostIP 127.0.0.1 answered at the node's address: %q", out)
		}
	})
	t.Run("a pod reaches its own hostPort (hairpin)", func(t *testing.T) {
		answers(t, "hairpin", "hp-tcp", func() (string, error) {
			return kexec(t, l, "hp-tcp", "", "curl", "-s", "--max-time", "2", "http://"+nodeIP+":54323/hostname")
		})
	})
	t.Run("a second pod on a taken hostPort is rejected", func(t *testing.T) {
		dup := netexecPod("hp-dup", nodeIP, corev1.ProtocolTCP, 54323)
		if _, err := c.CoreV1().Pods("default").Create(ctx, dup, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 20*time.Second, "hp-dup rejected", func() error {
			p, err := c.CoreV1().Pods("default").Get(ctx, "hp-dup", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase != corev1.PodFailed || p.Status.Reason != "NodePorts" {
				return fmt.Errorf("phase %s reason %q message %q", p.Status.Phase, p.Status.Reason, p.Status.Message)
			}
			return nil
		})
		if out, err := curl(lab.Client, "http://"+nodeIP+":54323/hostname")(); err != nil || out != "hp-tcp" {
			t.Fatalf("after the rejection, the port answers %q (%v), want hp-tcp", out, err)
		}
	})
	t.Run("hostPort rules flushed by hand are repaired", func(t *testing.T) {
		if out, err := testenv.Run(l, "node1", "iptables", "-t", "nat", "-F", "MINIKIT-HOSTPORTS"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		answers(t, "hp-tcp via hostPort after the flush", "hp-tcp", curl(lab.Client, "http://"+nodeIP+":54323/hostname"))
	})
	t.Run("a deleted pod's hostPort rules go", func(t *testing.T) {
		deletePod(t, c, "hp-tcp")
		testutil.Eventually(t, 20*time.Second, "hp-tcp's rules gone", func() error {
			out, err := testenv.Run(l, "node1", "iptables-save", "-t", "nat")
			if err != nil {
				return err
			}
			if strings.Contains(out, "default/hp-tcp ") || strings.Contains(out, tcp.Status.PodIP+"/32") {
				return fmt.Errorf("still there:\n%s", out)
			}
			return nil
		})
		// The UDP pod and the loopback one keep theirs.
		answers(t, "hp-local after hp-tcp went", "hp-local", curl("node1", "http://127.0.0.1:54324/hostname"))
	})
	t.Run("deleting a hostNetwork pod leaves the node's network alone", func(t *testing.T) {
		deletePod(t, c, "hn")
		out, err := testenv.Run(l, "node1", "ip", "-o", "addr", "show")
		if err != nil || !strings.Contains(out, nodeIP+"/") || !strings.Contains(out, "cni0") {
			t.Fatalf("node1's addresses after deleting hn: %v: %q", err, out)
		}
	})
}

// answers polls probe until its output is w ("" accepts any output).
func answers(t *testing.T, what, w string, probe func() (string, error)) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, what, func() error {
		out, err := probe()
		if err != nil {
			return fmt.Errorf("%v: %q", err, out)
		}
		if (w == "" && out != "") || out == w {
			return nil
		}
		return fmt.Errorf("answered %q, want %q", out, w)
	})
}

// Containers of one pod share an emptyDir; $(VAR) in command and args expands
// the container's env, and $$ is a literal $.
func TestEmptyDirAndExpansion(t *testing.T) {
	l := testenv.NewLab(t, 1)
	c := testenv.Client(t, l)
	mounts := []corev1.VolumeMount{{Name: "shared", MountPath: "/minikit-test-shared"}}
	p := createReady(t, c, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "vol"}, Spec: corev1.PodSpec{NodeName: "node1",
		Volumes: []corev1.Volume{{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		Containers: []corev1.Container{
			{Name: "writer", Image: "busybox", VolumeMounts: mounts, Env: []corev1.EnvVar{{Name: "WHO", Value: "writer"}, {Name: "GREETING", Value: "hello-$(WHO)"}},
				Command: []string{"sh", "-c", `echo "$(GREETING) $$(echo dollar)" '$(UNDEFINED)' > /minikit-test-shared/f; exec sleep infinity`}},
			{Name: "reader", Image: "busybox", VolumeMounts: mounts, Command: []string{"sleep", "infinity"}},
		}}})
	testutil.Eventually(t, 20*time.Second, "reader sees writer's file", func() error {
		out, err := kexec(t, l, "vol", "reader", "cat", "/minikit-test-shared/f")
		if err != nil {
			return fmt.Errorf("%v: %q", err, out)
		}
		if out != "hello-writer dollar $(UNDEFINED)" {
			return fmt.Errorf("file holds %q", out)
		}
		return nil
	})
	// The volume is the pod's, not the node's: the node's directory stays empty.
	if out, err := testenv.Run(l, "node1", "ls", "-A", "/minikit-test-shared"); err != nil || out != "" {
		t.Fatalf("the node sees %q in the mount point (%v)", out, err)
	}
	dir := l.Dir() + "/node1/agent/pods/" + string(p.UID) + "/volumes/shared"
	if out, err := exec.Command("cat", dir+"/f").CombinedOutput(); err != nil {
		t.Fatalf("emptyDir not in the pod's directory %s: %v: %s", dir, err, out)
	}
	deletePod(t, c, "vol")
	testutil.Eventually(t, 20*time.Second, "emptyDir removed with its pod", func() error {
		if out, err := exec.Command("ls", dir).CombinedOutput(); err == nil {
			return fmt.Errorf("%s still holds %q", dir, out)
		}
		return nil
	})
}
