package reliability_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/cni"
	"github.com/minikit/minikit/internal/kubelet"
	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// vm is a throwaway network namespace standing in for a dedicated VM: loopback,
// one NIC (a veth whose peer, in the same namespace, has no address: nothing
// sent there goes anywhere) and a default route.
type vm struct {
	name, dir, dataDir string
	ip                 string
	bin                string
}

func (v *vm) nsPath() string { return netns.NetNSPath(v.name) }

// command runs argv in the VM's network namespace and the machine's mount
// namespace, as a process on that VM would see them (nsenter --net, as the lab
// does: `ip netns exec` would give it a mount namespace of its own, where the
// pods' namespace mounts would not be seen by the next command).
func (v *vm) command(argv ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + v.nsPath(), "--"}, argv...)...)
}

func (v *vm) run(t testing.TB, argv ...string) string {
	t.Helper()
	out, err := v.command(argv...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

// sandboxPrefix is the netns prefix of the VM's pods.
func (v *vm) sandboxPrefix() string {
	return kubelet.SandboxPrefix("vm", filepath.Join(v.dataDir, "agent"))
}

var (
	reCounters = regexp.MustCompile(`\[\d+:\d+\]`)
	reComments = regexp.MustCompile(`(?m)^# (Generated|Completed) .*\n`)
	reLifetime = regexp.MustCompile(`(?m)\s+(valid_lft|preferred_lft) \S+`)
)

// snapshot is the VM's network as `ip`, `iptables-save` and `ss` show it, plus
// what of it lives outside the namespace: namespaces and mounts with the VM's
// prefix, processes inside the VM's namespace and the pods' processes podProcs
// (by PID and start time: a deleted namespace's inode number is soon reused).
func (v *vm) snapshot(t testing.TB, podProcs []procID) string {
	t.Helper()
	var b strings.Builder
	for _, argv := range [][]string{
		{"ip", "-o", "link", "show"},
		{"ip", "-o", "addr", "show"},
		{"ip", "route", "show", "table", "all"},
		{"ip", "-6", "route", "show", "table", "all"},
		{"ip", "rule", "show"},
		{"ip", "neigh", "show", "nud", "permanent"},
		// Each table by name: with the nf_tables backend a table that was
		// never used is not listed by a bare iptables-save.
		{"iptables-save", "-t", "filter"},
		{"iptables-save", "-t", "nat"},
		{"iptables-save", "-t", "mangle"},
		{"iptables-save", "-t", "raw"},
		{"ss", "-Htlnup"},
		{"sh", "-c", "for f in /proc/sys/net/ipv4/ip_forward /proc/sys/net/bridge/bridge-nf-call-iptables; do echo $f=$(cat $f); done"},
	} {
		out := v.run(t, argv...)
		out = reCounters.ReplaceAllString(out, "")
		out = reComments.ReplaceAllString(out, "")
		out = reLifetime.ReplaceAllString(out, "")
		fmt.Fprintf(&b, "## %s\n%s\n", strings.Join(argv, " "), out)
	}
	prefix := v.sandboxPrefix()
	var ours []string
	for _, dir := range []string{netns.NetNSDir, cni.PodNSDir} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), prefix) {
				ours = append(ours, filepath.Join(dir, e.Name()))
			}
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.Contains(f[4], prefix) {
			ours = append(ours, "mount "+f[4])
		}
	}
	procs := podProcs
	for _, pid := range processesInNetNS(nsInode(v.nsPath())) {
		procs = append(procs, procID{pid, procStart(pid)})
	}
	for _, p := range procs {
		if procStart(p.pid) == p.start {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.pid))
			ours = append(ours, fmt.Sprintf("process %d %s", p.pid, bytes.ReplaceAll(cmd, []byte{0}, []byte{' '})))
		}
	}
	sort.Strings(ours)
	fmt.Fprintf(&b, "## outside the namespace\n%s\n", strings.Join(ours, "\n"))
	return b.String()
}

