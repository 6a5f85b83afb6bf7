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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	"k8s.io/kubectl/pkg/polymorphichelpers"
)

func testReplicaSet(name string, replicas int32, image string) *appsv1.ReplicaSet {
	lbls := map[string]string{"app": name}
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: lbls},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbls},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: image}}},
			},
		},
	}
}

// replicaSets are the deployment's ReplicaSets by name: "replicas/status
// replicas@revision image".
func (tc *testCluster) replicaSets(app string) map[string]string {
	tc.t.Helper()
	l, err := tc.client.AppsV1().ReplicaSets("default").List(tc.ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		tc.t.Fatal(err)
	}
	out := map[string]string{}
	for _, rs := range l.Items {
		out[rs.Name] = fmt.Sprintf("%d/%d@%s %s", *rs.Spec.Replicas, rs.Status.Replicas, rs.Annotations[revisionAnnotation], rs.Spec.Template.Spec.Containers[0].Image)
	}
	return out
}

func (tc *testCluster) waitReplicaSets(app string, want map[string]string) {
	tc.t.Helper()
	testutil.Eventually(tc.t, waitTimeout, "replica sets of "+app, func() error {
		got := tc.replicaSets(app)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("%v", got)
		}
		return nil
	})
}

func TestReplicaSetScalesUpAndDown(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node-a", true, nil)
	tc.startAgent(true)
	tc.startControllers(Config{})
	rs, err := tc.client.AppsV1().ReplicaSets("default").Create(tc.ctx, testReplicaSet("front", 3, "v1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods := tc.waitActive("front", 3)
	for _, p := range pods {
		ref := metav1.GetControllerOf(&p)
		if ref == nil || ref.Kind != "ReplicaSet" || ref.UID != rs.UID || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
			t.Errorf("pod %s: controller ref %+v", p.Name, ref)
		}
		if !strings.HasPrefix(p.Name, "front-") {
			t.Errorf("pod name %q", p.Name)
		}
	}
	testutil.Eventually(t, waitTimeout, "status of 3 ready", func() error {
		rs, _ := tc.client.AppsV1().ReplicaSets("default").Get(tc.ctx, "front", metav1.GetOptions{})
		st := rs.Status
		if st.Replicas != 3 || st.FullyLabeledReplicas != 3 || st.ReadyReplicas != 3 || st.AvailableReplicas != 3 ||
			st.ObservedGeneration != rs.Generation {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})

	// kubectl scale rs uses the scale subresource.
	sc, err := tc.client.AppsV1().ReplicaSets("default").GetScale(tc.ctx, "front", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sc.Spec.Replicas != 3 || sc.Status.Selector != "app=front" {
		t.Errorf("scale = %+v", sc)
	}
	sc.Spec.Replicas = 1
	if _, err := tc.client.AppsV1().ReplicaSets("default").UpdateScale(tc.ctx, "front", sc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.waitActive("front", 1)
	testutil.Eventually(t, waitTimeout, "status of 1", func() error {
		rs, _ := tc.client.AppsV1().ReplicaSets("default").Get(tc.ctx, "front", metav1.GetOptions{})
		if rs.Status.Replicas != 1 || rs.Status.ReadyReplicas != 1 {
			return fmt.Errorf("%+v", rs.Status)
		}
		return nil
	})

	// Deleting the ReplicaSet deletes its pods (background cascade).
	if err := tc.client.AppsV1().ReplicaSets("default").Delete(tc.ctx, "front", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "pods gone", func() error {
		all := tc.pods("default", "app=front")
		if len(all) != 0 {
			return errors.New(podNames(all))
		}
		return nil
	})
}

func TestReplicaSetAdoptsAndReleases(t *testing.T) {
	tc := newTestCluster(t)
	orphan := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "stray", Namespace: "default", Labels: map[string]string{"app": "front"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "v1"}}},
	}
	if _, err := tc.client.CoreV1().Pods("default").Create(tc.ctx, orphan, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The controllers start with the stray pod in their caches, so the set's
	// first sync finds it to adopt (a pod its informer has not seen yet would
	// be adopted later, one too many, and scaled away).
	tc.startControllers(Config{})
	rs, err := tc.client.AppsV1().ReplicaSets("default").Create(tc.ctx, testReplicaSet("front", 2, "v1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods := tc.waitActive("front", 2)
	testutil.Eventually(t, waitTimeout, "stray pod adopted", func() error {
		p, err := tc.client.CoreV1().Pods("default").Get(tc.ctx, "stray", metav1.GetOptions{})
		if err != nil {
			return err
		}
		ref := metav1.GetControllerOf(p)
		if ref == nil || ref.UID != rs.UID {
			return fmt.Errorf("%+v", p.OwnerReferences)
		}
		return nil
	})
	if !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.Name == "stray" }) {
		t.Errorf("the replica set made 2 pods instead of adopting the stray one: %s", podNames(pods))
	}

	// Relabelling an owned pod releases it, and the set makes another.
	patch := `{"metadata":{"labels":{"app":"debug"}}}`
	if _, err := tc.client.CoreV1().Pods("default").Patch(tc.ctx, "stray", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "stray pod released", func() error {
		p, _ := tc.client.CoreV1().Pods("default").Get(tc.ctx, "stray", metav1.GetOptions{})
		if len(p.OwnerReferences) != 0 {
			return fmt.Errorf("%+v", p.OwnerReferences)
		}
		return nil
	})
	tc.waitActive("front", 2)
}

func TestReplicationController(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node-a", true, nil)
	tc.startAgent(true)
	tc.startControllers(Config{})
	rc := &corev1.ReplicationController{
		ObjectMeta: metav1.ObjectMeta{Name: "nginx", Namespace: "default"},
		Spec: corev1.ReplicationControllerSpec{
			Replicas: ptrTo[int32](2),
			Template: &corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "nginx"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx"}}},
			},
		},
	}
	got, err := tc.client.CoreV1().ReplicationControllers("default").Create(tc.ctx, rc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got.Spec.Selector) != "map[app:nginx]" || got.Labels["app"] != "nginx" {
		t.Errorf("selector and labels not defaulted from the template: %v %v", got.Spec.Selector, got.Labels)
	}
	for _, p := range tc.waitActive("nginx", 2) {
		ref := metav1.GetControllerOf(&p)
		if ref == nil || ref.Kind != "ReplicationController" || ref.APIVersion != "v1" || ref.UID != got.UID {
			t.Errorf("pod %s: controller ref %+v", p.Name, ref)
		}
	}
	testutil.Eventually(t, waitTimeout, "rc status", func() error {
		rc, _ := tc.client.CoreV1().ReplicationControllers("default").Get(tc.ctx, "nginx", metav1.GetOptions{})
		if rc.Status.Replicas != 2 || rc.Status.ReadyReplicas != 2 || rc.Status.AvailableReplicas != 2 ||
			rc.Status.FullyLabeledReplicas != 2 || rc.Status.ObservedGeneration != rc.Generation {
			return fmt.Errorf("%+v", rc.Status)
		}
		return nil
	})
	sc, err := tc.client.CoreV1().ReplicationControllers("default").GetScale(tc.ctx, "nginx", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sc.Spec.Replicas = 4
	if _, err := tc.client.CoreV1().ReplicationControllers("default").UpdateScale(tc.ctx, "nginx", sc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.waitActive("nginx", 4)
	if err := tc.client.CoreV1().ReplicationControllers("default").Delete(tc.ctx, "nginx", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "pods gone", func() error {
		all := tc.pods("default", "app=nginx")
		if len(all) != 0 {
			return errors.New(podNames(all))
		}
		return nil
	})
}

// rollback is `kubectl rollout undo deployment/name --to-revision=rev`,
// which reads the ReplicaSets and patches the deployment's template.
func (tc *testCluster) rollback(name string, rev int64) string {
	tc.t.Helper()
	rb, err := polymorphichelpers.RollbackerFor(appsv1.SchemeGroupVersion.WithKind("Deployment").GroupKind(), tc.client)
	if err != nil {
		tc.t.Fatal(err)
	}
	msg, err := rb.Rollback(tc.getDeployment(name), nil, rev, cmdutil.DryRunNone)
	if err != nil {
		tc.t.Fatalf("rollout undo: %v", err)
	}
	return msg
}

func TestDeploymentOwnsReplicaSetsAndRollsBack(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node-a", true, nil)
	tc.startAgent(true)
	tc.startControllers(Config{})
	d := testDeployment("web", 3, "v1")
	d.Annotations = map[string]string{"kubernetes.io/change-cause": "first"}
	maxSurge := intstr.FromInt32(1)
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &maxSurge}}
	d = tc.createDeployment(d)
	h1 := computeHash(&d.Spec.Template, nil)
	tc.waitRolledOut("web")
	tc.waitReplicaSets("web", map[string]string{"web-" + h1: "3/3@1 v1"})
	rs, err := tc.client.AppsV1().ReplicaSets("default").Get(tc.ctx, "web-"+h1, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ref := metav1.GetControllerOf(rs); ref == nil || ref.Kind != "Deployment" || ref.UID != d.UID {
		t.Errorf("replica set controller ref %+v", ref)
	}
	if rs.Labels[appsv1.DefaultDeploymentUniqueLabelKey] != h1 || rs.Spec.Selector.MatchLabels[appsv1.DefaultDeploymentUniqueLabelKey] != h1 ||
		rs.Annotations[desiredReplicasAnnotation] != "3" || rs.Annotations[maxReplicasAnnotation] != "4" ||
		rs.Annotations["kubernetes.io/change-cause"] != "first" {
		t.Errorf("replica set labels %v selector %v annotations %v", rs.Labels, rs.Spec.Selector, rs.Annotations)
	}

	tc.updateDeployment("web", func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.Containers[0].Image = "v2"
		d.Annotations["kubernetes.io/change-cause"] = "second"
	})
	h2 := computeHash(&tc.getDeployment("web").Spec.Template, nil)
	tc.waitRolledOut("web")
	tc.waitReplicaSets("web", map[string]string{"web-" + h1: "0/0@1 v1", "web-" + h2: "3/3@2 v2"})

	// kubectl rollout undo --to-revision=1 brings the first template back;
	// its ReplicaSet becomes revision 3 and is scaled up again.
	if msg := tc.rollback("web", 1); msg != "rolled back" {
		t.Errorf("rollback said %q", msg)
	}
	got := tc.getDeployment("web")
	if img := got.Spec.Template.Spec.Containers[0].Image; img != "v1" || got.Annotations["kubernetes.io/change-cause"] != "first" {
		t.Errorf("after undo: image %s annotations %v", img, got.Annotations)
	}
	tc.waitRolledOut("web")
	tc.waitReplicaSets("web", map[string]string{"web-" + h1: "3/3@3 v1", "web-" + h2: "0/0@2 v2"})
	for _, p := range tc.waitActive("web", 3) {
		if p.Labels[appsv1.DefaultDeploymentUniqueLabelKey] != h1 {
			t.Errorf("pod %s after undo has hash %s", p.Name, p.Labels[appsv1.DefaultDeploymentUniqueLabelKey])
		}
	}
	testutil.Eventually(t, waitTimeout, "deployment revision 3", func() error {
		a := tc.getDeployment("web").Annotations
		if a[revisionAnnotation] != "3" {
			return fmt.Errorf("%v", a)
		}
		return nil
	})
	if msg := tc.rollback("web", 3); !strings.Contains(msg, "skipped rollback") {
		t.Errorf("rollback to the current revision said %q", msg)
	}
}

func TestDeploymentPauseResumeAndHistoryLimit(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node-a", true, nil)
	tc.startAgent(true)
	tc.startControllers(Config{})
	d := testDeployment("web", 2, "v1")
	d.Spec.RevisionHistoryLimit = ptrTo[int32](1)
	d = tc.createDeployment(d)
	h1 := computeHash(&d.Spec.Template, nil)
	tc.waitRolledOut("web")

	// Paused: a template change starts no rollout, a scale still applies.
	tc.updateDeployment("web", func(d *appsv1.Deployment) { d.Spec.Paused = true })
	tc.updateDeployment("web", func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.Containers[0].Image = "v2"
		d.Spec.Replicas = ptrTo[int32](3)
	})
	tc.waitReplicaSets("web", map[string]string{"web-" + h1: "3/3@1 v1"})
	testutil.Eventually(t, waitTimeout, "paused condition", func() error {
		c := condition(tc.getDeployment("web"), appsv1.DeploymentProgressing)
		if c.Reason != reasonPaused {
			return fmt.Errorf("%+v", c)
		}
		return nil
	})
	if len(tc.replicaSets("web")) != 1 {
		t.Fatalf("paused deployment made a new replica set: %v", tc.replicaSets("web"))
	}

	tc.updateDeployment("web", func(d *appsv1.Deployment) { d.Spec.Paused = false })
	h2 := computeHash(&tc.getDeployment("web").Spec.Template, nil)
	tc.waitRolledOut("web")
	tc.waitReplicaSets("web", map[string]string{"web-" + h1: "0/0@1 v1", "web-" + h2: "3/3@2 v2"})

	// A third template: with revisionHistoryLimit 1 the oldest set goes.
	tc.updateDeployment("web", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "v3" })
	h3 := computeHash(&tc.getDeployment("web").Spec.Template, nil)
	tc.waitRolledOut("web")
	tc.waitReplicaSets("web", map[string]string{"web-" + h2: "0/0@2 v2", "web-" + h3: "3/3@3 v3"})
}

