// Package kubelet is the node agent, minikit's kubelet: it registers its Node, keeps
// the Ready condition fresh, and converges the kernel to the pods bound to it —
// a network namespace on the node's cni0 bridge per pod (package cni; a
// hostNetwork pod shares the node's), hostPort DNAT, volumes, one process per
// container, probes, restarts and status — through the API only.
//
// Pods are simulated, not contained: a container is a process in the pod's network,
// UTS and mount namespaces, running a built-in image (package images) or a command
// from the host's filesystem. Processes outlive an agent restart and are adopted
// from the state the agent keeps in its data directory.
//
// Every kernel side effect goes through a seam: the pod network (Network,
// package cni's by default) and iptables come through Config, as the proxy
// takes its iptables; processes, probes and the clock are fields the tests
// replace. Pod sync, adoption, restarts and probes are thus tested on
// stateful fakes without root (fake_test.go), and in labs as root.
package kubelet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/minikit/minikit/internal/informer"

	"github.com/minikit/minikit/internal/cni"
	"github.com/minikit/minikit/internal/iptables"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
)

// KubeletVersion is what the Node reports as its kubelet version.
const KubeletVersion = "v1.37.2-minikit"

// heartbeatPeriod is how often the Ready condition's heartbeat is refreshed.
const heartbeatPeriod = 10 * time.Second

// resyncPeriod is how often every pod is re-checked against the kernel, which
// repairs sandboxes deleted behind the agent's back.
const resyncPeriod = 5 * time.Second

// Config is what an agent needs from its wiring.
type Config struct {
	NodeName string
	NodeIP   netip.Addr
	// SecondaryNodeIP is the node's InternalIP of the other family, on a
	// dual-stack node (kubelet's --node-ip v4,v6); zero when it has none.
	SecondaryNodeIP netip.Addr
	// HostNS is the named network namespace the node lives in ("" for the current one).
	HostNS string
	// DataDir holds the IPAM file, pod state and container logs.
	DataDir string
	// Executable is the minikit binary, re-executed to run built-in images.
	Executable string
	// Labels are added to the Node (e.g. node-role.kubernetes.io/control-plane).
	Labels  map[string]string
	Version string
	// ResolvConf is the node's resolver configuration file (default /etc/resolv.conf).
	ResolvConf string
	// PodResolvConf, when set, computes a pod's /etc/resolv.conf from the pod and the
	// node's file (the cluster DNS's dnsPolicy rules); unset, pods get the node's file.
	PodResolvConf func(pod *corev1.Pod, nodeResolv []byte) []byte
	Client        kubernetes.Interface
	Logger        *slog.Logger
	// ClusterCIDR is the whole pod network (default 10.244.0.0/16): traffic from it
	// to elsewhere is masqueraded.
	ClusterCIDR netip.Prefix
	// Token authenticates the API server's log requests; LogsAddr is where they are
	// served (default NodeIP:10250). Without a token, no log endpoint is served.
	Token    string
	LogsAddr string
	// LogDir is the node's log directory served at /logs/ (default /var/log,
	// as the kubelet serves it).
	LogDir string
	// PodNetwork is how pods reach the other nodes' pods: PodNetworkHostGW
	// (the default) or PodNetworkVXLAN.
	PodNetwork string
	// Network builds the node's pod network once the node has its podCIDR.
	// Nil builds the kernel's, package cni's: the cni0 bridge, a netns, veth
	// and IP per pod, routes or a VXLAN device to the other nodes.
	Network func(podCIDR netip.Prefix) (Network, error)
	// IPTables holds the pods' masquerade and hostPort rules. Nil opens the
	// node's (iptables.New); without one, pods cannot reach outside the
	// cluster network.
	IPTables iptables.Interface
}

// Agent is a running node agent.
type Agent struct {
	cfg    Config
	client kubernetes.Interface
	log    *slog.Logger

	net  Network
	ipam *cni.IPAM
	pods corelisters.PodLister

	// podCIDR and secondaryPodCIDR are the node's pod ranges (spec.podCIDRs),
	// set once by Run before any pod starts.
	podCIDR, secondaryPodCIDR netip.Prefix

	// clock times container starts, exits and restart back-off, probes and
	// the resync; procs runs the containers' processes and prober their
	// probes. Tests replace all three (fake clock, processes and results).
	clock   clock.WithTickerAndDelayedExecution
	procs   processes
	prober  prober
	backoff *flowcontrol.Backoff

	ipt                     iptables.Interface
	masqApplied, masqJumped bool

	// vtepMAC is the MAC of this node's VXLAN device (vxlan mode), and
	// lastNetProblem the last unreachable-nodes message logged; both are
	// owned by the Run loop's syncNetwork.
	vtepMAC        net.HardwareAddr
	lastNetProblem string

	mu      sync.Mutex
	workers map[types.UID]*podWorker
	// live indexes containers by "UID/NAME" for the streaming handlers, which
	// run outside the pod workers that own the workers' maps.
	live   sync.Map
	ready  chan struct{}
	prefix string // netns prefix of this node's pods

	apiEnvState
	hostPorts hostPortState
}