func newVM(t *testing.T) *vm {
	t.Helper()
	testenv.RequireRoot(t)
	rb := make([]byte, 3)
	rand.Read(rb)
	v := &vm{name: "mkvm" + hex.EncodeToString(rb), dir: t.TempDir(), ip: "192.168.77.10", bin: testenv.Minikit(t)}
	v.dataDir = filepath.Join(v.dir, "data")
	if err := netns.CreateNamed(v.name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Whatever the test left: the server, then minikit down, then the netns.
		if pids := processesInNetNS(nsInode(v.nsPath())); len(pids) > 0 {
			for _, pid := range pids {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if _, err := os.Stat(v.dataDir); err == nil {
			if out, err := v.command(v.bin, "down", "--data-dir", v.dataDir).CombinedOutput(); err != nil {
				t.Errorf("cleanup: minikit down: %v: %s", err, out)
			}
		}
		if err := netns.DeleteNamed(v.name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	for _, argv := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "link", "add", "eth0", "type", "veth", "peer", "name", "uplink"},
		{"ip", "link", "set", "uplink", "up"},
		{"ip", "addr", "add", v.ip + "/24", "dev", "eth0"},
		{"ip", "link", "set", "eth0", "up"},
		{"ip", "route", "add", "default", "via", "192.168.77.1", "dev", "eth0"},
		// A VM that does not forward: minikit turns forwarding and bridge
		// netfilter on, and minikit down must turn them back off. The module
		// is loaded first (minikit would load it; it is global and stays).
		{"sh", "-c", "modprobe br_netfilter 2>/dev/null; echo 0 > /proc/sys/net/ipv4/ip_forward; f=/proc/sys/net/bridge/bridge-nf-call-iptables; [ ! -e $f ] || echo 0 > $f"},
	} {
		v.run(t, argv...)
	}
	// The snapshot must not catch IPv6 duplicate address detection half done.
	testutil.Eventually(t, 10*time.Second, "IPv6 link-local addresses of "+v.name+" leave tentative", func() error {
		if out := v.run(t, "ip", "-o", "addr", "show"); strings.Contains(out, "tentative") {
			return fmt.Errorf("%s", out)
		}
		return nil
	})
	return v
}

// startServer runs `minikit server` on the VM as its quick start says, and
// returns the process and a client whose connections are made inside the VM.
func (v *vm) startServer(t *testing.T) (*exec.Cmd, kubernetes.Interface) {
	t.Helper()
	logf, err := os.Create(filepath.Join(v.dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := v.command(v.bin, "server", "--data-dir", v.dataDir, "--listen", "127.0.0.1:6443",
		"--node-name", "vm", "--node-ip", v.ip, "--dns-upstream", "192.168.77.1")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(v.dir, "server.log"))
			t.Logf("=== server.log (last 4 KiB)\n%s", b[max(0, len(b)-4096):])
		}
	})
	kc := filepath.Join(v.dataDir, "kubeconfig")
	testutil.Eventually(t, 30*time.Second, "the server writes its kubeconfig", func() error {
		_, err := os.Stat(kc)
		return err
	})
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	rc.Timeout = 10 * time.Second
	rc.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return lab.DialIn(ctx, v.name, network, addr)
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "node vm Ready", func() error {
		n, err := c.CoreV1().Nodes().Get(context.Background(), "vm", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue && n.Spec.PodCIDR != "" {
				return nil
			}
		}
		return fmt.Errorf("not Ready: %+v", n.Status.Conditions)
	})
	return cmd, c
}