// TestDeploymentUpgradeAdoptsPods starts from what an earlier minikit left:
// a Deployment owning its pods directly. The first sync makes the
// ReplicaSet of their template hash and moves the pods under it.
func TestDeploymentUpgradeAdoptsPods(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node-a", true, nil)
	d := tc.createDeployment(testDeployment("web", 3, "v1"))
	hash := computeHash(&d.Spec.Template, nil)
	var uids []string
	for i := range 3 {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("web-%s-old%d", hash, i), Namespace: "default",
				Labels:          map[string]string{"app": "web", appsv1.DefaultDeploymentUniqueLabelKey: hash},
				Annotations:     map[string]string{revisionAnnotation: "1"},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, deploymentKind)},
			},
			Spec: *d.Spec.Template.Spec.DeepCopy(),
		}
		p.Spec.NodeName = "node-a"
		got, err := tc.client.CoreV1().Pods("default").Create(tc.ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tc.setPodStatus("default", got.Name, fmt.Sprintf("10.244.0.%d", 10+i), true)
		uids = append(uids, string(got.UID))
	}
	tc.startAgent(true)
	tc.startControllers(Config{})

	tc.waitReplicaSets("web", map[string]string{"web-" + hash: "3/3@1 v1"})
	rs, err := tc.client.AppsV1().ReplicaSets("default").Get(tc.ctx, "web-"+hash, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "pods moved under the replica set", func() error {
		pods := tc.pods("default", "app=web")
		var got []string
		moved := 0
		for _, p := range pods {
			got = append(got, string(p.UID))
			if ref := metav1.GetControllerOf(&p); ref != nil && ref.UID == rs.UID && len(p.OwnerReferences) == 1 {
				moved++
			}
		}
		slices.Sort(got)
		slices.Sort(uids)
		if moved != 3 || !slices.Equal(got, uids) {
			return errors.New(podNames(pods))
		}
		return nil
	})
	tc.waitRolledOut("web")
	if pods := tc.pods("default", "app=web"); len(pods) != 3 {
		t.Errorf("pods after upgrade: %s", podNames(pods))
	}
	// And the upgraded deployment rolls as any other.
	tc.updateDeployment("web", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "v2" })
	h2 := computeHash(&tc.getDeployment("web").Spec.Template, nil)
	tc.waitRolledOut("web")
	tc.waitReplicaSets("web", map[string]string{"web-" + hash: "0/0@1 v1", "web-" + h2: "3/3@2 v2"})
}

