package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/minikit/minikit/internal/cni"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// podState is what the agent persists per pod so a restarted agent adopts the
// pod's sandbox and processes instead of recreating them.
type podState struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	NetNS     string    `json:"netns"`
	HostVeth  string    `json:"hostVeth"`
	IP        string    `json:"ip"`
	// HostNetwork pods run in the node's network namespace: NetNS names only
	// their UTS and mount namespaces, and IP is the node's.
	HostNetwork bool                       `json:"hostNetwork,omitempty"`
	StartTime   time.Time                  `json:"startTime"`
	Containers  map[string]*containerState `json:"containers"`
	// Evicted is the eviction message of a pod the agent evicted (eviction.go):
	// it stays Failed with it, and nothing of it starts again.
	Evicted string `json:"evicted,omitempty"`
}

// podWorker owns one pod: it is the only goroutine that touches the pod's sandbox,
// processes and status, so per-pod work needs no locks.
type podWorker struct {
	a         *Agent
	namespace string
	name      string
	uid       types.UID
	wakeCh    chan struct{}
	done      chan struct{}

	state      *podState
	containers map[string]*container
	lastStatus *corev1.PodStatus
	sandboxOK  bool
	// orphansSwept is set once the pod's netns was checked for processes a
	// killed agent started but never recorded (sweepOrphans).
	orphansSwept bool
	sandboxMsg   string
	token        tokenState
	// admitted is set once the pod passed admission (its hostPorts are free).
	admitted bool
	// volumesRefreshAt is when configMap, secret and downwardAPI volumes are
	// next rewritten from the API.
	volumesRefreshAt time.Time
	// termStart is when the pod's termination began (SIGTERM sent), zero
	// until it is deleted; termDeadline is when its containers get SIGKILL.
	termStart, termDeadline time.Time
	// storageCheckedAt is when the pod's storage was last measured (checkStorage).
	storageCheckedAt time.Time
}

func newPodWorker(a *Agent, ns, name string, uid types.UID) *podWorker {
	return &podWorker{a: a, namespace: ns, name: name, uid: uid, wakeCh: make(chan struct{}, 1),
		done: make(chan struct{}), containers: map[string]*container{}}
}

func (w *podWorker) wake() {
	select {
	case w.wakeCh <- struct{}{}:
	default:
	}
}

func (w *podWorker) dir() string { return filepath.Join(w.a.cfg.DataDir, "pods", string(w.uid)) }

func (w *podWorker) logf(msg string, args ...any) {
	w.a.log.Info(msg, append([]any{"pod", w.namespace + "/" + w.name}, args...)...)
}

func (w *podWorker) run(ctx context.Context) {
	defer close(w.done)
	defer w.a.workerDone(w.uid)
	w.loadState()
	for {
		select {
		case <-ctx.Done():
		case <-w.wakeCh:
		}
		if ctx.Err() != nil {
			// The agent stops (a wake-up that came with it is no reason to
			// sync); the pod's processes keep running and are adopted later.
			for _, c := range w.containers {
				c.detach()
			}
			return
		}
		finished, err := w.sync(ctx)
		if err != nil && ctx.Err() == nil {
			w.a.log.Error("syncing pod", "pod", w.namespace+"/"+w.name, "err", err)
			time.AfterFunc(time.Second, w.wake)
		}
		if finished {
			return
		}
	}
}

