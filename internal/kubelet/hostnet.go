package kubelet

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/minikit/minikit/internal/cni"
	"github.com/minikit/minikit/internal/images"
	"github.com/minikit/minikit/internal/netns"

	corev1 "k8s.io/api/core/v1"
)

// hostNetwork pods, as the kubelet runs them: their containers share the
// node's network namespace (no pod netns, no veth, no pod IP: status.podIP is
// the node's InternalIP), and /etc/hosts is the node's own file under the
// kubelet's "(host network)" header. They still get their own mount namespace
// (for their /etc/hosts, /etc/resolv.conf and volumes) and UTS namespace,
// whose hostname is the node's name: on a real node a hostNetwork container
// shares the machine's UTS namespace, and the machine is called what its Node
// is, but the nodes of a lab are network namespaces of one machine and would
// all show that machine's hostname.

// etcHosts is the node's hosts file, which hostNetwork pods get a copy of.
const etcHosts = "/etc/hosts"

// hostIP is the node's address as pods see it (status.hostIP).
func (a *Agent) hostIP() string {
	if a.cfg.NodeIP.IsValid() {
		return a.cfg.NodeIP.String()
	}
	return ""
}

// hostNetNSPath is the network namespace file hostNetwork pods enter: the
// node's named namespace, or "" (stay in the agent's own, which is the node's)
// when the agent runs inside it.
func (a *Agent) hostNetNSPath() string {
	if a.cfg.HostNS != "" {
		return netns.NetNSPath(a.cfg.HostNS)
	}
	return ""
}

// podNetNSPath is the network namespace file the processes of the pod whose
// sandbox is called name enter.
func (a *Agent) podNetNSPath(name string, hostNetwork bool) string {
	if hostNetwork {
		return a.hostNetNSPath()
	}
	return netns.NetNSPath(name)
}

// execArgv wraps argv to run in the pod's namespaces.
func (w *podWorker) execArgv(argv []string) []string {
	ns := w.state.NetNS
	return cni.ExecArgv(w.a.podNetNSPath(ns, w.state.HostNetwork), cni.PodUTSPath(ns), cni.PodMntPath(ns), argv)
}

// netnsPath is the network namespace file of a streaming request's pod (the
// node's for a hostNetwork pod: "" means the agent's own).
func (t *streamTarget) netnsPath() string {
	return t.a.podNetNSPath(t.netns, t.pod.Spec.HostNetwork)
}

// podHostsFile is the pod's /etc/hosts as the kubelet writes it: for a
// hostNetwork pod the node's file, else localhost entries and the pod's own
// name (its FQDN first when it has a subdomain); host aliases follow.
func podHostsFile(pod *corev1.Pod, ips []string, nodeHosts []byte) []byte {
	var b bytes.Buffer
	if pod.Spec.HostNetwork {
		b.WriteString("# Kubernetes-managed hosts file (host network).\n")
		b.Write(nodeHosts)
	} else {
		host, domain := podHostnameDomain(pod)
		b.WriteString("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" +
			"fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n")
		for _, ip := range ips {
			if domain != "" {
				fmt.Fprintf(&b, "%s\t%s.%s\t%s\n", ip, host, domain, host)
			} else {
				fmt.Fprintf(&b, "%s\t%s\n", ip, host)
			}
		}
	}
	if len(pod.Spec.HostAliases) > 0 {
		b.WriteString("\n# Entries added by HostAliases.\n")
		for _, ha := range pod.Spec.HostAliases {
			fmt.Fprintf(&b, "%s\t%s\n", ha.IP, strings.Join(ha.Hostnames, "\t"))
		}
	}
	return b.Bytes()
}

// nodeHostsFile reads the node's /etc/hosts for hostNetwork pods.
func nodeHostsFile() ([]byte, error) {
	b, err := os.ReadFile(etcHosts)
	if err != nil {
		return nil, fmt.Errorf("reading the node's %s for a hostNetwork pod: %w", etcHosts, err)
	}
	return b, nil
}

// execImageArgv is what an exec of argv in a container of image runs: when
// argv[0] is the image's own program (its entrypoint, "/agnhost" for agnhost)
// the built-in image, through the minikit binary as containers start; else
// argv itself, from the node's file system.
func (a *Agent) execImageArgv(image string, argv []string) []string {
	if len(argv) == 0 {
		return argv
	}
	plan, ok := images.ResolveExec(image, argv)
	if !ok {
		return argv
	}
	return append([]string{a.cfg.Executable, "__image-run", plan.Name}, plan.Argv...)
}
