package kubelet

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/minikit/minikit/internal/images"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

var sigterm = syscall.SIGTERM

// Restart back-off as the kubelet does it (its backOffPeriod and
// MaxContainerBackOff, with client-go's flowcontrol.Backoff): the first
// restart is immediate, then 10s doubling to 5 minutes, reset once a
// container ran for twice the maximum since its last restart.
const (
	backoffInitial = 10 * time.Second
	backoffMax     = 5 * time.Minute
)

// containerState is the persisted part of a container.
type containerState struct {
	PID          int       `json:"pid"`
	ProcStart    uint64    `json:"procStart"` // /proc/PID/stat starttime, to tell PID reuse
	StartedAt    time.Time `json:"startedAt"`
	RestartCount int32     `json:"restartCount"`
	Image        string    `json:"image"`
}

// container is one running (or waiting) container process of a pod.
type container struct {
	w    *podWorker
	name string

	mu           sync.Mutex
	pid          int
	procStart    uint64
	startedAt    time.Time
	running      bool
	exited       chan struct{}
	restartCount int32
	lastTerm     *corev1.ContainerStateTerminated
	// finishedAt is when the last run ended (lastTerm's FinishedAt before it
	// is truncated to seconds), the back-off's event time.
	finishedAt  time.Time
	waitReason  string
	waitMessage string
	stopping    bool
	image       string

	ready, started bool
	// adopted is set for a process a previous agent started, until its probe
	// state is initialised from the pod (initAdopted).
	adopted        bool
	probeCancel    context.CancelFunc
	livenessFailed bool

	// stdin is the write end of the container's stdin (a pipe, or its
	// terminal's master ptmx) for containers with stdin: true, held for attach.
	// It is lost with the agent: a container adopted after a restart has none.
	stdin io.WriteCloser
	ptmx  *os.File
}

func (c *container) persisted() *containerState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return &containerState{PID: c.pid, ProcStart: c.procStart, StartedAt: c.startedAt, RestartCount: c.restartCount, Image: c.image}
}

// adoptContainer picks up a process a previous agent started, if it still runs.
func adoptContainer(w *podWorker, name string, cs *containerState) *container {
	c := &container{w: w, name: name, restartCount: cs.RestartCount, image: cs.Image}
	if cs.PID > 0 && w.a.procs.startTime(cs.PID) == cs.ProcStart && cs.ProcStart != 0 {
		c.pid, c.procStart, c.startedAt, c.running = cs.PID, cs.ProcStart, cs.StartedAt, true
		c.exited, c.adopted = make(chan struct{}), true
		go c.watchAdopted()
		w.logf("adopted running container", "container", name, "pid", cs.PID)
	}
	return c
}

// initAdopted gives a container adopted from a previous agent the probe state
// it had. It started before this agent did, so it counts as started (the kubelet
// treats a container older than itself the same way), and it keeps the readiness
// the pod's status last reported until its readiness probe says otherwise: an
// agent restart must not take serving pods out of their Services' endpoints, nor
// leave a container without a readiness probe unready for ever.
func (c *container) initAdopted(pod *corev1.Pod, spec corev1.Container) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.adopted {
		return
	}
	c.adopted, c.started, c.ready = false, true, spec.ReadinessProbe == nil
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == spec.Name && cs.Ready {
			c.ready = true
		}
	}
}

// watchAdopted polls an adopted process (not our child, so it cannot be waited for).
func (c *container) watchAdopted() {
	for {
		time.Sleep(500 * time.Millisecond)
		c.mu.Lock()
		pid, start, detached := c.pid, c.procStart, !c.running && c.exited == nil
		c.mu.Unlock()
		if detached {
			return
		}
		if c.w.a.procs.startTime(pid) != start {
			// Exit code unknown: the process was reaped by init.
			c.finished(-1, "Unknown")
			return
		}
	}
}

func (w *podWorker) logPath(name string) string {
	return filepath.Join(w.dir(), "logs", name+".log")
}

