package lab

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// APIPort is where a lab's server listens on its node address.
const APIPort = 6443

// startNodes runs `minikit server` on node1 (and, with Servers > 1, on the
// next nodes, joining node1's HA control plane) and `minikit agent` on the
// others, with the same flags a Vagrant VM uses, then the loopback
// forwarder, and waits until every node is Ready.
func (l *Lab) startNodes(ctx context.Context) error {
	dir1 := filepath.Join(l.cfg.Dir, nodeName(1))
	var etcdFlags []string
	if l.cfg.Datastore == "etcd" {
		var err error
		if etcdFlags, err = l.startEtcd(ctx); err != nil {
			return err
		}
	}
	if err := l.start(nodeName(1), "minikit server", l.nodeArgs(1, etcdFlags)...); err != nil {
		return err
	}
	// The server writes its token and CA before it serves.
	token, err := waitFile(ctx, filepath.Join(dir1, "token"))
	if err != nil {
		return fmt.Errorf("waiting for the server on %s: %w (see %s)", nodeName(1), err, filepath.Join(l.cfg.Dir, nodeName(1)+".log"))
	}
	if _, err := waitFile(ctx, filepath.Join(dir1, "kubeconfig")); err != nil {
		return fmt.Errorf("waiting for the server's kubeconfig: %w", err)
	}
	if err := l.startForwarder(l.apiServers()); err != nil {
		return err
	}
	ca, err := os.ReadFile(l.caFile())
	if err != nil {
		return err
	}
	fwd := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(l.state.APIPort))
	if err := l.writeKubeconfig(fwd, strings.TrimSpace(token), ca); err != nil {
		return err
	}
	// Each node registers before the next one starts, so node1 gets the
	// first pod range (10.244.0.0/24), node2 the second, and so on: the
	// layout the book and the examples draw, whichever process would have
	// been faster.
	if err := l.waitPodCIDR(ctx, nodeName(1)); err != nil {
		return err
	}
	for i := 2; i <= l.cfg.Nodes; i++ {
		h := nodeName(i)
		role := "minikit agent"
		if i <= l.cfg.Servers {
			role = "minikit server"
		}
		if err := l.start(h, role, l.nodeArgs(i, nil)...); err != nil {
			return err
		}
		if err := l.waitPodCIDR(ctx, h); err != nil {
			return err
		}
	}
	if err := l.WaitReady(ctx); err != nil {
		return err
	}
	return l.waitClusterDNS(ctx)
}

// waitClusterDNS waits until the cluster DNS answers for pods: the
// kube-system/coredns Deployment the server installs has all its replicas
// available and the kube-dns Service a ready endpoint, as `kind create
// cluster --wait` waits for its control plane before the first `kubectl
// run` and nslookup. Until then a pod's resolver gets no answer.
func (l *Lab) waitClusterDNS(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	last := "no coredns Deployment yet"
	for {
		if client, err := l.Client(); err != nil {
			last = err.Error()
		} else if ok, why := clusterDNSReady(ctx, client); ok {
			return nil
		} else {
			last = why
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the cluster DNS (kube-system/coredns): %s", last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// clusterDNSReady says whether kube-system/coredns has every replica
// available and kube-dns a ready endpoint, and if not, why.
func clusterDNSReady(ctx context.Context, client kubernetes.Interface) (bool, string) {
	d, err := client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	if d.Status.AvailableReplicas < want {
		return false, fmt.Sprintf("coredns: %d of %d replicas available", d.Status.AvailableReplicas, want)
	}
	sl, err := client.DiscoveryV1().EndpointSlices("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kube-dns"})
	if err != nil {
		return false, err.Error()
	}
	for _, s := range sl.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				return true, ""
			}
		}
	}
	return false, "kube-dns has no ready endpoint"
}

// apiServers are the host:port of every server's API, node1's first.
func (l *Lab) apiServers() []string {
	var servers []string
	for i := 1; i <= l.cfg.Servers; i++ {
		servers = append(servers, net.JoinHostPort(l.Addr(nodeName(i)).String(), strconv.Itoa(APIPort)))
	}
	return servers
}

// caFile is the cluster CA that node1's server writes, which agents pin.
func (l *Lab) caFile() string { return filepath.Join(l.cfg.Dir, nodeName(1), "tls", "ca.crt") }

