package kubelet

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
)

// restartDelay is the kubelet's CrashLoopBackOff: the first restart is
// immediate, then each one waits twice as long, from 10s up to 5 minutes;
// a container that ran for 10 minutes since its last restart starts over.
func TestRestartDelay(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC))
	a := &Agent{}
	a.setClock(clk)
	uid := types.UID("1a1b2c3d-0000-4000-8000-000000000001")

	// crash runs the container for ran, ends it, and returns how long its
	// restart waits: the first answer, then the clock moves by it and the
	// restart must be due.
	crash := func(ran time.Duration) (time.Duration, time.Duration) {
		t.Helper()
		clk.Step(ran)
		finished := clk.Now()
		wait, backoff := a.restartDelay(uid, "app", finished)
		if wait > 0 {
			clk.Step(wait - time.Second)
			if w, _ := a.restartDelay(uid, "app", finished); w != time.Second {
				t.Fatalf("a second before the restart is due, restartDelay says wait %v", w)
			}
			clk.Step(time.Second)
			if w, _ := a.restartDelay(uid, "app", finished); w != 0 {
				t.Fatalf("after the back-off of %v, restartDelay still says wait %v", wait, w)
			}
		}
		return wait, backoff
	}
	for i, tc := range []struct {
		ran, wait time.Duration
	}{
		{time.Second, 0},
		{time.Second, 10 * time.Second},
		{time.Second, 20 * time.Second},
		{time.Second, 40 * time.Second},
		{time.Second, 80 * time.Second},
		{time.Second, 160 * time.Second},
		{time.Second, 5 * time.Minute},
		{time.Second, 5 * time.Minute},
		// Ten minutes is not enough to forget, more is.
		{10 * time.Minute, 5 * time.Minute},
		{10*time.Minute + time.Second, 0},
		{time.Second, 10 * time.Second},
		{time.Second, 20 * time.Second},
	} {
		wait, backoff := crash(tc.ran)
		if wait != tc.wait {
			t.Fatalf("crash %d after running %v: restart waits %v, want %v", i+1, tc.ran, wait, tc.wait)
		}
		if wait > 0 && backoff != wait {
			t.Errorf("crash %d: the CrashLoopBackOff message says back-off %v, the wait is %v", i+1, backoff, wait)
		}
	}
	// Containers back off independently.
	if wait, _ := a.restartDelay(uid, "sidecar", clk.Now()); wait != 0 {
		t.Errorf("another container's first restart waits %v", wait)
	}
}

// A crash-looping container (restartPolicy Always) is restarted at once the
// first time, then shows CrashLoopBackOff until its back-off has passed.
func TestCrashLoopBackOff(t *testing.T) {
	n := newFakeNode(t)
	n.start()
	pod := n.createPod(testPod("crash", "1a1b2c3d-0000-4000-8000-000000000001"))
	n.waitPod(pod, "pod running", running)

	n.procs.exitProc(n.procs.alive()[0], 1)
	n.waitPod(pod, "first restart, at once", func(p *corev1.Pod) error {
		cs := containerStatus(p, "app")
		if cs.RestartCount != 1 || cs.State.Running == nil {
			return fmt.Errorf("restarts %d, state %+v", cs.RestartCount, cs.State)
		}
		if term := cs.LastTerminationState.Terminated; term == nil || term.ExitCode != 1 || term.Reason != "Error" {
			return fmt.Errorf("last state %+v, want terminated with exit code 1", cs.LastTerminationState)
		}
		return nil
	})

	n.procs.exitProc(n.procs.alive()[0], 1)
	n.waitPod(pod, "second restart backs off", func(p *corev1.Pod) error {
		cs := containerStatus(p, "app")
		if w := cs.State.Waiting; w == nil || w.Reason != "CrashLoopBackOff" ||
			w.Message != "back-off 10s restarting failed container=app pod=crash_default(1a1b2c3d-0000-4000-8000-000000000001)" {
			return fmt.Errorf("state %+v", cs.State)
		}
		return nil
	})
	if started := len(n.procs.started()); started != 2 {
		t.Fatalf("%d processes started during the back-off, want 2", started)
	}
	n.clock.Step(9 * time.Second)
	n.stepUntil("restart after 10s", func() error {
		if started := len(n.procs.started()); started != 3 {
			return fmt.Errorf("%d processes started", started)
		}
		return nil
	})
	n.waitPod(pod, "running again", func(p *corev1.Pod) error {
		if cs := containerStatus(p, "app"); cs.RestartCount != 2 || cs.State.Running == nil {
			return fmt.Errorf("restarts %d, state %+v", cs.RestartCount, cs.State)
		}
		return nil
	})
}

// restartPolicy decides what an ended container does: Always restarts it,
// OnFailure only after a failure, Never leaves it; a pod whose containers
// are all done for good is Succeeded or Failed.
func TestRestartPolicy(t *testing.T) {
	for _, tc := range []struct {
		policy    corev1.RestartPolicy
		code      int
		restarted bool
		phase     corev1.PodPhase
	}{
		{corev1.RestartPolicyAlways, 0, true, corev1.PodRunning},
		{corev1.RestartPolicyOnFailure, 1, true, corev1.PodRunning},
		{corev1.RestartPolicyOnFailure, 0, false, corev1.PodSucceeded},
		{corev1.RestartPolicyNever, 0, false, corev1.PodSucceeded},
		{corev1.RestartPolicyNever, 2, false, corev1.PodFailed},
	} {
		t.Run(fmt.Sprintf("%s/exit %d", tc.policy, tc.code), func(t *testing.T) {
			n := newFakeNode(t)
			n.start()
			p := testPod("job", "1a1b2c3d-0000-4000-8000-000000000001")
			p.Spec.RestartPolicy = tc.policy
			pod := n.createPod(p)
			n.waitPod(pod, "pod running", running)
			n.procs.exitProc(n.procs.alive()[0], tc.code)
			n.waitPod(pod, "pod "+string(tc.phase), func(p *corev1.Pod) error {
				cs := containerStatus(p, "app")
				if p.Status.Phase != tc.phase {
					return fmt.Errorf("phase %s, state %+v", p.Status.Phase, cs.State)
				}
				if tc.restarted && (cs.RestartCount != 1 || cs.State.Running == nil) {
					return fmt.Errorf("%d restarts, state %+v, want running again", cs.RestartCount, cs.State)
				}
				if !tc.restarted && (cs.State.Terminated == nil || cs.State.Terminated.ExitCode != int32(tc.code)) {
					return fmt.Errorf("state %+v, want terminated with %d", cs.State, tc.code)
				}
				// A container that was not started again was not restarted:
				// kubectl shows RESTARTS 0 for a completed Job pod.
				if !tc.restarted && cs.RestartCount != 0 {
					return fmt.Errorf("%d restarts of a container never started again, want 0", cs.RestartCount)
				}
				return nil
			})
			if want := map[bool]int{true: 2, false: 1}[tc.restarted]; len(n.procs.started()) != want {
				t.Errorf("%d processes started, want %d", len(n.procs.started()), want)
			}
		})
	}
}