// ensureContainers starts containers that should run and are due to, in the
// kubelet's order: init containers one at a time, each to completion, except
// that a restartable one (a sidecar: restartPolicy Always) only has to have
// started before the next begins, and keeps running, restarted whatever its
// exit code; then the main containers together.
func (w *podWorker) ensureContainers(ctx context.Context, pod *corev1.Pod) {
	if !w.initialized(pod) {
		for _, spec := range pod.Spec.InitContainers {
			if isSidecar(spec) {
				c := w.ensureContainer(ctx, pod, spec, true)
				c.mu.Lock()
				started := c.running && c.started
				c.mu.Unlock()
				if !started {
					return
				}
				continue
			}
			c := w.containers[spec.Name]
			if c != nil && c.succeeded() {
				continue
			}
			w.ensureContainer(ctx, pod, spec, pod.Spec.RestartPolicy != corev1.RestartPolicyNever)
			return
		}
	}
	for _, spec := range pod.Spec.InitContainers {
		if isSidecar(spec) {
			w.ensureContainer(ctx, pod, spec, true)
		}
	}
	for _, spec := range pod.Spec.Containers {
		w.ensureContainer(ctx, pod, spec, false)
	}
}

// initialized reports whether the pod's init containers are done: the
// regular ones exited 0 (in this agent's memory, or in the pod's status
// after an agent restart) and a main container was started once, which
// the kubelet only does after initialization.
func (w *podWorker) initialized(pod *corev1.Pod) bool {
	for _, spec := range pod.Spec.Containers {
		if w.containers[spec.Name] != nil {
			return true
		}
	}
	for _, spec := range pod.Spec.InitContainers {
		if isSidecar(spec) {
			continue
		}
		if c := w.containers[spec.Name]; c != nil && c.succeeded() {
			continue
		}
		done := false
		for _, cs := range pod.Status.InitContainerStatuses {
			if cs.Name == spec.Name && cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0 {
				done = true
			}
		}
		if !done {
			return false
		}
	}
	return true
}

// isSidecar is a restartable init container.
func isSidecar(c corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// succeeded reports whether the container's last run exited 0 and it does
// not run now.
func (c *container) succeeded() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.running && c.lastTerm != nil && c.lastTerm.ExitCode == 0
}

// ensureContainer starts one container unless it runs, it ended and its
// restart rule says it stays ended, or it waits out its back-off.
// alwaysRestart is a sidecar's rule (and a failed init container's unless
// the pod's restartPolicy is Never); otherwise the pod's restartPolicy
// decides.
func (w *podWorker) ensureContainer(ctx context.Context, pod *corev1.Pod, spec corev1.Container, alwaysRestart bool) *container {
	c := w.containers[spec.Name]
	if c == nil {
		c = &container{w: w, name: spec.Name}
		w.containers[spec.Name] = c
		w.track(c)
	}
	c.mu.Lock()
	running, lastTerm, finishedAt := c.running, c.lastTerm, c.finishedAt
	c.mu.Unlock()
	if running {
		c.initAdopted(pod, spec)
		c.ensureProbes(ctx, pod, spec)
		return c
	}
	if lastTerm != nil && !alwaysRestart && !shouldRestart(pod.Spec.RestartPolicy, lastTerm.ExitCode) {
		return c
	}
	if lastTerm != nil {
		if wait, backoff := w.a.restartDelay(w.uid, spec.Name, finishedAt); wait > 0 {
			c.mu.Lock()
			c.waitReason, c.waitMessage = "CrashLoopBackOff",
				fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", backoff, spec.Name, pod.Name, pod.Namespace, pod.UID)
			c.mu.Unlock()
			w.a.clock.AfterFunc(wait, w.wake)
			return c
		}
	}
	if err := c.start(pod, spec); err != nil {
		w.a.log.Warn("starting container", "pod", pod.Namespace+"/"+pod.Name, "container", spec.Name, "err", err)
		return c
	}
	c.ensureProbes(ctx, pod, spec)
	w.saveState()
	return c
}

