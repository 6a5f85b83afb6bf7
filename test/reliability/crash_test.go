package reliability_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/cni"
	"github.com/minikit/minikit/internal/kubelet"
	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// The crash test's shape: crashRounds rounds (MINIKIT_CRASH_ROUNDS for a longer
// run), alternating SIGKILL of node1 (the server: API, controllers and node1's
// agent) and node2 (an agent) at a seeded random moment of a workload of creates,
// scales and deletes. MINIKIT_CRASH_SEED replays a run.
const (
	crashRoundsCI  = 12
	maxKillDelay   = 1500 * time.Millisecond
	maxOpPause     = 300 * time.Millisecond
	convergeWithin = 90 * time.Second
	keepRounds     = 3 // services of older rounds are deleted by the workload
)

// ledger is what the client saw acknowledged. Only the workload goroutine writes
// it during a round; checks read it between rounds.
type ledger struct {
	mu         sync.Mutex
	svcs       map[string]*corev1.Service // acknowledged creates not acknowledged deleted
	svcRound   map[string]int
	svcGone    map[string]bool // acknowledged deletes
	deps       map[string]bool // acknowledged Deployment creates not acknowledged deleted
	depsGone   map[string]bool
	web        int32 // the last acknowledged replicas of web
	webUnknown bool  // a scale of web after that one was cut off
	// rollout is the template annotation of web's last acknowledged rollout;
	// rolloutUnknown, a rollout after it was cut off.
	rollout        string
	rolloutUnknown bool
	acked, cut     int
}

// op is one workload step; run reports whether the API acknowledged it.
type op struct {
	what string
	run  func(ctx context.Context) error
}

// podWitness is a pod as it was before a kill.
type podWitness struct {
	name, ip, node, sandbox, containerID string
	restarts                             int32
}