// New checks cfg and returns an agent; Run starts it.
func New(cfg Config) (*Agent, error) {
	if cfg.NodeName == "" || cfg.Client == nil || cfg.DataDir == "" {
		return nil, errors.New("node agent needs a node name, a client and a data dir")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Executable == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding the minikit binary: %w", err)
		}
		cfg.Executable = exe
	}
	if !cfg.ClusterCIDR.IsValid() {
		cfg.ClusterCIDR = netip.MustParsePrefix("10.244.0.0/16")
	}
	if cfg.ResolvConf == "" {
		cfg.ResolvConf = "/etc/resolv.conf"
	}
	var err error
	if cfg.PodNetwork, err = ParsePodNetwork(cfg.PodNetwork); err != nil {
		return nil, err
	}
	if cfg.PodNetwork == PodNetworkVXLAN && !cfg.NodeIP.IsValid() {
		return nil, errors.New("the vxlan pod network needs the node's IP (--node-ip): its VXLAN device sends from it")
	}
	a := &Agent{
		cfg: cfg, client: cfg.Client, log: cfg.Logger.With("component", "node", "node", cfg.NodeName),
		workers: map[types.UID]*podWorker{}, ready: make(chan struct{}),
		prefix:    sandboxPrefix(cfg.NodeName, cfg.DataDir),
		hostPorts: hostPortState{kick: make(chan struct{}, 1)},
	}
	a.setClock(clock.RealClock{})
	a.procs, a.prober = hostProcesses{}, netProber{}
	return a, nil
}

// setClock makes c the agent's clock, and its restart back-off's.
func (a *Agent) setClock(c clock.WithTickerAndDelayedExecution) {
	a.clock = c
	a.backoff = flowcontrol.NewFakeBackOff(backoffInitial, backoffMax, c)
}

// Ready is closed once the node is registered, its bridge is up and pods are being synced.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// Run registers the node and runs until ctx ends. Pods keep running when it returns.
func (a *Agent) Run(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Join(a.cfg.DataDir, "pods"), 0o700); err != nil {
		return fmt.Errorf("creating agent data dir: %w", err)
	}
	node, err := a.register(ctx)
	if err != nil {
		return err
	}
	cidr, err := a.waitPodCIDR(ctx, node)
	if err != nil {
		return err
	}
	newNetwork := a.cfg.Network
	if newNetwork == nil {
		newNetwork = a.newCNINetwork
	}
	if a.net, err = newNetwork(cidr); err != nil {
		return err
	}
	if err := a.net.EnsureBridge(); err != nil {
		return fmt.Errorf("setting up cni0 for %s: %w", cidr, err)
	}
	if a.ipam, err = cni.NewIPAM(filepath.Join(a.cfg.DataDir, "ipam.json"), cidr); err != nil {
		return err
	}
	go a.heartbeat(ctx)
	go a.leaseLoop(ctx)
	if a.ipt = a.cfg.IPTables; a.ipt == nil {
		// The masquerade and hostPort rules are of the pod network's
		// primary family: ip6tables on an IPv6-only node.
		newIPT := iptables.New
		if cidr.Addr().Is6() {
			newIPT = iptables.NewIPv6
		}
		if a.ipt, err = newIPT(); err != nil {
			a.log.Warn("no iptables: pods cannot reach outside the cluster network", "err", err)
			a.ipt = nil
		}
	}

	factory := informers.NewSharedInformerFactoryWithOptions(a.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", a.cfg.NodeName).String()
	}))
	inf := factory.Core().V1().Pods()
	a.pods = inf.Lister()
	inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { a.podChanged(ctx, o) },
		UpdateFunc: func(_, o any) { a.podChanged(ctx, o) },
		DeleteFunc: func(o any) { a.podChanged(ctx, informer.Object(o)) },
	})
	nodeFactory := informers.NewSharedInformerFactory(a.client, 0)
	nodeInf := nodeFactory.Core().V1().Nodes()
	netSync := make(chan struct{}, 1)
	kick := func(any) {
		select {
		case netSync <- struct{}{}:
		default:
		}
	}
	// Entries deleted by hand (a route, the VXLAN device, a neighbour or FDB
	// entry) come back at once, not only at the next resync.
	if err := a.net.WatchPodNetwork(ctx.Done(), func() { kick(nil) }, func(err error) {
		if ctx.Err() == nil { // not the subscriptions' own end
			a.log.Warn("watching the node's pod network routes and devices; the resync still repairs them", "err", err)
		}
	}); err != nil {
		a.log.Warn("watching the node's pod network routes and devices; the resync still repairs them", "err", err)
	}
	nodeInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: kick, UpdateFunc: func(o, n any) {
			if o.(*corev1.Node).Spec.PodCIDR != n.(*corev1.Node).Spec.PodCIDR || internalIP(o.(*corev1.Node)) != internalIP(n.(*corev1.Node)) ||
				flannelChanged(o.(*corev1.Node), n.(*corev1.Node)) {
				kick(n)
			}
		}, DeleteFunc: kick,
	})
	factory.Start(ctx.Done())
	nodeFactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced, nodeInf.Informer().HasSynced) {
		return ctx.Err()
	}
	if err := a.adoptAndClean(ctx); err != nil {
		a.log.Error("cleaning up sandboxes of deleted pods", "err", err)
	}
	if a.cfg.Token != "" {
		addr := a.cfg.LogsAddr
		if addr == "" && a.cfg.NodeIP.IsValid() {
			addr = netip.AddrPortFrom(a.cfg.NodeIP, KubeletPort).String()
		}
		go func() {
			if err := a.serveLogs(ctx, addr, a.cfg.Token); err != nil {
				a.log.Error("serving container logs", "err", err)
			}
		}()
	}
	a.syncNetwork(nodeInf.Lister())
	a.syncHostPortsLogged()
	close(a.ready)
	a.log.Info("node agent ready", "podCIDR", cidr, "nodeIP", a.cfg.NodeIP)
	t := a.clock.NewTicker(resyncPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			a.stopWorkers()
			return nil
		case <-netSync:
			a.syncNetwork(nodeInf.Lister())
		case <-a.hostPorts.kick:
			a.syncHostPortsLogged()
		case <-t.C():
			a.syncNetwork(nodeInf.Lister())
			a.syncHostPortsLogged()
			if err := a.net.EnsureBridge(); err != nil {
				a.log.Error("repairing cni0", "err", err)
			}
			a.backoff.GC()
			a.mu.Lock()
			for _, w := range a.workers {
				w.wake()
			}
			a.mu.Unlock()
		}
	}
}

