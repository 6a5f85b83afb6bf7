package controllers

import (
	"fmt"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/testutil"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

func testPod(name string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "sched"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "sleeper"}}},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func (tc *testCluster) createPod(p *corev1.Pod) *corev1.Pod {
	tc.t.Helper()
	got, err := tc.client.CoreV1().Pods(p.Namespace).Create(tc.ctx, p, metav1.CreateOptions{})
	if err != nil {
		tc.t.Fatalf("creating pod %s: %v", p.Name, err)
	}
	return got
}

func (tc *testCluster) getPod(name string) *corev1.Pod {
	tc.t.Helper()
	p, err := tc.client.CoreV1().Pods("default").Get(tc.ctx, name, metav1.GetOptions{})
	if err != nil {
		tc.t.Fatalf("getting pod %s: %v", name, err)
	}
	return p
}

func (tc *testCluster) waitBound(name string) string {
	tc.t.Helper()
	var node string
	testutil.Eventually(tc.t, waitTimeout, "pod "+name+" bound", func() error {
		p := tc.getPod(name)
		node = p.Spec.NodeName
		if node == "" {
			return fmt.Errorf("%+v", p.Status.Conditions)
		}
		return nil
	})
	return node
}

func TestSchedulerSpreadsAcrossReadyNodes(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node-a", true, nil)
	tc.createNode("node-b", true, nil)
	tc.createNode("node-down", false, nil)
	tc.createNode("node-cordoned", true, nil, func(n *corev1.Node) { n.Spec.Unschedulable = true })
	tc.createNode("node-tainted", true, nil, func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}
	})
	tc.startControllers(Config{})
	for i := range 6 {
		tc.createPod(testPod(fmt.Sprintf("p%d", i)))
	}
	perNode := map[string]int{}
	for i := range 6 {
		perNode[tc.waitBound(fmt.Sprintf("p%d", i))]++
	}
	if perNode["node-a"] != 3 || perNode["node-b"] != 3 || len(perNode) != 2 {
		t.Errorf("pods per node = %v, want 3 on node-a and 3 on node-b", perNode)
	}
	testutil.Eventually(t, waitTimeout, "PodScheduled condition and Scheduled event", func() error {
		p := tc.getPod("p0")
		c := podCondition(p, corev1.PodScheduled)
		evs, err := tc.client.CoreV1().Events("default").List(tc.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=p0,reason=Scheduled"})
		if err != nil {
			t.Fatal(err)
		}
		want := "Successfully assigned default/p0 to " + p.Spec.NodeName
		ok := c != nil && c.Status == corev1.ConditionTrue && len(evs.Items) == 1 && evs.Items[0].Message == want &&
			evs.Items[0].Source.Component == "default-scheduler" && evs.Items[0].InvolvedObject.UID == p.UID
		if !ok {
			return fmt.Errorf("condition %+v events %+v", c, evs.Items)
		}
		return nil
	})

	// A toleration opens the tainted node; an empty one is then least loaded.
	tc.createPod(testPod("gpu", func(p *corev1.Pod) {
		p.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}
	}))
	if node := tc.waitBound("gpu"); node != "node-tainted" {
		t.Errorf("tolerating pod went to %s, want node-tainted", node)
	}
}

func TestSchedulerNodeSelector(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node-a", true, map[string]string{"disk": "hdd"})
	tc.createNode("node-b", true, map[string]string{"disk": "ssd"})
	tc.startControllers(Config{})
	for i := range 3 {
		tc.createPod(testPod(fmt.Sprintf("ssd-%d", i), func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"disk": "ssd"} }))
	}
	for i := range 3 {
		if node := tc.waitBound(fmt.Sprintf("ssd-%d", i)); node != "node-b" {
			t.Errorf("pod ssd-%d bound to %s, want node-b", i, node)
		}
	}
}

