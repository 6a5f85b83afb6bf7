package kubelet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/cni"
	"github.com/minikit/minikit/internal/iptables/iptablestest"
	"github.com/minikit/minikit/internal/testutil"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"
)

// The fakes of the agent's seams, stateful as the kernel is: a pod network
// whose sandboxes exist until torn down (or deleted behind the agent's back),
// processes that live until they exit or are signalled, and probes whose
// results a test scripts. One instance of each outlives an agent, as the
// kernel and the processes outlive an agent restart.

// fakeSandbox is one pod's netns with its veth and address.
type fakeSandbox struct {
	veth string
	ip   netip.Addr
}

// fakeNetwork is the node's pod network in memory.
type fakeNetwork struct {
	mu       sync.Mutex
	podCIDR  netip.Prefix
	bridge   bool
	pods     map[string]fakeSandbox // netns name -> sandbox
	podNS    map[string]string      // UTS/mount namespaces name -> hostname
	routes   map[netip.Prefix]netip.Addr
	setupErr error          // when set, SetupPod fails with it
	setups   int            // SetupPod calls that changed something
	podOKs   map[string]int // PodOK calls per netns
	teardown []string       // TeardownPod calls, in order
}

func newFakeNetwork() *fakeNetwork {
	return &fakeNetwork{pods: map[string]fakeSandbox{}, podNS: map[string]string{}, podOKs: map[string]int{}}
}

// build is the agent's Config.Network: the same network for every agent,
// which must agree on the podCIDR.
func (f *fakeNetwork) build(podCIDR netip.Prefix) (Network, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.podCIDR.IsValid() && f.podCIDR != podCIDR {
		return nil, fmt.Errorf("fake network is for %s, not %s", f.podCIDR, podCIDR)
	}
	f.podCIDR = podCIDR
	return f, nil
}

func (f *fakeNetwork) EnsureBridge() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bridge = true
	return nil
}

func (f *fakeNetwork) EnsureBridgeRouteLocalnet() error { return nil }

func (f *fakeNetwork) DeleteUDPConntrack(netip.Addr, uint16) error { return nil }

func (f *fakeNetwork) WatchPodNetwork(<-chan struct{}, func(), func(error)) error { return nil }

func (f *fakeNetwork) ConnectedPrefixes() ([]netip.Prefix, error) {
	return []netip.Prefix{netip.MustParsePrefix("192.168.0.0/24")}, nil
}

func (f *fakeNetwork) SyncRoutes(want map[netip.Prefix]netip.Addr) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.routes = want
	return nil, nil
}

func (f *fakeNetwork) EnsureVXLAN(netip.Addr) (net.HardwareAddr, bool, error) {
	return nil, false, errors.New("the fake network is host-gw only")
}

func (f *fakeNetwork) SyncVXLANPeers([]cni.VXLANPeer) ([]string, error) {
	return nil, errors.New("the fake network is host-gw only")
}

func (f *fakeNetwork) DeleteVXLAN() (bool, error) { return false, nil }

// SetupPod refuses what the kernel or package cni would: no bridge, an
// address outside the podCIDR (or its network, gateway or broadcast
// address), an address or veth name another pod holds.
func (f *fakeNetwork) SetupPod(p cni.PodNet) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.setupErr != nil:
		return fmt.Errorf("setting up pod %q: %w", p.NetNS, f.setupErr)
	case !f.bridge:
		return fmt.Errorf("setting up pod %q: bridge missing", p.NetNS)
	case !f.podCIDR.Contains(p.IP) || p.IP == f.podCIDR.Masked().Addr() || p.IP == f.podCIDR.Masked().Addr().Next():
		return fmt.Errorf("setting up pod %q: %s is no pod address of %s", p.NetNS, p.IP, f.podCIDR)
	}
	for name, s := range f.pods {
		if name != p.NetNS && (s.ip == p.IP || s.veth == p.HostVeth) {
			return fmt.Errorf("setting up pod %q: %s or %s is pod %q's: file exists", p.NetNS, p.IP, p.HostVeth, name)
		}
	}
	want := fakeSandbox{veth: p.HostVeth, ip: p.IP}
	if f.pods[p.NetNS] != want {
		f.pods[p.NetNS] = want
		f.setups++
	}
	return nil
}

func (f *fakeNetwork) PodOK(p cni.PodNet) (bool, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.podOKs[p.NetNS]++
	s, ok := f.pods[p.NetNS]
	switch {
	case !ok:
		return false, "netns missing"
	case !f.bridge:
		return false, "bridge missing"
	case s.veth != p.HostVeth:
		return false, "veth missing"
	case s.ip != p.IP:
		return false, "address missing"
	}
	return true, ""
}

func (f *fakeNetwork) TeardownPod(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.pods, name)
	f.teardown = append(f.teardown, name)
	return nil
}