// TestDownLeavesNothing runs `minikit server` on a stand-in for a dedicated VM,
// puts pods and Services on it, stops it and runs `minikit down`: the VM's
// network is as it was before the server first started, nothing of it is left
// outside (namespaces, mounts, processes), the data dir is kept, and `down
// --purge` then removes the data dir. The machine's own namespace is untouched.
func TestDownLeavesNothing(t *testing.T) {
	testenv.RequireRoot(t)
	var v *vm
	mine := func(n string) bool { return v != nil && (n == v.name || strings.HasPrefix(n, v.sandboxPrefix())) }
	rootBefore := testenv.RootSnapshot(t, func(n string) bool { return strings.HasPrefix(n, "mkvm") })
	v = newVM(t)
	before := v.snapshot(t, nil)

	srv, c := v.startServer(t)
	ctx := context.Background()
	if _, err := c.AppsV1().Deployments("default").Create(ctx, webDeployment("web", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*corev1.Service{service("web", "web", corev1.ServiceTypeClusterIP), service("web-np", "web", corev1.ServiceTypeNodePort)} {
		if _, err := c.CoreV1().Services("default").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CoreV1().Pods("default").Create(ctx, sleeper("client", "vm"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitPodReady(t, c, "default", "client")
	if err := waitDeployment(ctx, c, "web", 90*time.Second); err != nil {
		t.Fatal(err)
	}
	svc, err := c.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Every pod's processes, the cluster's own coredns pod of kube-system
	// among them: down must stop those too.
	// The API is loopback-only: the coredns pod runs on the VM's own
	// network, its one replica reaching the API at 127.0.0.1.
	if dnsPods := testenv.ClusterDNSPods(t, c); len(dnsPods) != 1 || !dnsPods[0].Spec.HostNetwork || dnsPods[0].Status.PodIP != v.ip {
		t.Fatalf("coredns pods %d, want one on the host network with the VM's address %s: %+v", len(dnsPods), v.ip, dnsPods)
	}
	pods, err := c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var podProcs []procID
	var clientNS string
	for _, p := range pods.Items {
		if p.Spec.HostNetwork {
			// The coredns pod of a loopback-only API: its processes are in
			// the VM's namespace, which every snapshot lists.
			continue
		}
		name := v.sandboxPrefix() + strings.ReplaceAll(string(p.UID), "-", "")[:10]
		for _, pid := range processesInNetNS(nsInode(netns.NetNSPath(name))) {
			podProcs = append(podProcs, procID{pid, procStart(pid)})
		}
		if p.Namespace == "default" && p.Name == "client" {
			clientNS = name
		}
	}
	// The cluster works on the VM: a pod reaches the Service by name and VIP.
	testutil.Eventually(t, 30*time.Second, "pod client reaches service web", func() error {
		ips, err := lookupA(clientNS, "10.96.0.10:53", "web.default.svc.cluster.local")
		if err != nil || len(ips) != 1 || ips[0] != svc.Spec.ClusterIP {
			return fmt.Errorf("DNS: %v %v", ips, err)
		}
		body, err := httpGet(nsHTTPClient(clientNS, 3*time.Second), "http://"+svc.Spec.ClusterIP+"/", "")
		if err != nil || !strings.Contains(body, "pod=web-") {
			return fmt.Errorf("curl: %v %q", err, body)
		}
		return nil
	})
	running := v.snapshot(t, podProcs)
	// It binds port 53 on the VM's address only (bind {$POD_IP}), never on
	// every address, where it would take a local stub resolver's 127.0.0.53.
	for _, l := range strings.Split(running, "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasSuffix(f[4], ":53") && f[4] != v.ip+":53" {
			t.Errorf("port 53 bound on %s, want only %s:53: %s", f[4], v.ip, l)
		}
	}
	if !strings.Contains(running, v.ip+":53 ") {
		t.Errorf("nothing listens on %s:53:\n%s", v.ip, running)
	}
	for _, want := range []string{"cni0", "veth", ":KUBE-SERVICES", ":KUBE-SVC-", "MINIKIT-POSTROUTING", "10.244.", ":6443", "process ", "mount /run/minikit/ns/"} {
		if !strings.Contains(running, want) {
			t.Fatalf("with the server running, no %q in the VM's state: the test would prove nothing\n%s", want, running)
		}
	}

	srv.Process.Signal(syscall.SIGTERM)
	testutil.Eventually(t, 20*time.Second, "the server exits on SIGTERM", func() error {
		if processAlive(srv.Process.Pid) {
			return fmt.Errorf("pid %d still runs", srv.Process.Pid)
		}
		return nil
	})
	if out, err := v.command(v.bin, "down", "--data-dir", v.dataDir).CombinedOutput(); err != nil {
		t.Fatalf("minikit down: %v: %s", err, out)
	}
	if after := v.snapshot(t, podProcs); after != before {
		t.Errorf("the VM's state after minikit down differs from before the server started:\n%s", lineDiff(before, after))
	}
	if _, err := os.Stat(filepath.Join(v.dataDir, "minikit.db")); err != nil {
		t.Errorf("minikit down without --purge removed the store: %v", err)
	}
	// A second down finds nothing to do and says so by succeeding.
	if out, err := v.command(v.bin, "down", "--data-dir", v.dataDir).CombinedOutput(); err != nil {
		t.Fatalf("second minikit down: %v: %s", err, out)
	}
	if out, err := v.command(v.bin, "down", "--purge", "--data-dir", v.dataDir).CombinedOutput(); err != nil {
		t.Fatalf("minikit down --purge: %v: %s", err, out)
	}
	if _, err := os.Stat(v.dataDir); !os.IsNotExist(err) {
		t.Errorf("minikit down --purge left the data dir %s (%v)", v.dataDir, err)
	}
	if after := v.snapshot(t, podProcs); after != before {
		t.Errorf("the VM's state after minikit down --purge differs:\n%s", lineDiff(before, after))
	}
	if err := netns.DeleteNamed(v.name); err != nil {
		t.Fatal(err)
	}
	if rootAfter := testenv.RootSnapshot(t, func(n string) bool { return strings.HasPrefix(n, "mkvm") || mine(n) }); rootAfter != rootBefore {
		t.Errorf("the root namespace changed:\n%s", lineDiff(rootBefore, rootAfter))
	}
}

// TestDownAfterPartialRemoval removes part of what a stopped server left by
// hand, as a student tidying up (or a down interrupted half way) would: the
// bridge, one pod's network namespace, another pod's UTS mount, the pod
// masquerade chain and its jump, a proxy jump rule and a whole proxy chain.
// minikit down then still succeeds and leaves the VM as it was, and a second
// down succeeds too: a rule, chain, link or mount already gone is not an error.
func TestDownAfterPartialRemoval(t *testing.T) {
	testenv.RequireRoot(t)
	v := newVM(t)
	before := v.snapshot(t, nil)
	srv, c := v.startServer(t)
	ctx := context.Background()
	if _, err := c.AppsV1().Deployments("default").Create(ctx, webDeployment("web", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Services("default").Create(ctx, service("web", "web", corev1.ServiceTypeNodePort), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := waitDeployment(ctx, c, "web", 90*time.Second); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the proxy's rules for web", func() error {
		if out := v.run(t, "iptables-save", "-t", "nat"); !strings.Contains(out, ":KUBE-SVC-") || !strings.Contains(out, "-j MINIKIT-POSTROUTING") {
			return fmt.Errorf("no KUBE-SVC chain or masquerade jump yet")
		}
		return nil
	})
	pods, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) < 2 {
		t.Fatalf("pods: %v %v", pods, err)
	}
	var podProcs []procID
	var sandboxes []string
	for _, p := range pods.Items {
		name := v.sandboxPrefix() + strings.ReplaceAll(string(p.UID), "-", "")[:10]
		sandboxes = append(sandboxes, name)
		for _, pid := range processesInNetNS(nsInode(netns.NetNSPath(name))) {
			podProcs = append(podProcs, procID{pid, procStart(pid)})
		}
	}
	srv.Process.Signal(syscall.SIGTERM)
	testutil.Eventually(t, 20*time.Second, "the server exits on SIGTERM", func() error {
		if processAlive(srv.Process.Pid) {
			return fmt.Errorf("pid %d still runs", srv.Process.Pid)
		}
		return nil
	})
	for _, argv := range [][]string{
		{"ip", "link", "del", "cni0"},
		{"ip", "netns", "del", sandboxes[0]},
		{"umount", cni.PodUTSPath(sandboxes[1])},
		{"iptables", "-t", "nat", "-D", "POSTROUTING", "-m", "comment", "--comment", "minikit pod masquerade", "-j", "MINIKIT-POSTROUTING"},
		{"iptables", "-t", "nat", "-F", "MINIKIT-POSTROUTING"},
		{"iptables", "-t", "nat", "-X", "MINIKIT-POSTROUTING"},
		{"iptables", "-t", "nat", "-D", "PREROUTING", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"},
		{"iptables", "-D", "INPUT", "-m", "comment", "--comment", "kubernetes health check service ports", "-j", "KUBE-NODEPORTS"},
		{"iptables", "-F", "KUBE-NODEPORTS"},
		{"iptables", "-X", "KUBE-NODEPORTS"},
	} {
		v.run(t, argv...)
	}
	for i := 1; i <= 2; i++ {
		if out, err := v.command(v.bin, "down", "--data-dir", v.dataDir).CombinedOutput(); err != nil {
			t.Fatalf("minikit down #%d after a partial removal: %v: %s", i, err, out)
		}
		if after := v.snapshot(t, podProcs); after != before {
			t.Errorf("the VM's state after minikit down #%d differs from before the server started:\n%s", i, lineDiff(before, after))
		}
	}
}

func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z'
}

// lineDiff lists the lines only in a (-) or only in b (+).
func lineDiff(a, b string) string {
	count := map[string]int{}
	for _, l := range strings.Split(a, "\n") {
		count[l]++
	}
	for _, l := range strings.Split(b, "\n") {
		count[l]--
	}
	var out []string
	for l, n := range count {
		switch {
		case n > 0:
			out = append(out, "- "+l)
		case n < 0:
			out = append(out, "+ "+l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// TestLabDownKillsEverything covers what test/lab's TestLabDownLeavesNothing
// cannot see: processes that do not name the lab's directory. Container
// processes (a built-in image is the minikit binary, busybox is the host's
// sleep) must be gone after `lab down`, as must every process in a namespace of
// the lab, its nodes' pod namespaces and their mounts.
func TestLabDownKillsEverything(t *testing.T) {
	testenv.RequireRoot(t)
	rb := make([]byte, 3)
	rand.Read(rb)
	name := "mkr" + hex.EncodeToString(rb)
	dir := filepath.Join(t.TempDir(), "lab")
	l, err := lab.Up(context.Background(), lab.Config{Name: name, Nodes: 2, Dir: dir, Binary: testenv.Minikit(t)})
	if err != nil {
		t.Fatalf("lab up: %v", err)
	}
	downed := false
	t.Cleanup(func() {
		if !downed {
			l.Down()
		}
	})
	c := labClient(t, l, 10*time.Second)
	ctx := context.Background()
	if _, err := c.AppsV1().Deployments("default").Create(ctx, webDeployment("web", 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"node1", "node2"} {
		if _, err := c.CoreV1().Pods("default").Create(ctx, sleeper("sleep-"+n, n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		testenv.WaitPodReady(t, c, "default", "sleep-"+n)
	}
	if err := waitDeployment(ctx, c, "web", 90*time.Second); err != nil {
		t.Fatal(err)
	}
	pods, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Processes by PID and start time: a deleted namespace's inode number is
	// soon reused by another.
	procs := map[procID]string{}
	for _, h := range l.Hosts() {
		for _, pid := range processesInNetNS(nsInode(netns.NetNSPath(lab.NS(name, h)))) {
			procs[procID{pid, procStart(pid)}] = "host " + h
		}
	}
	var prefixes []string
	for _, n := range []string{"node1", "node2"} {
		prefixes = append(prefixes, kubelet.SandboxPrefix(n, filepath.Join(dir, n, "agent")))
	}
	containers := 0
	for i := range pods.Items {
		for _, pid := range processesInNetNS(nsInode(netns.NetNSPath(testenv.SandboxName(t, c, &pods.Items[i])))) {
			procs[procID{pid, procStart(pid)}] = "pod " + pods.Items[i].Name
			containers++
		}
	}
	if containers < len(pods.Items) {
		t.Fatalf("%d processes in %d pods' namespaces before lab down: the test would prove nothing", containers, len(pods.Items))
	}
	if err := l.Down(); err != nil {
		t.Fatalf("lab down: %v", err)
	}
	downed = true
	for p, what := range procs {
		// A process the lab's node had just started (an iptables-save of
		// its periodic checks) may be in the kernel's exit path when the
		// node is stopped: no command line, no namespaces, not yet a
		// zombie. Give that a moment; a process that goes on running is
		// what this test is about.
		deadline := time.Now().Add(2 * time.Second)
		for procStart(p.pid) == p.start && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if procStart(p.pid) == p.start {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.pid))
			stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
			t.Errorf("after lab down, process %d (%s) of %s still runs: %s", p.pid, bytes.ReplaceAll(cmd, []byte{0}, []byte{' '}), what, stat)
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, p := range append(prefixes, name+"-") {
		for _, dir := range []string{netns.NetNSDir, cni.PodNSDir} {
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), p) {
					t.Errorf("after lab down, %s/%s is left", dir, e.Name())
				}
			}
		}
		if strings.Contains(string(mounts), "/"+p) {
			t.Errorf("after lab down, a mount with prefix %s is left", p)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("lab dir %s still exists (%v)", dir, err)
	}
	t.Logf("lab down stopped %d processes, %d of them containers", len(procs), containers)
}