// nodeArgs is the command line of node i, with the flags a Vagrant VM's
// would have: node1 runs `minikit server` (--cluster-init when the lab has
// several servers, etcdFlags with an external etcd), the next Servers-1
// nodes `minikit server --join` node1, and the others `minikit agent`
// pointing at every server.
func (l *Lab) nodeArgs(i int, etcdFlags []string) []string {
	h := nodeName(i)
	dir1 := filepath.Join(l.cfg.Dir, nodeName(1))
	nodeIP := l.Addr(h).String()
	switch l.cfg.IPFamily {
	case IPFamilyDual:
		nodeIP += "," + l.Addr6(h).String()
	case IPFamilyIPv6:
		nodeIP = l.Addr6(h).String()
	}
	common := []string{"--data-dir", filepath.Join(l.cfg.Dir, h), "--node-name", h, "--node-ip", nodeIP}
	modes := []string{"--dns-upstream", l.Addr(External).String(), "--proxy-mode", l.cfg.ProxyMode, "--pod-network", l.cfg.PodNetwork}
	var urls []string
	for _, s := range l.apiServers() {
		urls = append(urls, "https://"+s)
	}
	if i > l.cfg.Servers {
		args := append([]string{l.cfg.Binary, "agent", "--server", strings.Join(urls, ","),
			"--token-file", filepath.Join(dir1, "token"), "--ca-file", l.caFile()}, common...)
		return append(append(args, modes...), l.cidrArgs()...)
	}
	listen, advertise := "0.0.0.0", l.Addr(h).String()
	if l.cfg.IPFamily == IPFamilyIPv6 {
		// [::] takes IPv4 too (bindv6only is 0), for the forwarder.
		listen, advertise = "::", l.Addr6(h).String()
	}
	args := append([]string{l.cfg.Binary, "server", common[0], common[1],
		"--listen", net.JoinHostPort(listen, strconv.Itoa(APIPort)),
		"--advertise-address", advertise}, common[2:]...)
	args = append(append(args, "--lb-pool", l.LBPool()), modes...)
	args = append(args, l.cidrArgs()...)
	switch {
	case i > 1:
		args = append(args, "--join", urls[0], "--token-file", filepath.Join(dir1, "server-token"))
	case l.cfg.Servers > 1:
		args = append(args, "--cluster-init")
	}
	return append(args, etcdFlags...)
}

// cidrArgs are the service and cluster CIDR flags of a lab's nodes: none in
// an IPv4 lab (minikit's defaults), both families in a dual-stack one, the
// IPv6 ranges alone in an IPv6 one.
func (l *Lab) cidrArgs() []string {
	switch l.cfg.IPFamily {
	case IPFamilyDual:
		return []string{"--service-cidr", ServiceCIDR + "," + ServiceCIDR6.String(), "--cluster-cidr", ClusterCIDR + "," + PodCIDR6.String()}
	case IPFamilyIPv6:
		return []string{"--service-cidr", ServiceCIDR6.String(), "--cluster-cidr", PodCIDR6.String()}
	}
	return nil
}

// LBPool is the lab's LoadBalancer address pool: .240-.250 of the underlay,
// as on the Vagrant network, where the client and external hosts reach them;
// a dual-stack lab adds fd00:56::240-fd00:56::250 of the IPv6 underlay,
// numbered as Addr6 numbers the hosts (17 addresses, the IPv6 text counting
// in hex).
func (l *Lab) LBPool() string {
	switch l.cfg.IPFamily {
	case IPFamilyDual:
		return lbPool(l.cfg.Subnet) + "," + lbPool6()
	case IPFamilyIPv6:
		return lbPool6()
	}
	return lbPool(l.cfg.Subnet)
}

// lbPool6 is a dual-stack lab's IPv6 LoadBalancer range on Subnet6.
func lbPool6() string {
	p := Subnet6.Masked().Addr().String()
	return p + "240-" + p + "250"
}

