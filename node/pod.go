package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/minikit/minikit/sandbox"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// podState is what the agent persists per pod so a restarted agent adopts the
// pod's sandbox and processes instead of recreating them.
type podState struct {
	Namespace  string                     `json:"namespace"`
	Name       string                     `json:"name"`
	UID        types.UID                  `json:"uid"`
	NetNS      string                     `json:"netns"`
	HostVeth   string                     `json:"hostVeth"`
	IP         string                     `json:"ip"`
	StartTime  time.Time                  `json:"startTime"`
	Containers map[string]*containerState `json:"containers"`
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
			// The agent stops; the pod's processes keep running and are adopted later.
			for _, c := range w.containers {
				c.detach()
			}
			return
		case <-w.wakeCh:
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
		grace := int64(30)
		if pod.DeletionGracePeriodSeconds != nil {
			grace = *pod.DeletionGracePeriodSeconds
		}
		deadline := time.Now().Add(time.Duration(grace) * time.Second)
		w.runPreStop(ctx, pod, deadline)
		// A hook that used up the grace period still leaves the process a moment
		// between SIGTERM and SIGKILL, as the kubelet's 2s minimum does.
		w.terminate(max(time.Until(deadline), 2*time.Second))
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
	if podFinished(pod) {
		return false, w.updateStatus(ctx, pod)
	}
	if err := w.ensureSandbox(pod); err != nil {
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
	return false, w.updateStatus(ctx, pod)
}

func podFinished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// ensureSandbox creates or repairs the pod's netns, veth, address and namespaces.
func (w *podWorker) ensureSandbox(pod *corev1.Pod) error {
	if w.state == nil {
		w.state = &podState{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
			NetNS: w.a.sandboxName(pod.UID), HostVeth: w.a.hostVeth(pod.UID), StartTime: time.Now(),
			Containers: map[string]*containerState{}}
	}
	ip, err := w.a.ipam.Allocate(string(pod.UID))
	if err != nil {
		return fmt.Errorf("allocating an IP for pod %q: %w", pod.Namespace+"/"+pod.Name, err)
	}
	if w.state.IP != ip.String() {
		w.state.IP = ip.String()
		if err := w.saveState(); err != nil {
			return err
		}
	}
	pn := sandbox.PodNet{NetNS: w.state.NetNS, HostVeth: w.state.HostVeth, IP: ip}
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
		if _, err := w.a.net.SetupPod(pn); err != nil {
			return fmt.Errorf("setting up sandbox of pod %q: %w", pod.Namespace+"/"+pod.Name, err)
		}
	}
	if err := w.writePodFiles(pod, ip); err != nil {
		return err
	}
	binds, err := w.volumeBinds(pod)
	if err != nil {
		return err
	}
	if !sandbox.PodNamespacesExist(w.state.NetNS) {
		if err := sandbox.CreatePodNamespacesWith(w.state.NetNS, podHostname(pod), w.resolvPath(), w.hostsPath(), binds); err != nil {
			return err
		}
	}
	return nil
}

func podHostname(pod *corev1.Pod) string {
	h := pod.Name
	if pod.Spec.Hostname != "" {
		h = pod.Spec.Hostname
	}
	if len(h) > 63 {
		h = strings.TrimRight(h[:63], "-.")
	}
	return h
}

func (w *podWorker) resolvPath() string { return filepath.Join(w.dir(), "resolv.conf") }
func (w *podWorker) hostsPath() string  { return filepath.Join(w.dir(), "hosts") }

// writePodFiles writes the pod's /etc/hosts and /etc/resolv.conf in place (the
// bind mounts hold the inodes).
func (w *podWorker) writePodFiles(pod *corev1.Pod, ip netip.Addr) error {
	if err := os.MkdirAll(w.dir(), 0o755); err != nil {
		return err
	}
	host := podHostname(pod)
	fqdn := host
	if pod.Spec.Subdomain != "" {
		fqdn = host + "." + pod.Spec.Subdomain + "." + pod.Namespace + ".svc.cluster.local"
	}
	hosts := "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n" +
		ip.String() + "\t" + fqdn
	if fqdn != host {
		hosts += "\t" + host
	}
	hosts += "\n"
	for _, ha := range pod.Spec.HostAliases {
		hosts += ha.IP + "\t" + strings.Join(ha.Hostnames, "\t") + "\n"
	}
	resolv, err := os.ReadFile(w.a.cfg.ResolvConf)
	if err != nil {
		resolv = nil
	}
	if w.a.cfg.PodResolvConf != nil {
		resolv = w.a.cfg.PodResolvConf(pod, resolv)
	}
	for path, content := range map[string][]byte{w.hostsPath(): []byte(hosts), w.resolvPath(): resolv} {
		if old, err := os.ReadFile(path); err == nil && string(old) == string(content) {
			continue
		}
		if err := os.WriteFile(path, content, 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return nil
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
	// Whatever still runs in the pod's netns is the pod's (an unrecorded
	// container, a process it left behind): it would keep the namespace alive.
	killInNetNS(name, nil)
	if err := sandbox.DeletePodNamespaces(name); err != nil {
		return err
	}
	if err := w.a.net.TeardownPod(name); err != nil {
		return err
	}
	if err := w.a.ipam.Release(string(w.uid)); err != nil {
		return err
	}
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

// statusEqual compares statuses ignoring the timestamps of conditions.
func statusEqual(a, b corev1.PodStatus) bool { return statusJSON(a) == statusJSON(b) }