func TestDeploymentCascadingDeletion(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node-a", true, nil)
	tc.startAgent(true)
	tc.startControllers(Config{})
	deps := tc.client.AppsV1().Deployments("default")

	// Orphan (kubectl delete --cascade=orphan): the ReplicaSet and its pods
	// stay, without the reference to the deployment.
	tc.createDeployment(testDeployment("keep", 2, "v1"))
	tc.waitRolledOut("keep")
	orphan := metav1.DeletePropagationOrphan
	if err := deps.Delete(tc.ctx, "keep", metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	l, err := tc.client.AppsV1().ReplicaSets("default").List(tc.ctx, metav1.ListOptions{LabelSelector: "app=keep"})
	if err != nil || len(l.Items) != 1 || len(l.Items[0].OwnerReferences) != 0 {
		t.Fatalf("replica sets after orphaning delete: %+v %v", l, err)
	}
	if pods := activePods(tc.pods("default", "app=keep")); len(pods) != 2 {
		t.Errorf("pods after orphaning delete: %s", podNames(pods))
	}

	// Orphaning a ReplicaSet leaves its pods ownerless, and nothing that
	// still has it cached adopts them back.
	rsName := ""
	for name := range tc.replicaSets("keep") {
		rsName = name
	}
	if err := tc.client.AppsV1().ReplicaSets("default").Delete(tc.ctx, rsName, metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	tc.createDeployment(testDeployment("web", 2, "v1")) // a sync of the controllers in between
	tc.waitRolledOut("web")
	pods := activePods(tc.pods("default", "app=keep"))
	if len(pods) != 2 {
		t.Errorf("pods after orphaning their replica set: %s", podNames(pods))
	}
	for _, p := range pods {
		if len(p.OwnerReferences) != 0 {
			t.Errorf("pod %s owners %+v", p.Name, p.OwnerReferences)
		}
	}

	// Foreground: the deployment stays, marked, until its ReplicaSet and
	// pods are gone.
	fg := metav1.DeletePropagationForeground
	if err := deps.Delete(tc.ctx, "web", metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		t.Fatal(err)
	}
	if d, err := deps.Get(tc.ctx, "web", metav1.GetOptions{}); err == nil {
		if d.DeletionTimestamp == nil || !slices.Contains(d.Finalizers, metav1.FinalizerDeleteDependents) {
			t.Errorf("deployment deleted in the foreground: %v %v", d.DeletionTimestamp, d.Finalizers)
		}
	}
	testutil.Eventually(t, waitTimeout, "deployment, replica set and pods gone", func() error {
		_, err := deps.Get(tc.ctx, "web", metav1.GetOptions{})
		rs := tc.replicaSets("web")
		pods := tc.pods("default", "app=web")
		if err == nil || len(rs) != 0 || len(pods) != 0 {
			return fmt.Errorf("%v %v %s", err, rs, podNames(pods))
		}
		return nil
	})
	// Background (the default): the collector follows Deployment -> RS -> Pod.
	tc.createDeployment(testDeployment("bg", 2, "v1"))
	tc.waitRolledOut("bg")
	if err := deps.Delete(tc.ctx, "bg", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "background cascade", func() error {
		rs := tc.replicaSets("bg")
		pods := tc.pods("default", "app=bg")
		if len(rs) != 0 || len(pods) != 0 {
			return fmt.Errorf("%v %s", rs, podNames(pods))
		}
		return nil
	})
}
