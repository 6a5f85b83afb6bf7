package kubelet

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/iptables"
	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/testutil"

	corev1 "k8s.io/api/core/v1"
)

// A pod bound to the node gets a sandbox (netns, veth, an IP of the node's
// podCIDR, its UTS and mount namespaces), its container runs inside it, and
// the status reports the IP; a deleted pod's process is stopped, its sandbox
// torn down and its IP released.
func TestPodSyncSetsUpAndTearsDown(t *testing.T) {
	n := newFakeNode(t)
	a := n.start()
	web := n.createPod(testPod("web", "1a1b2c3d-0000-4000-8000-000000000001"))
	db := n.createPod(testPod("db", "2a1b2c3d-0000-4000-8000-000000000002"))

	ips := map[string]bool{}
	for _, pod := range []*corev1.Pod{web, db} {
		got := n.waitPod(pod, "pod "+pod.Name+" running", running)
		ip := netip.MustParseAddr(got.Status.PodIP)
		if !netip.MustParsePrefix(testPodCIDR).Contains(ip) || ips[ip.String()] {
			t.Errorf("pod %s got IP %s: want a free address of %s (taken: %v)", pod.Name, ip, testPodCIDR, ips)
		}
		ips[ip.String()] = true
		if got.Status.HostIP != "192.168.0.2" || len(got.Status.PodIPs) != 1 || got.Status.PodIPs[0].IP != ip.String() {
			t.Errorf("pod %s: hostIP %q podIPs %v", pod.Name, got.Status.HostIP, got.Status.PodIPs)
		}
		sb, ok := n.net.sandbox(a.sandboxName(pod.UID))
		if !ok || sb.ip != ip || sb.veth != a.hostVeth(pod.UID) {
			t.Errorf("pod %s: sandbox %+v (exists %v), want veth %s with %s", pod.Name, sb, ok, a.hostVeth(pod.UID), ip)
		}
		if !n.net.PodNamespacesExist(a.sandboxName(pod.UID)) {
			t.Errorf("pod %s has no UTS and mount namespaces", pod.Name)
		}
		if owner := a.ipam.Owners()[string(pod.UID)]; owner != ip {
			t.Errorf("pod %s: IPAM holds %s for it, status says %s", pod.Name, owner, ip)
		}
	}
	// Each container is one process, entering its pod's namespaces.
	procs := n.procs.started()
	if len(procs) != 2 {
		t.Fatalf("%d processes started, want 2", len(procs))
	}
	for _, p := range procs {
		argv := strings.Join(p.argv, " ")
		if !strings.HasSuffix(argv, " -- sleep 1d") {
			t.Errorf("container argv %q does not run the pod's command", argv)
		}
		inPod := false
		for _, pod := range []*corev1.Pod{web, db} {
			if strings.Contains(argv, "--net="+netns.NetNSPath(a.sandboxName(pod.UID))+" ") &&
				slices.Contains(p.env, "MINIKIT_POD_NAME="+pod.Name) {
				inPod = true
			}
		}
		if !inPod {
			t.Errorf("container argv %q env %q is in neither pod's netns", argv, p.env)
		}
	}
	// The node's own part of the network: routes and pod masquerade.
	if rules := n.ipt.Rules(iptables.TableNAT, masqChain); len(rules) != 2 {
		t.Errorf("masquerade rules %q, want the pod-to-pod RETURN and the MASQUERADE", rules)
	}

	n.deletePod(web)
	sandbox := a.sandboxName(web.UID)
	testutil.Eventually(t, 10*time.Second, "web's sandbox torn down", func() error {
		if _, ok := n.net.sandbox(sandbox); ok {
			return errors.New("netns still there")
		}
		if n.net.PodNamespacesExist(sandbox) {
			return errors.New("UTS and mount namespaces still there")
		}
		if ip, ok := a.ipam.Owners()[string(web.UID)]; ok {
			return fmt.Errorf("IP %s still allocated", ip)
		}
		return nil
	})
	for _, p := range n.procs.started() {
		if web := slices.Contains(p.env, "MINIKIT_POD_NAME=web"); p.alive == web {
			t.Errorf("process %d of pod web %v is alive %v after web's deletion", p.pid, web, p.alive)
		}
	}
	if _, ok := n.net.sandbox(a.sandboxName(db.UID)); !ok {
		t.Error("db's sandbox went with web's")
	}
}