func (f *fakeNetwork) Sandboxes(prefix string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for name := range f.pods {
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

func (f *fakeNetwork) PodNamespacesExist(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.podNS[name]
	return ok
}

// CreatePodNamespaces leaves existing namespaces as they are, as package cni does.
func (f *fakeNetwork) CreatePodNamespaces(name, hostname, resolvConf, hosts string, binds []cni.Bind) error {
	for _, p := range []string{resolvConf, hosts} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("creating namespaces of pod %q: bind-mounting %w", name, err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.podNS[name]; !ok {
		f.podNS[name] = hostname
	}
	return nil
}

func (f *fakeNetwork) DeletePodNamespaces(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.podNS, name)
	return nil
}

// failSetup makes SetupPod fail with err (nil: work again).
func (f *fakeNetwork) failSetup(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setupErr = err
}

// sandbox is the pod's netns as the network holds it.
func (f *fakeNetwork) sandbox(name string) (fakeSandbox, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.pods[name]
	return s, ok
}

// deleteNetNS removes a pod's netns behind the agent's back (ip netns del).
func (f *fakeNetwork) deleteNetNS(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.pods, name)
}

// addSandbox creates a netns no pod of the agent's records (debris).
func (f *fakeNetwork) addSandbox(name string, ip netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods[name] = fakeSandbox{veth: "vethdebris", ip: ip}
}

func (f *fakeNetwork) counts() (setups int, podOKs map[string]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.setups, maps.Clone(f.podOKs)
}

// fakeProc is one container process.
type fakeProc struct {
	pid   int
	start uint64
	argv  []string
	env   []string
	// exit receives the exit code once; alive is false after it.
	exit  chan int
	alive bool
	// ignoreTERM makes SIGTERM do nothing (a process that needs SIGKILL).
	ignoreTERM bool
}

// fakeProcesses runs no programs: a started process lives until a test ends
// it (exit) or the agent signals it (SIGTERM: 143, SIGKILL: 137).
type fakeProcesses struct {
	mu      sync.Mutex
	procs   []*fakeProc
	signals []string // "PID SIGNAL", in order
}

func (f *fakeProcesses) start(cmd *exec.Cmd) (int, uint64, func() int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := &fakeProc{pid: 1000 + len(f.procs), argv: cmd.Args, env: cmd.Env, exit: make(chan int, 1), alive: true}
	p.start = uint64(p.pid) * 100
	f.procs = append(f.procs, p)
	return p.pid, p.start, func() int { return <-p.exit }, nil
}

func (f *fakeProcesses) startTime(pid int) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.proc(pid); p != nil && p.alive {
		return p.start
	}
	return 0
}

func (f *fakeProcesses) signal(pid int, sig syscall.Signal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.signals = append(f.signals, fmt.Sprint(pid, " ", sig))
	p := f.proc(pid)
	switch {
	case p == nil:
	case sig == syscall.SIGKILL:
		f.endLocked(p, 128+int(sig))
	case sig == syscall.SIGTERM && !p.ignoreTERM:
		f.endLocked(p, 128+int(sig))
	}
}

func (f *fakeProcesses) proc(pid int) *fakeProc {
	if i := pid - 1000; i >= 0 && i < len(f.procs) {
		return f.procs[i]
	}
	return nil
}

func (f *fakeProcesses) endLocked(p *fakeProc, code int) {
	if p.alive {
		p.alive = false
		p.exit <- code
	}
}

// exitProc ends a process with code, as if it exited by itself.
func (f *fakeProcesses) exitProc(pid int, code int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.endLocked(f.proc(pid), code)
}

// started returns a copy of every process started so far, in order.
func (f *fakeProcesses) started() []fakeProc {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]fakeProc, 0, len(f.procs))
	for _, p := range f.procs {
		out = append(out, *p)
	}
	return out
}

// endAll ends every process (a test's cleanup, so no agent goroutine waits for ever).
func (f *fakeProcesses) endAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.procs {
		f.endLocked(p, 137)
	}
}

// fakeProber answers probes with the results a test sets, per container
// and kind ("startup", "readiness", "liveness"); unset ones succeed.
type fakeProber struct {
	mu      sync.Mutex
	results map[string]error
	calls   map[string]int
}

func newFakeProber() *fakeProber {
	return &fakeProber{results: map[string]error{}, calls: map[string]int{}}
}

func (f *fakeProber) probe(_ context.Context, _ *corev1.Probe, t probeTarget) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := t.spec.Name + "/" + t.kind
	f.calls[key]++
	return f.results[key]
}

func (f *fakeProber) set(container, kind string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.results[container+"/"+kind] = err
}

func (f *fakeProber) count(container, kind string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[container+"/"+kind]
}