func TestCrashRecovery(t *testing.T) {
	rounds := envInt(t, "MINIKIT_CRASH_ROUNDS", crashRoundsCI)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("MINIKIT_CRASH_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	t.Logf("crash test: %d rounds, seed %d (replay with MINIKIT_CRASH_SEED=%d)", rounds, seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	l := testenv.NewLab(t, 2)
	c := labClient(t, l, 10*time.Second)
	wc := labClient(t, l, 3*time.Second) // the workload's: cut-off requests fail fast
	ctx := context.Background()

	led := &ledger{svcs: map[string]*corev1.Service{}, svcRound: map[string]int{}, svcGone: map[string]bool{},
		deps: map[string]bool{}, depsGone: map[string]bool{}, web: 2}
	if _, err := c.AppsV1().Deployments("default").Create(ctx, webDeployment("web", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	probes := map[string]*corev1.Pod{}
	for _, n := range []string{"node1", "node2"} {
		if _, err := c.CoreV1().Pods("default").Create(ctx, sleeper("probe-"+n, n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"node1", "node2"} {
		probes[n] = testenv.WaitPodReady(t, c, "default", "probe-"+n)
	}
	if err := waitDeployment(ctx, c, "web", 90*time.Second); err != nil {
		t.Fatal(err)
	}

	var kills []string
	start := time.Now()
	for r := range rounds {
		host := "node1"
		if r%2 == 1 {
			host = "node2"
		}
		roundStart := time.Now()
		delay := time.Duration(rng.Int64N(int64(maxKillDelay)))
		ops := workload(r, rng, wc, led)

		// Agent rounds: two pods on node2 are deleted while its agent is down, one
		// forcibly (gone from the API at once), one gracefully (Terminating until
		// the agent returns). Their sandboxes and processes must not survive.
		var victims []*corev1.Pod
		if host == "node2" {
			for _, v := range []string{"a", "b"} {
				p := sleeper(fmt.Sprintf("victim-r%d-%s", r, v), "node2")
				if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			for _, v := range []string{"a", "b"} {
				victims = append(victims, testenv.WaitPodReady(t, c, "default", fmt.Sprintf("victim-r%d-%s", r, v)))
			}
		}
		before := witnesses(t, c)
		// A victim's sandbox, and its processes by PID and start time (a deleted
		// namespace's inode number is soon reused, a PID with its start time not).
		victimNS := map[string][]procID{}
		for _, v := range victims {
			name := testenv.SandboxName(t, c, v)
			for _, pid := range processesInNetNS(nsInode(netns.NetNSPath(name))) {
				victimNS[name] = append(victimNS[name], procID{pid, procStart(pid)})
			}
			if len(victimNS[name]) == 0 {
				t.Fatalf("round %d: no process in the sandbox %s of pod %s", r, name, v.Name)
			}
		}

		done := make(chan struct{})
		defer func() { <-done }() // the workload logs to t: it must end first, even on t.Fatal
		go func() {
			defer close(done)
			for i, o := range ops {
				err := o.run(ctx)
				led.mu.Lock()
				if err == nil {
					led.acked++
				} else {
					led.cut++
				}
				led.mu.Unlock()
				if err != nil && testing.Verbose() {
					t.Logf("round %d op %d %s: %v", r, i, o.what, err)
				}
			}
		}()
		time.Sleep(delay)
		t.Logf("round %d: SIGKILL %s (pid %d) %v into a workload of %d ops", r, host, l.PID(host), delay.Round(time.Millisecond), len(ops))
		kills = append(kills, fmt.Sprintf("%s@%v", host, delay.Round(time.Millisecond)))
		if err := l.Stop(host, syscall.SIGKILL); err != nil {
			t.Fatalf("round %d: killing %s: %v", r, host, err)
		}
		if host == "node2" {
			if err := c.CoreV1().Pods("default").Delete(ctx, victims[0].Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
				t.Fatal(err)
			}
			if err := c.CoreV1().Pods("default").Delete(ctx, victims[1].Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		// Restart at once: the rest of the workload meets a restarting node, as
		// clients do when a supervisor restarts a crashed process.
		if err := l.Start(host); err != nil {
			t.Fatalf("round %d: restarting %s: %v", r, host, err)
		}
		restarted := time.Now()
		<-done
		if err := l.WaitReady(ctx); err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
		checkUnique(t, r, c)
		checkLedger(t, r, c, led)
		var waitedFor error // what the cluster was still missing on the last failed check
		testutil.Eventually(t, convergeWithin, fmt.Sprintf("round %d: the cluster converges after the SIGKILL of %s", r, host), func() error {
			err := converged(t, l, c, led, probes)
			if err != nil {
				waitedFor = err
			}
			return err
		})
		if waitedFor != nil {
			t.Logf("round %d: converged after waiting for: %.300v", r, waitedFor)
		}
		checkAdopted(t, r, c, before)
		for _, v := range victims {
			testutil.Eventually(t, convergeWithin, fmt.Sprintf("round %d: pod %s deleted while node2's agent was down is gone", r, v.Name), func() error {
				_, err := c.CoreV1().Pods("default").Get(ctx, v.Name, metav1.GetOptions{})
				if !apierrors.IsNotFound(err) {
					return fmt.Errorf("still there (%v)", err)
				}
				return nil
			})
		}
		for name, procs := range victimNS {
			if netns.ExistsNamed(name) || cni.PodNamespacesExist(name) {
				t.Errorf("round %d: the sandbox %s of a pod deleted while the agent was down is still there", r, name)
			}
			for _, p := range procs {
				if procStart(p.pid) == p.start {
					t.Errorf("round %d: process %d of a pod deleted while the agent was down still runs (sandbox %s)", r, p.pid, name)
				}
			}
		}
		checkUnique(t, r, c)
		led.mu.Lock()
		t.Logf("round %d: checked %v after the restart (round took %v); %d services, %d ops acknowledged, %d cut off so far",
			r, time.Since(restarted).Round(time.Millisecond), time.Since(roundStart).Round(time.Millisecond), len(led.svcs), led.acked, led.cut)
		led.mu.Unlock()
		if t.Failed() {
			t.FailNow()
		}
	}
	t.Logf("crash points tried: %d (%s) in %v, seed %d", len(kills), strings.Join(kills, ", "), time.Since(start).Round(time.Second), seed)
}

// workload returns round r's operations, drawn from rng: a ClusterIP, a NodePort
// and (pool permitting) a LoadBalancer Service, a scale of web, a Deployment
// created and an older one deleted, older Services deleted, a web pod deleted.
func workload(r int, rng *rand.Rand, wc kubernetes.Interface, led *ledger) []op {
	led.mu.Lock()
	defer led.mu.Unlock()
	var ops []op
	createSvc := func(name string, typ corev1.ServiceType) {
		ops = append(ops, op{"create service " + name, func(ctx context.Context) error {
			got, err := wc.CoreV1().Services("default").Create(ctx, service(name, "web", typ), metav1.CreateOptions{})
			if err == nil {
				led.mu.Lock()
				led.svcs[name], led.svcRound[name] = got, r
				led.mu.Unlock()
			}
			return err
		}})
	}
	createSvc(fmt.Sprintf("r%d-c", r), corev1.ServiceTypeClusterIP)
	createSvc(fmt.Sprintf("r%d-np", r), corev1.ServiceTypeNodePort)
	lbs := 0
	for _, s := range led.svcs {
		if s.Spec.Type == corev1.ServiceTypeLoadBalancer {
			lbs++
		}
	}
	if lbs < 6 { // the lab's pool has 11 addresses; unacknowledged creates may hold some
		createSvc(fmt.Sprintf("r%d-lb", r), corev1.ServiceTypeLoadBalancer)
	}
	var old []string
	for name, round := range led.svcRound {
		if round <= r-keepRounds && led.svcs[name] != nil {
			old = append(old, name)
		}
	}
	sort.Strings(old)
	for _, name := range old {
		ops = append(ops, op{"delete service " + name, func(ctx context.Context) error {
			err := wc.CoreV1().Services("default").Delete(ctx, name, metav1.DeleteOptions{})
			led.mu.Lock()
			defer led.mu.Unlock()
			// A delete cut off by the kill may have committed: the service's
			// existence is then unknown, neither acknowledged nor gone.
			delete(led.svcs, name)
			if err == nil || apierrors.IsNotFound(err) {
				led.svcGone[name] = true
				return nil
			}
			return err
		}})
	}
	replicas := int32(1 + rng.IntN(4))
	ops = append(ops, op{fmt.Sprintf("scale web to %d", replicas), func(ctx context.Context) error {
		led.mu.Lock()
		led.webUnknown = true
		led.mu.Unlock()
		s, err := wc.AppsV1().Deployments("default").GetScale(ctx, "web", metav1.GetOptions{})
		if err == nil {
			s.Spec.Replicas = replicas
			_, err = wc.AppsV1().Deployments("default").UpdateScale(ctx, "web", s, metav1.UpdateOptions{})
		}
		if err == nil {
			led.mu.Lock()
			led.web, led.webUnknown = replicas, false
			led.mu.Unlock()
		}
		return err
	}})
	// A rollout of web to a new template (what kubectl rollout restart does):
	// the kill can land while its ReplicaSets are being scaled.
	mark := fmt.Sprintf("r%d", r)
	ops = append(ops, op{"roll web to template " + mark, func(ctx context.Context) error {
		led.mu.Lock()
		led.rolloutUnknown = true
		led.mu.Unlock()
		_, err := wc.AppsV1().Deployments("default").Patch(ctx, "web", types.StrategicMergePatchType,
			[]byte(fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:%q}}}}}`, rolloutAnnotation, mark)), metav1.PatchOptions{})
		if err == nil {
			led.mu.Lock()
			led.rollout, led.rolloutUnknown = mark, false
			led.mu.Unlock()
		}
		return err
	}})
	dep := fmt.Sprintf("r%d-d", r)
	ops = append(ops, op{"create deployment " + dep, func(ctx context.Context) error {
		_, err := wc.AppsV1().Deployments("default").Create(ctx, webDeployment(dep, 1), metav1.CreateOptions{})
		if err == nil {
			led.mu.Lock()
			led.deps[dep] = true
			led.mu.Unlock()
		}
		return err
	}})
	if prev := fmt.Sprintf("r%d-d", r-1); r > 0 {
		ops = append(ops, op{"delete deployment " + prev, func(ctx context.Context) error {
			err := wc.AppsV1().Deployments("default").Delete(ctx, prev, metav1.DeleteOptions{})
			led.mu.Lock()
			defer led.mu.Unlock()
			delete(led.deps, prev) // unknown if the delete was cut off (see above)
			if err == nil || apierrors.IsNotFound(err) {
				led.depsGone[prev] = true
				return nil
			}
			return err
		}})
	}
	pick := rng.IntN(8)
	ops = append(ops, op{"delete a web pod", func(ctx context.Context) error {
		pods, err := wc.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil || len(pods.Items) == 0 {
			return err
		}
		sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].Name < pods.Items[j].Name })
		p := pods.Items[pick%len(pods.Items)]
		err = wc.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			err = nil
		}
		return err
	}})
	rng.Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
	// Pauses between the steps spread them over the window the kill lands in.
	for i := range ops {
		run, pause := ops[i].run, time.Duration(rng.Int64N(int64(maxOpPause)))
		ops[i].run = func(ctx context.Context) error {
			time.Sleep(pause)
			return run(ctx)
		}
	}
	return ops
}

// witnesses are the Ready, non-terminating pods before a kill.
func witnesses(t *testing.T, c kubernetes.Interface) map[types.UID]podWitness {
	t.Helper()
	pods, err := c.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[types.UID]podWitness{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || !podReady(p) || len(p.Status.ContainerStatuses) == 0 {
			continue
		}
		out[p.UID] = podWitness{name: p.Name, ip: p.Status.PodIP, node: p.Spec.NodeName, sandbox: testenv.SandboxName(t, c, p),
			containerID: p.Status.ContainerStatuses[0].ContainerID, restarts: p.Status.ContainerStatuses[0].RestartCount}
	}
	return out
}

// checkAdopted: pods that lived through the kill kept their UID, IP, sandbox and
// container process (same container ID, no restart).
func checkAdopted(t *testing.T, r int, c kubernetes.Interface, before map[types.UID]podWitness) {
	t.Helper()
	pods, err := c.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	adopted := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		w, ok := before[p.UID]
		if !ok || p.DeletionTimestamp != nil {
			continue
		}
		adopted++
		var cid string
		var restarts int32
		if len(p.Status.ContainerStatuses) > 0 {
			cid, restarts = p.Status.ContainerStatuses[0].ContainerID, p.Status.ContainerStatuses[0].RestartCount
		}
		if p.Status.PodIP != w.ip || cid != w.containerID || restarts != w.restarts {
			t.Errorf("round %d: pod %s was not adopted as it was: before IP %s container %s restarts %d, after IP %s container %s restarts %d",
				r, w.name, w.ip, w.containerID, w.restarts, p.Status.PodIP, cid, restarts)
		}
		if !netns.ExistsNamed(w.sandbox) {
			t.Errorf("round %d: the sandbox %s of surviving pod %s is gone", r, w.sandbox, w.name)
		}
	}
	t.Logf("round %d: %d of %d pods that were Ready before the kill survived it and were adopted", r, adopted, len(before))
}

// checkUnique: no pod IP, ClusterIP, NodePort or LoadBalancer IP is held twice.
func checkUnique(t *testing.T, r int, c kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	pods, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owner := map[string]string{}
	claim := func(kind, key, who string) {
		if key == "" || key == "None" {
			return
		}
		if prev, dup := owner[kind+" "+key]; dup && prev != who {
			t.Errorf("round %d: %s %s is held by both %s and %s", r, kind, key, prev, who)
		}
		owner[kind+" "+key] = who
	}
	for _, p := range pods.Items {
		if p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		claim("pod IP", p.Status.PodIP, "pod "+p.Namespace+"/"+p.Name)
	}
	svcs, err := c.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs.Items {
		who := "service " + s.Namespace + "/" + s.Name
		claim("clusterIP", s.Spec.ClusterIP, who)
		for _, p := range s.Spec.Ports {
			if p.NodePort != 0 {
				claim("nodePort", fmt.Sprint(p.NodePort), who)
			}
		}
		for _, in := range s.Status.LoadBalancer.Ingress {
			claim("LoadBalancer IP", in.IP, who)
		}
	}
}

// checkLedger: every acknowledged create is there as acknowledged, every
// acknowledged delete took effect.
func checkLedger(t *testing.T, r int, c kubernetes.Interface, led *ledger) {
	t.Helper()
	ctx := context.Background()
	led.mu.Lock()
	defer led.mu.Unlock()
	for name, want := range led.svcs {
		got, err := c.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("round %d: acknowledged service %s: %v", r, name, err)
			continue
		}
		if got.UID != want.UID || got.Spec.ClusterIP != want.Spec.ClusterIP || !slices.Equal(nodePorts(got), nodePorts(want)) {
			t.Errorf("round %d: service %s is uid %s clusterIP %s nodePorts %v; the create acknowledged uid %s clusterIP %s nodePorts %v",
				r, name, got.UID, got.Spec.ClusterIP, nodePorts(got), want.UID, want.Spec.ClusterIP, nodePorts(want))
		}
	}
	for name := range led.svcGone {
		if _, err := c.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("round %d: service %s was deleted (acknowledged) but is there (%v)", r, name, err)
		}
	}
	for name := range led.deps {
		if _, err := c.AppsV1().Deployments("default").Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("round %d: acknowledged deployment %s: %v", r, name, err)
		}
	}
	for name := range led.depsGone {
		if _, err := c.AppsV1().Deployments("default").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("round %d: deployment %s was deleted (acknowledged) but is there (%v)", r, name, err)
		}
	}
	web, err := c.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !led.webUnknown && *web.Spec.Replicas != led.web {
		t.Errorf("round %d: web has replicas %d; the last scale acknowledged %d", r, *web.Spec.Replicas, led.web)
	}
	if got := web.Spec.Template.Annotations[rolloutAnnotation]; !led.rolloutUnknown && got != led.rollout {
		t.Errorf("round %d: web's template is at rollout %q; the last rollout acknowledged %q", r, got, led.rollout)
	}
}

// rolloutAnnotation marks the template of each rollout of web.
const rolloutAnnotation = "reliability.minikit.test/rollout"

// rolloutSettled says whether a Deployment's ReplicaSets are as a finished
// rollout leaves them: one ReplicaSet, of the current template, holds every
// replica; older ones are scaled to zero; every pod of the Deployment belongs
// to one of its ReplicaSets (nothing half-adopted or half-deleted).
func rolloutSettled(ctx context.Context, c kubernetes.Interface, d *appsv1.Deployment) error {
	rss, err := c.AppsV1().ReplicaSets(d.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	owned := map[types.UID]bool{}
	var current []string
	for _, rs := range rss.Items {
		ref := metav1.GetControllerOf(&rs)
		if ref == nil || ref.UID != d.UID {
			continue
		}
		owned[rs.UID] = true
		same := rs.Spec.Template.Annotations[rolloutAnnotation] == d.Spec.Template.Annotations[rolloutAnnotation]
		switch {
		case same:
			current = append(current, rs.Name)
			if *rs.Spec.Replicas != *d.Spec.Replicas || rs.Status.ReadyReplicas != *d.Spec.Replicas {
				return fmt.Errorf("deployment %s: the current ReplicaSet %s has %d replicas (%d ready), want %d",
					d.Name, rs.Name, *rs.Spec.Replicas, rs.Status.ReadyReplicas, *d.Spec.Replicas)
			}
		case *rs.Spec.Replicas != 0 || rs.Status.Replicas != 0:
			return fmt.Errorf("deployment %s: the old ReplicaSet %s still has %d replicas (%d in status)", d.Name, rs.Name, *rs.Spec.Replicas, rs.Status.Replicas)
		}
	}
	if len(current) != 1 {
		return fmt.Errorf("deployment %s: %d ReplicaSets of its current template (%v), want 1", d.Name, len(current), current)
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return err
	}
	pods, err := c.CoreV1().Pods(d.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		if ref := metav1.GetControllerOf(&p); ref == nil || !owned[ref.UID] {
			return fmt.Errorf("deployment %s: pod %s is owned by %v, not by one of the deployment's ReplicaSets", d.Name, p.Name, ref)
		}
	}
	return nil
}

func nodePorts(s *corev1.Service) []int32 {
	var out []int32
	for _, p := range s.Spec.Ports {
		out = append(out, p.NodePort)
	}
	return out
}

// converged reports what is not yet as it should be: every workload Service has
// its rules on both nodes and answers by name and by VIP from a pod on each node,
// its NodePort and LoadBalancer IP answer the client, Deployments are rolled out,
// and no sandbox is left without a pod.
func converged(t *testing.T, l *lab.Lab, c kubernetes.Interface, led *ledger, probes map[string]*corev1.Pod) error {
	ctx := context.Background()
	svcs, err := c.CoreV1().Services("default").List(ctx, metav1.ListOptions{LabelSelector: "test=reliability"})
	if err != nil {
		return err
	}
	deps, err := c.AppsV1().Deployments("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, d := range deps.Items {
		s := d.Status
		if want := *d.Spec.Replicas; s.ObservedGeneration < d.Generation || s.ReadyReplicas != want || s.Replicas != want || s.UpdatedReplicas != want {
			return fmt.Errorf("deployment %s: want %d replicas, status %+v", d.Name, want, s)
		}
		if err := rolloutSettled(ctx, c, &d); err != nil {
			return err
		}
	}
	var errs []error
	for _, host := range []string{"node1", "node2"} {
		out, err := testenv.Run(l, host, "iptables-save", "-t", "nat")
		if err != nil {
			return fmt.Errorf("iptables-save on %s: %v", host, err)
		}
		for _, s := range svcs.Items {
			chain := svcChain(s.Namespace, s.Name, "http")
			if !strings.Contains(out, "\n:"+chain+" ") || !strings.Contains(out, "-j "+chain+"\n") {
				errs = append(errs, fmt.Errorf("%s: no %s for service %s in iptables-save", host, chain, s.Name))
			}
			for _, p := range s.Spec.Ports {
				if p.NodePort != 0 && !strings.Contains(out, fmt.Sprintf("--dport %d ", p.NodePort)) {
					errs = append(errs, fmt.Errorf("%s: no rule for nodePort %d of %s", host, p.NodePort, s.Name))
				}
			}
			for _, in := range s.Status.LoadBalancer.Ingress {
				if !strings.Contains(out, "-d "+in.IP+"/32 ") {
					errs = append(errs, fmt.Errorf("%s: no rule for LoadBalancer IP %s of %s", host, in.IP, s.Name))
				}
			}
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	client := nsHTTPClient(lab.NS(l.Name(), lab.Client), 3*time.Second)
	for _, s := range svcs.Items {
		for _, p := range probes {
			ns := testenv.SandboxName(t, c, p)
			ips, err := lookupA(ns, "10.96.0.10:53", s.Name+".default.svc.cluster.local")
			if err != nil || !slices.Equal(ips, []string{s.Spec.ClusterIP}) {
				return fmt.Errorf("DNS from pod %s: %s answered %v (%v), want [%s]", p.Name, s.Name, ips, err, s.Spec.ClusterIP)
			}
			body, err := httpGet(nsHTTPClient(ns, 3*time.Second), "http://"+s.Spec.ClusterIP+"/", "")
			if err != nil || !strings.Contains(body, "pod=web-") {
				return fmt.Errorf("curl %s (%s) from pod %s: %v %.100q", s.Spec.ClusterIP, s.Name, p.Name, err, body)
			}
		}
		for _, p := range s.Spec.Ports {
			if p.NodePort == 0 {
				continue
			}
			for _, host := range []string{"node1", "node2"} {
				url := fmt.Sprintf("http://%s:%d/", l.Addr(host), p.NodePort)
				if body, err := httpGet(client, url, ""); err != nil || !strings.Contains(body, "pod=web-") {
					return fmt.Errorf("curl %s (%s) from the client: %v %.100q", url, s.Name, err, body)
				}
			}
		}
		if s.Spec.Type == corev1.ServiceTypeLoadBalancer {
			if len(s.Status.LoadBalancer.Ingress) == 0 {
				return fmt.Errorf("service %s has no LoadBalancer IP", s.Name)
			}
			url := "http://" + s.Status.LoadBalancer.Ingress[0].IP + "/"
			if body, err := httpGet(client, url, ""); err != nil || !strings.Contains(body, "pod=web-") {
				return fmt.Errorf("curl %s (%s) from the client: %v %.100q", url, s.Name, err, body)
			}
		}
	}
	// Every sandbox of a node belongs to a pod that exists.
	pods, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	claimed := map[string]bool{}
	for i := range pods.Items {
		if pods.Items[i].Spec.NodeName != "" && !pods.Items[i].Spec.HostNetwork {
			claimed[testenv.SandboxName(t, c, &pods.Items[i])] = true
		}
	}
	for _, host := range []string{"node1", "node2"} {
		prefix := kubelet.SandboxPrefix(host, filepath.Join(l.Dir(), host, "agent"))
		names, _ := netns.ListNamed(prefix)
		if entries, err := os.ReadDir(cni.PodNSDir); err == nil {
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), prefix) {
					names = append(names, e.Name())
				}
			}
		}
		for _, n := range names {
			if !claimed[n] {
				return fmt.Errorf("%s: sandbox %s belongs to no pod", host, n)
			}
		}
	}
	return nil
}
