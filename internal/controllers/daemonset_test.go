package controllers

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/testutil"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"k8s.io/kubectl/pkg/polymorphichelpers"
)

func testDaemonSet(name string, muts ...func(*appsv1.DaemonSet)) *appsv1.DaemonSet {
	lbls := map[string]string{"app": name}
	d := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: lbls},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbls},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "nginx"}}},
			},
		},
	}
	for _, m := range muts {
		m(d)
	}
	return d
}

func (tc *testCluster) createDaemonSet(d *appsv1.DaemonSet) *appsv1.DaemonSet {
	tc.t.Helper()
	got, err := tc.client.AppsV1().DaemonSets(d.Namespace).Create(tc.ctx, d, metav1.CreateOptions{})
	if err != nil {
		tc.t.Fatalf("creating daemonset: %v", err)
	}
	return got
}

func (tc *testCluster) getDaemonSet(name string) *appsv1.DaemonSet {
	tc.t.Helper()
	d, err := tc.client.AppsV1().DaemonSets("default").Get(tc.ctx, name, metav1.GetOptions{})
	if err != nil {
		tc.t.Fatalf("getting daemonset: %v", err)
	}
	return d
}

// waitDaemonNodes waits until the active pods of ds name are on exactly
// nodes, one each.
func (tc *testCluster) waitDaemonNodes(name string, nodes ...string) []corev1.Pod {
	tc.t.Helper()
	slices.Sort(nodes)
	var pods []corev1.Pod
	testutil.Eventually(tc.t, waitTimeout, fmt.Sprintf("pods of %s on %v", name, nodes), func() error {
		all := tc.pods("default", "app="+name)
		pods = activePods(all)
		var on []string
		for _, p := range pods {
			on = append(on, p.Spec.NodeName)
		}
		slices.Sort(on)
		if !slices.Equal(on, nodes) {
			return errors.New(podNames(all))
		}
		return nil
	})
	return pods
}

func (tc *testCluster) daemonRolloutStatus(name string) (string, bool) {
	tc.t.Helper()
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(tc.getDaemonSet(name))
	if err != nil {
		tc.t.Fatal(err)
	}
	msg, done, err := (&polymorphichelpers.DaemonSetStatusViewer{}).Status(&unstructured.Unstructured{Object: u}, 0)
	if err != nil {
		return err.Error(), false
	}
	return strings.TrimSpace(msg), done
}