func TestSchedulerUnschedulableUntilNodeFits(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node-a", true, map[string]string{"disk": "hdd"})
	tc.createNode("node-b", false, map[string]string{"disk": "ssd"})
	tc.startControllers(Config{})
	tc.createPod(testPod("wants-ssd", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"disk": "ssd"} }))

	want := "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, " +
		"1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }. " +
		"preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
	testutil.Eventually(t, waitTimeout, "Unschedulable condition", func() error {
		p := tc.getPod("wants-ssd")
		c := podCondition(p, corev1.PodScheduled)
		if c == nil || c.Status != corev1.ConditionFalse || c.Reason != corev1.PodReasonUnschedulable || c.Message != want ||
			p.Spec.NodeName != "" || p.Status.Phase != corev1.PodPending {
			return fmt.Errorf("%+v", p.Status)
		}
		return nil
	})
	testutil.Eventually(t, waitTimeout, "FailedScheduling event", func() error {
		evs, err := tc.client.CoreV1().Events("default").List(tc.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=wants-ssd,reason=FailedScheduling"})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs.Items) != 1 || evs.Items[0].Type != corev1.EventTypeWarning {
			return fmt.Errorf("%+v", evs.Items)
		}
		return nil
	})

	// The node with the right label becomes Ready: the pod is bound to it.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error { // node IPAM writes the node too
		n, err := tc.client.CoreV1().Nodes().Get(tc.ctx, "node-b", metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.Conditions[0].Status = corev1.ConditionTrue
		_, err = tc.client.CoreV1().Nodes().UpdateStatus(tc.ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if node := tc.waitBound("wants-ssd"); node != "node-b" {
		t.Errorf("bound to %s, want node-b", node)
	}
	testutil.Eventually(t, waitTimeout, "PodScheduled True", func() error {
		c := podCondition(tc.getPod("wants-ssd"), corev1.PodScheduled)
		if c == nil || c.Status != corev1.ConditionTrue || c.Reason != "" {
			return fmt.Errorf("%+v", c)
		}
		return nil
	})

	// With no node at all, the message says so; a new node takes the pod.
	tc.createPod(testPod("needs-gpu", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"gpu": "yes"} }))
	testutil.Eventually(t, waitTimeout, "needs-gpu unschedulable", func() error {
		c := podCondition(tc.getPod("needs-gpu"), corev1.PodScheduled)
		if c == nil || c.Reason != corev1.PodReasonUnschedulable || !strings.HasPrefix(c.Message, "0/2 nodes are available: 2 node(s) didn't match") {
			return fmt.Errorf("%+v", c)
		}
		return nil
	})
	tc.createNode("node-gpu", true, map[string]string{"gpu": "yes"})
	if node := tc.waitBound("needs-gpu"); node != "node-gpu" {
		t.Errorf("bound to %s, want node-gpu", node)
	}
}

func TestSchedulerIgnoresOtherSchedulers(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node-a", true, nil)
	tc.startControllers(Config{})
	tc.createPod(testPod("custom", func(p *corev1.Pod) { p.Spec.SchedulerName = "my-scheduler" }))
	tc.createPod(testPod("default"))
	tc.waitBound("default")
	if p := tc.getPod("custom"); p.Spec.NodeName != "" || len(p.Status.Conditions) != 0 {
		t.Errorf("pod for another scheduler was touched: node %q conditions %+v", p.Spec.NodeName, p.Status.Conditions)
	}
}

func TestFitErrorMessage(t *testing.T) {
	for _, tt := range []struct {
		name    string
		nodes   int
		reasons map[string]int
		want    string
	}{
		{"no nodes", 0, nil, "no nodes available to schedule pods"},
		{"one reason", 1, map[string]int{"node(s) were unschedulable": 1},
			"0/1 nodes are available: 1 node(s) were unschedulable. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."},
		{"sorted", 3, map[string]int{"node(s) were unschedulable": 1, "node(s) didn't match Pod's node affinity/selector": 2},
			"0/3 nodes are available: 1 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := fitError(tt.nodes, tt.reasons); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestUnfit(t *testing.T) {
	ready := corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}
	node := func(mutate func(*corev1.Node)) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"zone": "a"}}, Status: *ready.DeepCopy()}
		if mutate != nil {
			mutate(n)
		}
		return n
	}
	for _, tt := range []struct {
		name string
		pod  *corev1.Pod
		node *corev1.Node
		want string
	}{
		{"fits", testPod("p"), node(nil), ""},
		{"no ready condition", testPod("p"), node(func(n *corev1.Node) { n.Status.Conditions = nil }),
			"node(s) had untolerated taint {node.kubernetes.io/unreachable: }"},
		{"cordoned", testPod("p"), node(func(n *corev1.Node) { n.Spec.Unschedulable = true }), "node(s) were unschedulable"},
		{"cordon tolerated", testPod("p", func(p *corev1.Pod) {
			p.Spec.Tolerations = []corev1.Toleration{{Key: taintUnschedulable, Operator: corev1.TolerationOpExists}}
		}), node(func(n *corev1.Node) { n.Spec.Unschedulable = true }), ""},
		{"PreferNoSchedule ignored", testPod("p"), node(func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectPreferNoSchedule}}
		}), ""},
		{"NoExecute", testPod("p"), node(func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: "k", Value: "v", Effect: corev1.TaintEffectNoExecute}}
		}), "node(s) had untolerated taint {k: v}"},
		{"selector", testPod("p", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"zone": "b"} }), node(nil),
			"node(s) didn't match Pod's node affinity/selector"},
		{"required affinity", testPod("p", func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"b", "c"}}}}},
			}}}
		}), node(nil), "node(s) didn't match Pod's node affinity/selector"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := unfit(tt.pod, tt.node); got != tt.want {
				t.Errorf("unfit = %q, want %q", got, tt.want)
			}
		})
	}
}