// A sandbox deleted behind the agent's back is recreated at the next resync,
// with the pod's IP, and the containers cut off in the vanished netns restart.
func TestPodSyncRepairsSandbox(t *testing.T) {
	n := newFakeNode(t)
	a := n.start()
	pod := n.createPod(testPod("web", "1a1b2c3d-0000-4000-8000-000000000001"))
	ip := n.waitPod(pod, "pod running", running).Status.PodIP
	sandbox := a.sandboxName(pod.UID)

	n.net.deleteNetNS(sandbox)
	n.stepUntil("sandbox recreated", func() error {
		if sb, ok := n.net.sandbox(sandbox); !ok || sb.ip.String() != ip {
			return fmt.Errorf("sandbox %+v (exists %v), want IP %s", sb, ok, ip)
		}
		return nil
	})
	got := n.waitPod(pod, "container restarted in the new netns", func(p *corev1.Pod) error {
		if cs := containerStatus(p, "app"); cs.RestartCount != 1 || cs.State.Running == nil {
			return fmt.Errorf("restarts %d, state %+v", cs.RestartCount, cs.State)
		}
		return running(p)
	})
	if got.Status.PodIP != ip {
		t.Errorf("pod IP %s after the repair, was %s", got.Status.PodIP, ip)
	}
	if procs := n.procs.started(); len(procs) != 2 || procs[0].alive {
		t.Errorf("processes %+v: want the first killed and a second one", procs)
	}
}

// A restarted agent adopts its pods: their sandboxes, IPs and processes stay
// as they are (nothing is set up or started again) and it watches the
// adopted processes, restarting one that ends. A pod deleted while the agent
// was away is torn down, and a netns of the node's prefix that no pod claims
// is debris.
func TestAgentRestartAdoptsPods(t *testing.T) {
	n := newFakeNode(t)
	a := n.start()
	web := n.createPod(testPod("web", "1a1b2c3d-0000-4000-8000-000000000001"))
	gone := n.createPod(testPod("gone", "2a1b2c3d-0000-4000-8000-000000000002"))
	webIP := n.waitPod(web, "web running", running).Status.PodIP
	n.waitPod(gone, "gone running", running)
	setups, _ := n.net.counts()
	procs := n.procs.started()
	goneSandbox := a.sandboxName(gone.UID)

	n.stop()
	n.deletePod(gone)
	debris := a.prefix + "ffffffffff"
	n.net.addSandbox(debris, netip.MustParseAddr("10.244.1.250"))

	_, checked := n.net.counts()
	a = n.start()
	testutil.Eventually(t, 10*time.Second, "the new agent checked web's sandbox", func() error {
		if _, now := n.net.counts(); now[a.sandboxName(web.UID)] <= checked[a.sandboxName(web.UID)] {
			return errors.New("no PodOK yet")
		}
		return nil
	})
	if now, _ := n.net.counts(); now != setups {
		t.Errorf("%d sandbox setups after the restart, want %d: the sandbox was recreated", now, setups)
	}
	testutil.Eventually(t, 10*time.Second, "gone's sandbox, IP and process removed, debris too", func() error {
		for _, name := range []string{goneSandbox, debris} {
			if _, ok := n.net.sandbox(name); ok {
				return fmt.Errorf("netns %s still there", name)
			}
		}
		if ip, ok := a.ipam.Owners()[string(gone.UID)]; ok {
			return fmt.Errorf("gone's IP %s still allocated", ip)
		}
		if alive := n.procs.alive(); len(alive) != 1 {
			return fmt.Errorf("processes alive: %v", alive)
		}
		return nil
	})
	got, err := n.getPod(web)
	if err != nil {
		t.Fatal(err)
	}
	if err := running(got); err != nil || got.Status.PodIP != webIP || len(n.procs.started()) != len(procs) {
		t.Fatalf("after the restart web is %v with IP %s (was %s), %d processes started (was %d)",
			err, got.Status.PodIP, webIP, len(n.procs.started()), len(procs))
	}

	// The adopted process is the new agent's: when it ends, it is restarted.
	webPID := n.procs.alive()[0]
	n.procs.exitProc(webPID, 1)
	n.waitPod(web, "web's container restarted", func(p *corev1.Pod) error {
		if cs := containerStatus(p, "app"); cs.RestartCount != 1 || cs.State.Running == nil {
			return fmt.Errorf("restarts %d, state %+v", cs.RestartCount, cs.State)
		}
		return nil
	})
	if alive := n.procs.alive(); len(alive) != 1 || alive[0] == webPID {
		t.Errorf("alive %v: want one new process instead of %d", alive, webPID)
	}
}