// fakeNode is one node of an API in memory (a fake clientset), with an
// agent on fakes: the unit-tier harness of the agent's pod sync.
type fakeNode struct {
	t       *testing.T
	client  *fake.Clientset
	net     *fakeNetwork
	ipt     *iptablestest.Fake
	procs   *fakeProcesses
	prober  *fakeProber
	clock   *testingclock.FakeClock
	dataDir string
	agent   *Agent
	stop    func()
}

const (
	testNodeName = "node1"
	testPodCIDR  = "10.244.1.0/24"
)

func newFakeNode(t *testing.T) *fakeNode {
	t.Helper()
	n := &fakeNode{t: t, client: fake.NewClientset(), net: newFakeNetwork(), ipt: iptablestest.NewFake(),
		procs: &fakeProcesses{}, prober: newFakeProber(), clock: testingclock.NewFakeClock(time.Now()), dataDir: t.TempDir()}
	// The node IPAM controller's part: the Node has its podCIDR.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNodeName}, Spec: corev1.NodeSpec{PodCIDR: testPodCIDR}}
	if _, err := n.client.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if n.stop != nil {
			n.stop()
		}
		n.procs.endAll()
	})
	return n
}

// start runs an agent on the node's fakes until stop (or the test's end).
func (n *fakeNode) start() *Agent {
	n.t.Helper()
	resolv := filepath.Join(n.dataDir, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 192.168.0.1\n"), 0o644); err != nil {
		n.t.Fatal(err)
	}
	a, err := New(Config{NodeName: testNodeName, NodeIP: netip.MustParseAddr("192.168.0.2"), DataDir: n.dataDir,
		Executable: "/minikit", ResolvConf: resolv, Client: n.client, Logger: testutil.Logger(n.t),
		Network: n.net.build, IPTables: n.ipt})
	if err != nil {
		n.t.Fatal(err)
	}
	a.setClock(n.clock)
	a.procs, a.prober = n.procs, n.prober
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case <-a.Ready():
	case err := <-done:
		cancel()
		n.t.Fatalf("agent stopped before it was ready: %v", err)
	}
	n.agent = a
	n.stop = func() {
		cancel()
		if err := <-done; err != nil {
			n.t.Errorf("agent: %v", err)
		}
		n.stop = nil
	}
	return a
}

// createPod creates a pod bound to the node.
func (n *fakeNode) createPod(pod *corev1.Pod) *corev1.Pod {
	n.t.Helper()
	pod.Spec.NodeName = testNodeName
	p, err := n.client.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	return p
}

func (n *fakeNode) deletePod(pod *corev1.Pod) {
	n.t.Helper()
	if err := n.client.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
		n.t.Fatal(err)
	}
}

func (n *fakeNode) getPod(pod *corev1.Pod) (*corev1.Pod, error) {
	return n.client.CoreV1().Pods(pod.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
}

// waitPod waits until cond holds for the pod as the API has it.
func (n *fakeNode) waitPod(pod *corev1.Pod, what string, cond func(*corev1.Pod) error) *corev1.Pod {
	n.t.Helper()
	var got *corev1.Pod
	testutil.Eventually(n.t, 10*time.Second, what, func() error {
		p, err := n.getPod(pod)
		if err != nil {
			return err
		}
		got = p
		return cond(p)
	})
	return got
}

// stepUntil moves the fake clock a second at a time until cond holds: probe
// and back-off timers fire only as the clock moves.
func (n *fakeNode) stepUntil(what string, cond func() error) {
	n.t.Helper()
	testutil.Eventually(n.t, 10*time.Second, what, func() error {
		n.clock.Step(time.Second)
		return cond()
	})
}

// testPod is a pod with one container "app" running a command.
func testPod(name, uid string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(uid)},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyAlways, Containers: []corev1.Container{
			{Name: "app", Image: "busybox", Command: []string{"sleep", "1d"}}}},
	}
}

// running is a waitPod condition: the pod runs with an IP and all its
// containers ready.
func running(p *corev1.Pod) error {
	if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
		return fmt.Errorf("phase %q, podIP %q", p.Status.Phase, p.Status.PodIP)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status != corev1.ConditionTrue {
			return fmt.Errorf("not ready: %s", c.Message)
		}
	}
	return nil
}

// containerStatus is the pod's status of its container name.
func containerStatus(p *corev1.Pod, name string) corev1.ContainerStatus {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == name {
			return cs
		}
	}
	return corev1.ContainerStatus{}
}

// alive lists the PIDs of the processes that still run.
func (f *fakeProcesses) alive() []int {
	var out []int
	for _, p := range f.started() {
		if p.alive {
			out = append(out, p.pid)
		}
	}
	return out
}

// signalsSent lists the signals sent, as "PID SIGNAL", in order.
func (f *fakeProcesses) signalsSent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.signals)
}