// startForwarder runs the loopback forwarder in the root namespace: the only
// thing a lab puts there, a listener on 127.0.0.1 that dials from node1's
// namespace to the first of the servers that answers.
func (l *Lab) startForwarder(servers []string) error {
	port := l.cfg.APIPort
	if port == 0 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	l.state.APIPort = port
	logf, err := os.OpenFile(filepath.Join(l.cfg.Dir, "forwarder.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := execCommand(l.cfg.Binary, "__lab-forward",
		"--listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		"--netns", NS(l.cfg.Name, nodeName(1)),
		"--to", strings.Join(servers, ","))
	cmd.Stdout, cmd.Stderr = logf, logf
	setpgid(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the API forwarder: %w", err)
	}
	go cmd.Wait()
	l.recordPID("forwarder", cmd.Process.Pid)
	return l.saveState()
}

// Client returns a clientset for the lab's API through the forwarder.
func (l *Lab) Client() (kubernetes.Interface, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst = 100, 200
	return kubernetes.NewForConfig(rc)
}

// waitPodCIDR waits until the node is registered and has its pod range.
func (l *Lab) waitPodCIDR(ctx context.Context, name string) error {
	return l.pollNodes(ctx, "waiting for "+name+" to register", func(client kubernetes.Interface) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return n.Spec.PodCIDR != "", "no pod CIDR yet", nil
	})
}

// NodeZone is the availability zone of node i (1-based) in a lab spanning
// zones zones, its topology.kubernetes.io/zone label; "" for a lab without
// zones.
func NodeZone(i, zones int) string {
	if zones < 1 {
		return ""
	}
	return fmt.Sprintf("zone-%d", (i-1)%zones+1)
}

// labelZones gives every registered node of the lab its zone label, as a
// cloud's node controller labels nodes after they register (the node agent
// keeps labels it did not set). A node re-registered after `lab node stop
// --remove` gets it again on the next WaitReady.
func (l *Lab) labelZones(ctx context.Context, client kubernetes.Interface, nodes []corev1.Node) error {
	for _, n := range nodes {
		i, ok := nodeIndex(n.Name)
		zone := NodeZone(i, l.state.Zones)
		if !ok || zone == "" || n.Labels[corev1.LabelTopologyZone] == zone {
			continue
		}
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, corev1.LabelTopologyZone, zone)
		if _, err := client.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("labelling node %s with zone %s: %w", n.Name, zone, err)
		}
	}
	return nil
}

// controlPlaneTaint is the taint kubeadm gives control-plane nodes.
var controlPlaneTaint = corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}

// taintControlPlane gives the lab's control-plane nodes (those labelled
// node-role.kubernetes.io/control-plane) kubeadm's NoSchedule taint when
// the lab was made with ControlPlaneTaint. A node re-registered after `lab
// node stop --remove` gets it again on the next WaitReady.
func (l *Lab) taintControlPlane(ctx context.Context, client kubernetes.Interface, nodes []corev1.Node) error {
	if !l.state.ControlPlaneTaint {
		return nil
	}
	for _, n := range nodes {
		if _, ok := n.Labels[controlPlaneTaint.Key]; !ok || slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.MatchTaint(&controlPlaneTaint) }) {
			continue
		}
		n.Spec.Taints = append(n.Spec.Taints, controlPlaneTaint)
		if _, err := client.CoreV1().Nodes().Update(ctx, &n, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("tainting control-plane node %s: %w", n.Name, err)
		}
	}
	return nil
}

// nodeIndex is i of nodeName(i).
func nodeIndex(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "node")
	i, err := strconv.Atoi(rest)
	return i, ok && err == nil && i >= 1 && nodeName(i) == name
}

// WaitReady waits until every node of the lab is registered and Ready, with
// its zone label.
func (l *Lab) WaitReady(ctx context.Context) error {
	return l.pollNodes(ctx, "waiting for the lab's nodes", func(client kubernetes.Interface) (bool, string, error) {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		if err := l.labelZones(ctx, client, nodes.Items); err != nil {
			return false, err.Error(), nil
		}
		if err := l.taintControlPlane(ctx, client, nodes.Items); err != nil {
			return false, err.Error(), nil
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && n.Spec.PodCIDR != "" {
					ready++
				}
			}
		}
		return ready >= l.cfg.Nodes, fmt.Sprintf("%d of %d nodes Ready", ready, l.cfg.Nodes), nil
	})
}

// pollNodes asks the lab's API every 50 ms, for up to a minute, until done
// says so; the error names what, and the last reason it was not done.
func (l *Lab) pollNodes(ctx context.Context, what string, done func(kubernetes.Interface) (bool, string, error)) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var last string
	for {
		client, err := l.Client()
		if err == nil {
			var ok bool
			if ok, last, err = done(client); ok && err == nil {
				return nil
			}
		}
		if err != nil {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %s", what, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func waitFile(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return string(b), nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%s did not appear", path)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