// A sandbox that cannot be set up keeps the pod Pending with the error in
// its status and no container started; the worker retries until it works.
func TestPodSyncReportsSandboxFailure(t *testing.T) {
	n := newFakeNode(t)
	n.start()
	n.net.failSetup(errors.New("no space left on device"))
	pod := n.createPod(testPod("web", "1a1b2c3d-0000-4000-8000-000000000001"))
	n.waitPod(pod, "the error in the pod's status", func(p *corev1.Pod) error {
		if p.Status.Phase != corev1.PodPending || !strings.Contains(p.Status.Message, "no space left on device") {
			return fmt.Errorf("phase %s, message %q", p.Status.Phase, p.Status.Message)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReadyToStartContainers && c.Status != corev1.ConditionFalse {
				return fmt.Errorf("%s is %s", c.Type, c.Status)
			}
		}
		return nil
	})
	if started := len(n.procs.started()); started != 0 {
		t.Fatalf("%d containers started without a sandbox", started)
	}
	n.net.failSetup(nil)
	n.waitPod(pod, "pod running once the sandbox works", running)
}

// A hostNetwork pod runs in the node's network namespace: no netns, veth or
// IP of its own (status.podIP is the node's), only its UTS and mount
// namespaces; its deletion leaves the node's network alone.
func TestPodSyncHostNetwork(t *testing.T) {
	n := newFakeNode(t)
	a := n.start()
	p := testPod("agent", "1a1b2c3d-0000-4000-8000-000000000001")
	p.Spec.HostNetwork = true
	pod := n.createPod(p)
	got := n.waitPod(pod, "pod running", running)
	if got.Status.PodIP != "192.168.0.2" {
		t.Errorf("podIP %s, want the node's 192.168.0.2", got.Status.PodIP)
	}
	sandbox := a.sandboxName(pod.UID)
	if _, ok := n.net.sandbox(sandbox); ok {
		t.Error("a hostNetwork pod got a netns")
	}
	if _, ok := a.ipam.Owners()[string(pod.UID)]; ok {
		t.Error("a hostNetwork pod got a pod IP")
	}
	if !n.net.PodNamespacesExist(sandbox) {
		t.Error("a hostNetwork pod has no UTS and mount namespaces")
	}
	if argv := strings.Join(n.procs.started()[0].argv, " "); strings.Contains(argv, "--net=") {
		t.Errorf("container argv %q enters a network namespace; the agent's is the node's", argv)
	}
	n.deletePod(pod)
	testutil.Eventually(t, 10*time.Second, "pod namespaces removed", func() error {
		if n.net.PodNamespacesExist(sandbox) {
			return errors.New("still there")
		}
		return nil
	})
	n.net.mu.Lock()
	defer n.net.mu.Unlock()
	if slices.Contains(n.net.teardown, sandbox) {
		t.Error("deleting a hostNetwork pod tore down a pod network sandbox")
	}
}