func TestDaemonSetOnePodPerFittingNode(t *testing.T) {
	tc := newTestCluster(t)
	web := map[string]string{"role": "web"}
	tc.createNode("a", true, web)
	tc.createNode("b", true, web, func(n *corev1.Node) { n.Spec.Unschedulable = true }) // cordoned: daemons still run
	tc.createNode("c", true, web, func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}}
	})
	tc.createNode("d", true, nil) // no role=web
	tc.createNode("e", true, web, func(n *corev1.Node) {
		n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "edge", Effect: corev1.TaintEffectNoSchedule}}
	})
	tc.startControllers(Config{})
	a := tc.startAgent(false)
	ds := tc.createDaemonSet(testDaemonSet("ingress", func(d *appsv1.DaemonSet) {
		d.Spec.Template.Spec.NodeSelector = web
		d.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Value: "edge", Effect: corev1.TaintEffectNoSchedule}}
	}))
	pods := tc.waitDaemonNodes("ingress", "a", "b", "e")
	for _, p := range pods {
		if ref := metav1.GetControllerOf(&p); ref == nil || ref.Kind != "DaemonSet" || ref.UID != ds.UID {
			t.Errorf("pod %s: controller ref %+v", p.Name, ref)
		}
		if !strings.HasPrefix(p.Name, "ingress-") || p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] == "" || p.Labels["pod-template-generation"] != "1" {
			t.Errorf("pod %s: name or labels %v", p.Name, p.Labels)
		}
		if !slices.ContainsFunc(p.Spec.Tolerations, func(t corev1.Toleration) bool {
			return t.Key == taintUnschedulable && t.Effect == corev1.TaintEffectNoSchedule
		}) {
			t.Errorf("pod %s lacks the daemon tolerations: %+v", p.Name, p.Spec.Tolerations)
		}
	}
	testutil.Eventually(t, waitTimeout, "status before the pods run", func() error {
		st := tc.getDaemonSet("ingress").Status
		if st.DesiredNumberScheduled != 3 || st.CurrentNumberScheduled != 3 || st.NumberReady != 0 ||
			st.UpdatedNumberScheduled != 3 || st.NumberUnavailable != 3 || st.ObservedGeneration != 1 {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
	tc.readyAll("default", "app=ingress", a)
	testutil.Eventually(t, waitTimeout, "status with the pods ready", func() error {
		st := tc.getDaemonSet("ingress").Status
		if st.NumberReady != 3 || st.NumberAvailable != 3 || st.NumberUnavailable != 0 || st.NumberMisscheduled != 0 {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
	if msg, done := tc.daemonRolloutStatus("ingress"); !done {
		t.Errorf("rollout status not done: %s", msg)
	}

	// A node joins; a node leaves; a node stops matching.
	tc.createNode("f", true, web)
	tc.waitDaemonNodes("ingress", "a", "b", "e", "f")
	if err := tc.client.CoreV1().Nodes().Delete(tc.ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.waitDaemonNodes("ingress", "b", "e", "f")
	n, err := tc.client.CoreV1().Nodes().Get(tc.ctx, "e", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels = nil
	if _, err := tc.client.CoreV1().Nodes().Update(tc.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.waitDaemonNodes("ingress", "b", "f")
	tc.readyAll("default", "app=ingress", a)
	testutil.Eventually(t, waitTimeout, "status after the node changes", func() error {
		st := tc.getDaemonSet("ingress").Status
		if st.DesiredNumberScheduled != 2 || st.CurrentNumberScheduled != 2 || st.NumberReady != 2 {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
}

func TestDaemonSetRollingUpdate(t *testing.T) {
	tc := newTestCluster(t)
	for _, n := range []string{"n1", "n2", "n3"} {
		tc.createNode(n, true, nil)
	}
	tc.startControllers(Config{})
	tc.startAgent(true)
	tc.createDaemonSet(testDaemonSet("proxy"))
	old := tc.waitDaemonNodes("proxy", "n1", "n2", "n3")
	testutil.Eventually(t, waitTimeout, "rolled out", func() error {
		msg, done := tc.daemonRolloutStatus("proxy")
		if !done {
			return errors.New(msg)
		}
		return nil
	})

	d := tc.getDaemonSet("proxy")
	d.Spec.Template.Spec.Containers[0].Image = "nginx:1.27"
	if _, err := tc.client.AppsV1().DaemonSets("default").Update(tc.ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "every node on the new template", func() error {
		msg, done := tc.daemonRolloutStatus("proxy")
		if !done {
			return errors.New(msg)
		}
		return nil
	})
	pods := tc.waitDaemonNodes("proxy", "n1", "n2", "n3")
	for _, p := range pods {
		if p.Spec.Containers[0].Image != "nginx:1.27" || p.Labels["pod-template-generation"] != "2" {
			t.Errorf("pod %s after the update: image %s labels %v", p.Name, p.Spec.Containers[0].Image, p.Labels)
		}
		for _, o := range old {
			if o.Name == p.Name {
				t.Errorf("pod %s not replaced", p.Name)
			}
		}
	}
}

func TestDaemonSetOnDelete(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("n1", true, nil)
	tc.createNode("n2", true, nil)
	tc.startControllers(Config{})
	tc.startAgent(true)
	tc.createDaemonSet(testDaemonSet("logs", func(d *appsv1.DaemonSet) {
		d.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	}))
	tc.waitDaemonNodes("logs", "n1", "n2")
	// The controller may write status between the read and the update: retry
	// on conflict, as a client would.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := tc.getDaemonSet("logs")
		d.Spec.Template.Spec.Containers[0].Image = "nginx:1.27"
		_, err := tc.client.AppsV1().DaemonSets("default").Update(tc.ctx, d, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "generation 2 observed with no pod updated", func() error {
		st := tc.getDaemonSet("logs").Status
		if st.ObservedGeneration != 2 || st.UpdatedNumberScheduled != 0 || st.NumberAvailable != 2 {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
	pods := tc.waitDaemonNodes("logs", "n1", "n2")
	victim := pods[0]
	if err := tc.client.CoreV1().Pods("default").Delete(tc.ctx, victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "the deleted pod replaced from the new template", func() error {
		var desc []string
		updated := 0
		for _, p := range activePods(tc.pods("default", "app=logs")) {
			desc = append(desc, p.Name+"@"+p.Spec.NodeName+":"+p.Spec.Containers[0].Image)
			if p.Spec.Containers[0].Image == "nginx:1.27" && p.Spec.NodeName == victim.Spec.NodeName {
				updated++
			}
		}
		if updated != 1 || len(desc) != 2 {
			return errors.New(strings.Join(desc, " "))
		}
		return nil
	})
	testutil.Eventually(t, waitTimeout, "status counts one updated pod", func() error {
		st := tc.getDaemonSet("logs").Status
		if st.UpdatedNumberScheduled != 1 {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
}