func (a *Agent) podChanged(ctx context.Context, o any) {
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	if len(podHostPorts(pod)) > 0 {
		a.kickHostPorts()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if ctx.Err() != nil {
		// The agent stops: stopWorkers waits for the workers it found, and
		// no new one may start behind its back (the informers still deliver).
		return
	}
	w, ok := a.workers[pod.UID]
	if !ok {
		w = newPodWorker(a, pod.Namespace, pod.Name, pod.UID)
		a.workers[pod.UID] = w
		go w.run(ctx)
	}
	w.wake()
}

func (a *Agent) workerDone(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.workers, uid)
}

func (a *Agent) stopWorkers() {
	a.mu.Lock()
	ws := make([]*podWorker, 0, len(a.workers))
	for _, w := range a.workers {
		ws = append(ws, w)
	}
	a.mu.Unlock()
	for _, w := range ws {
		<-w.done
	}
}

// AnnotationNetNSPrefix on a Node holds the prefix of its pods' network
// namespaces, so tools on the machine (minikit exec) find a pod's namespace.
const AnnotationNetNSPrefix = "minikit.io/netns-prefix"

// sandboxPrefix is unique to one agent instance (its node name and data dir), so
// agents that share /run/netns — every node of every lab on one machine — never
// mistake each other's pods for their own debris.
func sandboxPrefix(nodeName, dataDir string) string { return SandboxPrefix(nodeName, dataDir) }

// SandboxPrefix is the netns prefix of the agent of nodeName whose data dir is dataDir.
func SandboxPrefix(nodeName, dataDir string) string {
	sum := sha256.Sum256([]byte(nodeName + "\x00" + dataDir))
	return "mk-" + hex.EncodeToString(sum[:3]) + "-"
}

// PodSandboxName is the network namespace of pod uid on node n.
func PodSandboxName(n *corev1.Node, uid types.UID) (string, error) {
	prefix := n.Annotations[AnnotationNetNSPrefix]
	if prefix == "" {
		return "", fmt.Errorf("node %q does not say where its pods' namespaces are (annotation %s)", n.Name, AnnotationNetNSPrefix)
	}
	return prefix + strings.ReplaceAll(string(uid), "-", "")[:10], nil
}

func (a *Agent) sandboxName(uid types.UID) string {
	return a.prefix + strings.ReplaceAll(string(uid), "-", "")[:10]
}

func (a *Agent) hostVeth(uid types.UID) string {
	sum := sha256.Sum256([]byte(uid))
	return "veth" + hex.EncodeToString(sum[:4])
}