// sync converges one pod. It returns true when the pod is gone and the worker ends.
func (w *podWorker) sync(ctx context.Context) (bool, error) {
	pod, err := w.a.pods.Pods(w.namespace).Get(w.name)
	if apierrors.IsNotFound(err) || (err == nil && pod.UID != w.uid) {
		w.terminate(30 * time.Second)
		return true, w.cleanup()
	}
	if err != nil {
		return false, err
	}
	if pod.DeletionTimestamp != nil {
		if !w.terminateBy(ctx, pod) {
			// Terminating: the containers had SIGTERM and run out their grace
			// period with their probes, and the status keeps saying how they
			// are (a readiness probe failing after SIGTERM makes the pod
			// unready; its endpoints turn serving=false), as the kubelet's
			// status manager keeps reporting a terminating pod.
			return false, w.updateStatus(ctx, pod)
		}
		for _, c := range w.containers {
			c.kill("grace period over")
		}
		if err := w.cleanup(); err != nil {
			return false, err
		}
		zero := int64(0)
		uid := w.uid
		err := w.a.client.CoreV1().Pods(w.namespace).Delete(ctx, w.name, metav1.DeleteOptions{
			GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return false, fmt.Errorf("deleting terminated pod: %w", err)
		}
		return true, nil
	}
	if podFinished(pod) || w.evicted() {
		if w.state == nil && len(w.containers) == 0 {
			// Finished before this agent ran anything of it (rejected at
			// admission, or done before a restart): its status stands.
			return false, nil
		}
		// A finished pod holds no hostPorts, as the scheduler counts them.
		w.a.forgetHostPorts(w.uid)
		// Its sidecars have nothing left to serve: they are stopped, as the
		// kubelet stops restartable init containers after the main ones.
		for _, c := range w.containers {
			c.mu.Lock()
			running := c.running
			c.stopping = c.stopping || running
			c.mu.Unlock()
			if running {
				c.signal(sigterm)
			}
		}
		return false, w.updateStatus(ctx, pod)
	}
	if !w.admitted {
		if !w.a.admitHostPorts(pod, w.state != nil) {
			return false, w.reject(ctx, pod, rejectReasonNodePorts, rejectMessageNodePorts)
		}
		w.admitted = true
	}
	if err := w.ensureSandbox(pod); err != nil {
		w.sandboxOK, w.sandboxMsg = false, err.Error()
		w.updateStatus(ctx, pod)
		return false, err
	}
	if err := w.ensureVolumeFiles(ctx, pod); err != nil {
		w.sandboxOK, w.sandboxMsg = false, err.Error()
		w.updateStatus(ctx, pod)
		return false, err
	}
	if err := w.ensureServiceAccountFiles(ctx, pod); err != nil {
		w.sandboxOK, w.sandboxMsg = false, err.Error()
		w.updateStatus(ctx, pod)
		return false, err
	}
	w.sandboxOK = true
	if !w.orphansSwept {
		w.sweepOrphans()
		w.orphansSwept = true
	}
	w.ensureContainers(ctx, pod)
	w.checkStorage(pod)
	return false, w.updateStatus(ctx, pod)
}

// evicted says whether the agent evicted the pod.
func (w *podWorker) evicted() bool { return w.state != nil && w.state.Evicted != "" }

func podFinished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// ensureSandbox creates or repairs the pod's netns, veth, address and namespaces.
func (w *podWorker) ensureSandbox(pod *corev1.Pod) error {
	if w.state == nil {
		w.state = &podState{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
			NetNS: w.a.sandboxName(pod.UID), HostVeth: w.a.hostVeth(pod.UID), StartTime: time.Now(),
			HostNetwork: pod.Spec.HostNetwork, Containers: map[string]*containerState{}}
	}
	var ip netip.Addr
	if pod.Spec.HostNetwork {
		if !w.a.cfg.NodeIP.IsValid() {
			return fmt.Errorf("pod %q uses the host network but the node has no InternalIP", pod.Namespace+"/"+pod.Name)
		}
		ip = w.a.cfg.NodeIP
		if w.state.IP != ip.String() || !w.state.HostNetwork {
			w.state.IP, w.state.HostNetwork = ip.String(), true
			if err := w.saveState(); err != nil {
				return err
			}
		}
	} else {
		var err error
		if ip, err = w.a.ipam.Allocate(string(pod.UID)); err != nil {
			return fmt.Errorf("allocating an IP for pod %q: %w", pod.Namespace+"/"+pod.Name, err)
		}
		if w.state.IP != ip.String() {
			w.state.IP = ip.String()
			if err := w.saveState(); err != nil {
				return err
			}
		}
		pn := cni.PodNet{NetNS: w.state.NetNS, HostVeth: w.state.HostVeth, IP: ip}
		if ok, why := w.a.net.PodOK(pn); !ok {
			if why != "netns missing" || len(w.containers) > 0 {
				w.logf("repairing pod sandbox", "problem", why)
			}
			if why == "netns missing" {
				// Processes inside a vanished netns are cut off: restart them in the new one.
				for _, c := range w.containers {
					c.kill("sandbox recreated")
				}
			}
			if err := w.a.net.SetupPod(pn); err != nil {
				return fmt.Errorf("setting up sandbox of pod %q: %w", pod.Namespace+"/"+pod.Name, err)
			}
		}
	}
	if err := w.writePodFiles(pod, ip); err != nil {
		return err
	}
	if !w.a.net.PodNamespacesExist(w.state.NetNS) {
		binds, err := w.volumeBinds(pod)
		if err != nil {
			return err
		}
		if err := w.a.net.CreatePodNamespaces(w.state.NetNS, podHostname(pod), w.resolvPath(), w.hostsPath(), binds); err != nil {
			return err
		}
	}
	return nil
}

// podHostname is the pod's kernel hostname: its name, spec.hostname or
// spec.hostnameOverride (truncated to 63 characters as the kubelet does), the
// FQDN when setHostnameAsFQDN asks for it, or for a hostNetwork pod the
// node's name.
func podHostname(pod *corev1.Pod) string {
	if pod.Spec.HostNetwork && pod.Spec.NodeName != "" {
		return pod.Spec.NodeName
	}
	host, domain := podHostnameDomain(pod)
	if pod.Spec.SetHostnameAsFQDN != nil && *pod.Spec.SetHostnameAsFQDN && domain != "" && len(host)+1+len(domain) <= 64 {
		return host + "." + domain
	}
	return host
}

// podHostnameDomain is the kubelet's GeneratePodHostNameAndDomain: the host
// name, and SUBDOMAIN.NS.svc.CLUSTER when the pod has a subdomain (none with
// a hostnameOverride).
func podHostnameDomain(pod *corev1.Pod) (string, string) {
	truncate := func(h string) string {
		if len(h) > 63 {
			h = strings.TrimRight(h[:63], "-.")
		}
		return h
	}
	if o := pod.Spec.HostnameOverride; o != nil && *o != "" {
		return truncate(*o), ""
	}
	h := pod.Name
	if pod.Spec.Hostname != "" {
		h = pod.Spec.Hostname
	}
	if pod.Spec.Subdomain == "" {
		return truncate(h), ""
	}
	return truncate(h), pod.Spec.Subdomain + "." + pod.Namespace + ".svc." + clusterDomain
}

func (w *podWorker) resolvPath() string { return filepath.Join(w.dir(), "resolv.conf") }
func (w *podWorker) hostsPath() string  { return filepath.Join(w.dir(), "hosts") }

// clusterDomain is the DNS domain of the pods' FQDNs in /etc/hosts.
const clusterDomain = "cluster.local"

// writePodFiles writes the pod's /etc/hosts and /etc/resolv.conf in place (the
// bind mounts hold the inodes).
func (w *podWorker) writePodFiles(pod *corev1.Pod, ip netip.Addr) error {
	if err := os.MkdirAll(w.dir(), 0o755); err != nil {
		return err
	}
	var nodeHosts []byte
	if pod.Spec.HostNetwork {
		var err error
		if nodeHosts, err = nodeHostsFile(); err != nil {
			return err
		}
	}
	hosts := podHostsFile(pod, []string{ip.String()}, nodeHosts)
	resolv, err := os.ReadFile(w.a.cfg.ResolvConf)
	if err != nil {
		resolv = nil
	}
	if w.a.cfg.PodResolvConf != nil {
		resolv = w.a.cfg.PodResolvConf(pod, resolv)
	}
	for path, content := range map[string][]byte{w.hostsPath(): hosts, w.resolvPath(): resolv} {
		if old, err := os.ReadFile(path); err == nil && string(old) == string(content) {
			continue
		}
		if err := os.WriteFile(path, content, 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return nil
}

// terminateBy starts and follows the termination of a pod being deleted:
// the first time, the preStop hooks run and every container gets SIGTERM;
// it reports true once every container has exited or the grace period
// (shortened by a later delete with a smaller one) is over, and until then
// wakes the worker when the period ends.
func (w *podWorker) terminateBy(ctx context.Context, pod *corev1.Pod) bool {
	grace := int64(30)
	if pod.DeletionGracePeriodSeconds != nil {
		grace = *pod.DeletionGracePeriodSeconds
	}
	now := time.Now()
	if w.termStart.IsZero() {
		w.termStart = now
		deadline := now.Add(time.Duration(grace) * time.Second)
		w.runPreStop(ctx, pod, deadline)
		for _, c := range w.containers {
			c.stopping = true
		}
		for _, c := range w.containers {
			c.signal(sigterm)
		}
		// A hook that used up the grace period still leaves the process a
		// moment between SIGTERM and SIGKILL, as the kubelet's 2s minimum does.
		w.termDeadline = deadline
		if min2 := time.Now().Add(2 * time.Second); deadline.Before(min2) {
			w.termDeadline = min2
		}
		time.AfterFunc(time.Until(w.termDeadline), w.wake)
	} else if d := w.termStart.Add(time.Duration(grace) * time.Second); d.Before(w.termDeadline) {
		w.termDeadline = d
		time.AfterFunc(time.Until(d), w.wake)
	}
	if !time.Now().Before(w.termDeadline) {
		return true
	}
	for _, c := range w.containers {
		c.mu.Lock()
		running := c.running
		c.mu.Unlock()
		if running {
			return false
		}
	}
	return true
}

// terminate stops every container: SIGTERM, then SIGKILL after the grace period.
func (w *podWorker) terminate(grace time.Duration) {
	for _, c := range w.containers {
		c.stopping = true
	}
	deadline := time.Now().Add(grace)
	for _, c := range w.containers {
		c.signal(sigterm)
	}
	for _, c := range w.containers {
		c.waitUntil(deadline)
	}
	for _, c := range w.containers {
		c.kill("grace period over")
	}
}

// cleanup removes the pod's sandbox, IP and files.
func (w *podWorker) cleanup() error {
	name := w.a.sandboxName(w.uid)
	if w.state != nil {
		name = w.state.NetNS
	}
	for _, c := range w.containers {
		c.closeProbes()
		w.untrack(c)
	}
	// Whatever still runs in the pod's namespaces is the pod's (an unrecorded
	// container, a process it left behind): it would keep them alive.
	killInPod(name, nil)
	if err := w.a.net.DeletePodNamespaces(name); err != nil {
		return err
	}
	// A hostNetwork pod has no netns, veth or IP of its own: the node's
	// network namespace is left alone.
	if w.state == nil || !w.state.HostNetwork {
		if err := w.a.net.TeardownPod(name); err != nil {
			return err
		}
	}
	if err := w.a.ipam.Release(string(w.uid)); err != nil {
		return err
	}
	w.a.forgetHostPorts(w.uid)
	return os.RemoveAll(w.dir())
}

func (w *podWorker) statePath() string { return filepath.Join(w.dir(), "state.json") }

func (w *podWorker) loadState() {
	b, err := os.ReadFile(w.statePath())
	if err != nil {
		return
	}
	var st podState
	if json.Unmarshal(b, &st) != nil {
		return
	}
	if st.Containers == nil {
		st.Containers = map[string]*containerState{}
	}
	w.state = &st
	for name, cs := range st.Containers {
		if c := adoptContainer(w, name, cs); c != nil {
			w.containers[name] = c
			w.track(c)
		}
	}
}

func (w *podWorker) saveState() error {
	if w.state == nil {
		return nil
	}
	if err := os.MkdirAll(w.dir(), 0o755); err != nil {
		return err
	}
	for name, c := range w.containers {
		w.state.Containers[name] = c.persisted()
	}
	b, _ := json.Marshal(w.state)
	tmp := w.statePath() + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	f.Sync()
	f.Close()
	return os.Rename(tmp, w.statePath())
}

// updateStatus writes the pod's status when it changed.
func (w *podWorker) updateStatus(ctx context.Context, pod *corev1.Pod) error {
	st := w.computeStatus(pod)
	if w.lastStatus != nil && statusEqual(*w.lastStatus, st) && statusEqual(pod.Status, st) {
		return nil
	}
	if statusEqual(pod.Status, st) {
		w.lastStatus = &st
		return nil
	}
	p := pod.DeepCopy()
	p.Status = st
	_, err := w.a.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		w.wake()
		return nil
	}
	if err != nil {
		return fmt.Errorf("updating status of pod %q: %w", pod.Namespace+"/"+pod.Name, err)
	}
	w.lastStatus = &st
	return nil
}

// reject fails a pod the node cannot run, as the kubelet's admission does.
func (w *podWorker) reject(ctx context.Context, pod *corev1.Pod, reason, msg string) error {
	p := pod.DeepCopy()
	p.Status = corev1.PodStatus{Phase: corev1.PodFailed, Reason: reason, Message: msg, QOSClass: pod.Status.QOSClass}
	if w.a.cfg.NodeIP.IsValid() {
		p.Status.HostIP = w.a.cfg.NodeIP.String()
		p.Status.HostIPs = []corev1.HostIP{{IP: p.Status.HostIP}}
	}
	_, err := w.a.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		w.wake()
		return nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("rejecting pod %q: %w", pod.Namespace+"/"+pod.Name, err)
	}
	return nil
}

// statusEqual compares statuses ignoring the timestamps of conditions.
func statusEqual(a, b corev1.PodStatus) bool { return statusJSON(a) == statusJSON(b) }