// restartDelay is the kubelet's doBackOff for a container that ended at
// finishedAt: how long it must still wait before its restart (0: restart now,
// and the back-off grows for the next time), and the back-off it is in.
func (a *Agent) restartDelay(uid types.UID, name string, finishedAt time.Time) (wait, backoff time.Duration) {
	key := string(uid) + "/" + name
	if a.backoff.IsInBackOffSince(key, finishedAt) {
		backoff = a.backoff.Get(key)
		return max(backoff-a.clock.Since(finishedAt), time.Nanosecond), backoff
	}
	a.backoff.Next(key, finishedAt)
	return 0, a.backoff.Get(key)
}

func shouldRestart(policy corev1.RestartPolicy, code int32) bool {
	switch policy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return code != 0
	}
	return true
}

// start runs the container's process inside the pod's namespaces.
func (c *container) start(pod *corev1.Pod, spec corev1.Container) error {
	w := c.w
	// The container's own env wins over the Service variables (it comes later).
	env, lookup := containerEnv(pod, spec, w.a.cfg.NodeName, w.a.podIPs(w.state.IP), w.a.hostIPs(), w.a.apiServiceEnv(context.Background()))
	plan, err := images.Resolve(images.Spec{Image: spec.Image, Command: expandArgv(spec.Command, lookup), Args: expandArgv(spec.Args, lookup)})
	if err != nil {
		c.mu.Lock()
		c.waitReason, c.waitMessage = "ErrImagePull", err.Error()
		c.mu.Unlock()
		return err
	}
	argv := plan.Argv
	if plan.Builtin {
		argv = append([]string{w.a.cfg.Executable, "__image-run", plan.Name}, plan.Argv...)
	}
	layer, err := w.freshContainerDir(c.name)
	if err != nil {
		c.mu.Lock()
		c.waitReason, c.waitMessage = "CreateContainerError", err.Error()
		c.mu.Unlock()
		return err
	}
	argv = inWorkDir(w.execArgv(argv), layer)
	if err := os.MkdirAll(filepath.Dir(w.logPath(c.name)), 0o755); err != nil {
		return err
	}
	logf, err := os.OpenFile(w.logPath(c.name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening log of container %q: %w", c.name, err)
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group, no parent-death signal: containers outlive an agent restart.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdio, err := c.openStdio(cmd, spec, logf)
	if err != nil {
		c.mu.Lock()
		c.waitReason, c.waitMessage = "RunContainerError", err.Error()
		c.mu.Unlock()
		return fmt.Errorf("starting container %q: %w", c.name, err)
	}
	pid, procStart, wait, err := w.a.procs.start(cmd)
	if err != nil {
		stdio.abort()
		c.mu.Lock()
		c.waitReason, c.waitMessage = "RunContainerError", err.Error()
		c.mu.Unlock()
		return fmt.Errorf("starting container %q: %w", c.name, err)
	}
	stdio.started()
	c.mu.Lock()
	c.stdin, c.ptmx = stdio.stdin, stdio.ptmx
	if !c.startedAt.IsZero() {
		// As the kubelet counts: a restart is a container started again,
		// so one that ended and stays ended (restartPolicy) shows none.
		c.restartCount++
	}
	c.pid, c.procStart, c.startedAt, c.running = pid, procStart, w.a.clock.Now(), true
	c.exited = make(chan struct{})
	c.waitReason, c.waitMessage, c.image = "", "", spec.Image
	c.ready, c.started, c.livenessFailed = spec.ReadinessProbe == nil, spec.StartupProbe == nil, false
	c.mu.Unlock()
	go func() {
		code := wait()
		stdio.exited()
		c.finished(code, "")
	}()
	return nil
}

// finished records a container's exit; the next sync restarts it, after its
// back-off (restartDelay).
func (c *container) finished(code int, reason string) {
	c.mu.Lock()
	if !c.running {
		c.mu.Unlock()
		return
	}
	now := c.w.a.clock.Now()
	if reason == "" {
		reason = "Completed"
		if code != 0 {
			reason = "Error"
		}
		if code == 137 && c.livenessFailed {
			reason = "Error"
		}
	}
	c.lastTerm = &corev1.ContainerStateTerminated{ExitCode: int32(code), Reason: reason,
		StartedAt: metav1.NewTime(c.startedAt.Truncate(time.Second)), FinishedAt: metav1.NewTime(now.Truncate(time.Second)),
		ContainerID: containerID(c.w.uid, c.name, c.procStart)}
	c.running, c.ready, c.finishedAt = false, false, now
	close(c.exited)
	cancel := c.probeCancel
	c.probeCancel = nil
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	c.w.wake()
}

// inWorkDir makes the nsenter command line argv (cni.ExecArgv's) start its
// program in dir, a directory of the node: nsenter opens it before entering
// the pod's mount namespace, whose root would otherwise be the working
// directory.
func inWorkDir(argv []string, dir string) []string {
	return slices.Concat(argv[:1], []string{"--wd=" + dir}, argv[1:])
}

func containerID(uid types.UID, name string, start uint64) string {
	return "minikit://" + string(uid)[:8] + "-" + name + "-" + strconv.FormatUint(start, 10)
}

func (c *container) signal(sig syscall.Signal) {
	c.mu.Lock()
	pid, running := c.pid, c.running
	c.mu.Unlock()
	if running && pid > 0 {
		c.w.a.procs.signal(pid, sig)
	}
}

func (c *container) waitUntil(deadline time.Time) {
	c.mu.Lock()
	ch, running := c.exited, c.running
	c.mu.Unlock()
	if !running || ch == nil {
		return
	}
	select {
	case <-ch:
	case <-time.After(time.Until(deadline)):
	}
}

// kill ends the container's process group at once.
func (c *container) kill(why string) {
	c.mu.Lock()
	running, ch := c.running, c.exited
	c.mu.Unlock()
	if !running {
		return
	}
	c.signal(syscall.SIGKILL)
	if ch != nil {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			c.w.a.log.Warn("container did not exit after SIGKILL", "container", c.name, "why", why)
		}
	}
}

// detach forgets the process without stopping it (the agent is stopping).
func (c *container) detach() {
	c.closeProbes()
}

func (c *container) closeProbes() {
	c.mu.Lock()
	cancel := c.probeCancel
	c.probeCancel = nil
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// containerEnv is the process environment: the kubernetes Service's variables
// (svcEnv), what built-in images read, and the container's env with the
// downward API fields labs use. Each env value is $(VAR)-expanded with the
// Service variables and the env entries before it, as the kubelet does; lookup
// resolves $(VAR) in the container's command and args (the Service variables
// and the container's env, not the image's PATH or HOSTNAME).
func containerEnv(pod *corev1.Pod, spec corev1.Container, nodeName string, podIPs, hostIPs []string, svcEnv []string) (env []string, lookup func(string) (string, bool)) {
	env = append(slices.Clone(svcEnv),
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOSTNAME="+podHostname(pod),
		"HOME=/root",
		"MINIKIT_NODE_NAME="+nodeName,
		"MINIKIT_POD_NAMESPACE="+pod.Namespace,
		"MINIKIT_POD_NAME="+pod.Name,
		"POD_NAME="+pod.Name,
	)
	vars := map[string]string{}
	for _, kv := range svcEnv {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	lookup = func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
	for _, e := range spec.Env {
		v := expandVars(e.Value, lookup)
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				v = pod.Name
			case "metadata.namespace":
				v = pod.Namespace
			case "metadata.uid":
				v = string(pod.UID)
			case "spec.nodeName":
				v = nodeName
			case "spec.serviceAccountName":
				v = pod.Spec.ServiceAccountName
			// The plural fields are every address, comma-separated, as
			// the kubelet's downward API renders them.
			case "status.podIP":
				v = first(podIPs)
			case "status.podIPs":
				v = strings.Join(podIPs, ",")
			case "status.hostIP":
				v = first(hostIPs)
			case "status.hostIPs":
				v = strings.Join(hostIPs, ",")
			}
		}
		vars[e.Name] = v
		env = append(env, e.Name+"="+v)
	}
	return env, lookup
}