// register creates or refreshes this agent's Node object.
func (a *Agent) register(ctx context.Context) (*corev1.Node, error) {
	for {
		node, err := a.client.CoreV1().Nodes().Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.cfg.NodeName}}
			a.fillNode(node)
			node, err = a.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
		} else if err == nil {
			a.fillNode(node)
			node, err = a.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
			if err == nil {
				a.fillNode(node)
				node, err = a.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
			}
			if apierrors.IsConflict(err) {
				continue
			}
		}
		if err != nil {
			return nil, fmt.Errorf("registering node %q: %w", a.cfg.NodeName, err)
		}
		return node, nil
	}
}

func (a *Agent) fillNode(n *corev1.Node) {
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels["kubernetes.io/hostname"] = a.cfg.NodeName
	n.Labels["kubernetes.io/os"] = runtime.GOOS
	n.Labels["kubernetes.io/arch"] = runtime.GOARCH
	n.Labels["beta.kubernetes.io/os"] = runtime.GOOS
	n.Labels["beta.kubernetes.io/arch"] = runtime.GOARCH
	for k, v := range a.cfg.Labels {
		n.Labels[k] = v
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[AnnotationNetNSPrefix] = a.prefix
	now := metav1.Now()
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: a.cfg.NodeName}}
	if a.cfg.NodeIP.IsValid() {
		n.Status.Addresses = append([]corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: a.cfg.NodeIP.String()}}, n.Status.Addresses...)
	}
	if ip := a.cfg.SecondaryNodeIP; ip.IsValid() {
		// After the primary InternalIP, before the hostname, as the kubelet
		// lists a dual-stack node's addresses.
		host := n.Status.Addresses[len(n.Status.Addresses)-1]
		n.Status.Addresses = append(n.Status.Addresses[:len(n.Status.Addresses)-1],
			corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip.String()}, host)
	}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = 10250
	n.Status.Capacity = corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(memTotal(), resource.BinarySI),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	n.Status.Allocatable = n.Status.Capacity
	var uts unix.Utsname
	unix.Uname(&uts)
	n.Status.NodeInfo = corev1.NodeSystemInfo{
		KubeletVersion: KubeletVersion, KubeProxyVersion: KubeletVersion,
		ContainerRuntimeVersion: "minikit://" + a.cfg.Version,
		OperatingSystem:         runtime.GOOS, Architecture: runtime.GOARCH,
		KernelVersion: unix.ByteSliceToString(uts.Release[:]), OSImage: osImage(),
		MachineID: machineID(), BootID: bootID(),
	}
	// A condition whose status is unchanged keeps its transition time, as
	// the kubelet's setters do; only the heartbeat moves.
	prev := n.Status.Conditions
	n.Status.Conditions = []corev1.NodeCondition{
		cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available", now),
		cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure", now),
		cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available", now),
		cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status", now),
	}
	for i, c := range n.Status.Conditions {
		for _, old := range prev {
			if old.Type == c.Type && old.Status == c.Status && !old.LastTransitionTime.IsZero() {
				n.Status.Conditions[i].LastTransitionTime = old.LastTransitionTime
			}
		}
	}
}

func cond(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string, now metav1.Time) corev1.NodeCondition {
	return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
}

// waitPodCIDR waits for the node IPAM controller to assign the node a podCIDR.
func (a *Agent) waitPodCIDR(ctx context.Context, node *corev1.Node) (netip.Prefix, error) {
	for {
		if node.Spec.PodCIDR != "" {
			p, err := netip.ParsePrefix(node.Spec.PodCIDR)
			if err != nil {
				return netip.Prefix{}, fmt.Errorf("parsing podCIDR %q of node %q: %w", node.Spec.PodCIDR, node.Name, err)
			}
			a.podCIDR, a.secondaryPodCIDR = p, secondaryPodCIDR(node)
			return p, nil
		}
		select {
		case <-ctx.Done():
			return netip.Prefix{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		n, err := a.client.CoreV1().Nodes().Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
		if err == nil {
			node = n
		}
	}
}

// heartbeat keeps the node's conditions fresh so the cluster sees it Ready.
func (a *Agent) heartbeat(ctx context.Context) {
	t := time.NewTicker(heartbeatPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := a.client.CoreV1().Nodes().Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
		if err == nil {
			a.fillNode(n)
			_, err = a.client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		}
		if err != nil && ctx.Err() == nil {
			a.log.Warn("node heartbeat", "err", err)
		}
	}
}

func memTotal() int64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}

func osImage() string {
	b, _ := os.ReadFile("/etc/os-release")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return "Linux"
}

func machineID() string {
	b, _ := os.ReadFile("/etc/machine-id")
	return strings.TrimSpace(string(b))
}

func bootID() string {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return strings.TrimSpace(string(b))
}
