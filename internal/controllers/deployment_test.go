package controllers

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/testutil"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/kubectl/pkg/polymorphichelpers"
)

func testDeployment(name string, replicas int32, image string) *appsv1.Deployment {
	lbls := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: lbls},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbls},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "web", Image: image,
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 9376}},
				}}},
			},
		},
	}
}

func (tc *testCluster) createDeployment(d *appsv1.Deployment) *appsv1.Deployment {
	tc.t.Helper()
	got, err := tc.client.AppsV1().Deployments(d.Namespace).Create(tc.ctx, d, metav1.CreateOptions{})
	if err != nil {
		tc.t.Fatalf("creating deployment: %v", err)
	}
	return got
}

func (tc *testCluster) getDeployment(name string) *appsv1.Deployment {
	tc.t.Helper()
	d, err := tc.client.AppsV1().Deployments("default").Get(tc.ctx, name, metav1.GetOptions{})
	if err != nil {
		tc.t.Fatalf("getting deployment: %v", err)
	}
	return d
}

func (tc *testCluster) updateDeployment(name string, mutate func(*appsv1.Deployment)) {
	tc.t.Helper()
	for {
		d := tc.getDeployment(name)
		mutate(d)
		_, err := tc.client.AppsV1().Deployments("default").Update(tc.ctx, d, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "modified") {
			tc.t.Fatalf("updating deployment: %v", err)
		}
	}
}

func (tc *testCluster) scale(name string, replicas int32) {
	tc.t.Helper()
	s, err := tc.client.AppsV1().Deployments("default").GetScale(tc.ctx, name, metav1.GetOptions{})
	if err != nil {
		tc.t.Fatal(err)
	}
	s.Spec.Replicas = replicas
	s.ResourceVersion = ""
	if _, err := tc.client.AppsV1().Deployments("default").UpdateScale(tc.ctx, name, s, metav1.UpdateOptions{}); err != nil {
		tc.t.Fatalf("scaling %s to %d: %v", name, replicas, err)
	}
}

// rolloutStatus is what `kubectl rollout status deployment/name` prints
// and whether it would exit.
func (tc *testCluster) rolloutStatus(name string) (string, bool) {
	tc.t.Helper()
	d := tc.getDeployment(name)
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(d)
	if err != nil {
		tc.t.Fatal(err)
	}
	msg, done, err := (&polymorphichelpers.DeploymentStatusViewer{}).Status(&unstructured.Unstructured{Object: u}, 0)
	if err != nil {
		return err.Error(), false
	}
	return strings.TrimSpace(msg), done
}

func (tc *testCluster) waitRolledOut(name string) {
	tc.t.Helper()
	testutil.Eventually(tc.t, waitTimeout, "rollout of "+name, func() error {
		msg, done := tc.rolloutStatus(name)
		if !done {
			return errors.New(msg)
		}
		return nil
	})
}

// waitActive waits until exactly n active pods of the deployment exist.
func (tc *testCluster) waitActive(name string, n int) []corev1.Pod {
	tc.t.Helper()
	var pods []corev1.Pod
	testutil.Eventually(tc.t, waitTimeout, fmt.Sprintf("%d active pods of %s", n, name), func() error {
		all := tc.pods("default", "app="+name)
		pods = activePods(all)
		if len(pods) != n {
			return errors.New(podNames(all))
		}
		return nil
	})
	return pods
}

func condition(d *appsv1.Deployment, t appsv1.DeploymentConditionType) appsv1.DeploymentCondition {
	for _, c := range d.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return appsv1.DeploymentCondition{}
}

var generatedSuffix = "[bcdfghjklmnpqrstvwxz2456789]{5}"

func TestDeploymentCreatesNamedOwnedPods(t *testing.T) {
	tc := newTestCluster(t)
	tc.startControllers(Config{})
	d := tc.createDeployment(testDeployment("web", 3, "serve-hostname"))
	pods := tc.waitActive("web", 3)

	hash := computeHash(&d.Spec.Template, nil)
	name := regexp.MustCompile("^web-" + hash + "-" + generatedSuffix + "$")
	for _, p := range pods {
		if !name.MatchString(p.Name) {
			t.Errorf("pod name %q does not match %s", p.Name, name)
		}
		if got := p.Labels[appsv1.DefaultDeploymentUniqueLabelKey]; got != hash {
			t.Errorf("pod %s: pod-template-hash = %q, want %q", p.Name, got, hash)
		}
		if p.GenerateName != "web-"+hash+"-" {
			t.Errorf("pod %s: generateName = %q", p.Name, p.GenerateName)
		}
		ref := metav1.GetControllerOf(&p)
		if ref == nil || ref.Kind != "ReplicaSet" || ref.APIVersion != "apps/v1" || ref.Name != "web-"+hash ||
			ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
			t.Errorf("pod %s: controller ref = %+v", p.Name, ref)
		}
		if p.Spec.Containers[0].Image != "serve-hostname" {
			t.Errorf("pod %s: image %q", p.Name, p.Spec.Containers[0].Image)
		}
	}
	testutil.Eventually(t, waitTimeout, "revision annotation and observed generation", func() error {
		d := tc.getDeployment("web")
		if d.Annotations[revisionAnnotation] != "1" || d.Status.ObservedGeneration != d.Generation || d.Status.Replicas != 3 {
			return fmt.Errorf("annotations %v status %+v", d.Annotations, d.Status)
		}
		return nil
	})
	msg, done := tc.rolloutStatus("web")
	if done || !strings.Contains(msg, "0 of 3 updated replicas are available") {
		t.Errorf("rollout status before pods are ready = %q, %v", msg, done)
	}
	d = tc.getDeployment("web")
	if c := condition(d, appsv1.DeploymentAvailable); c.Status != corev1.ConditionFalse || c.Reason != reasonMinimumUnavail {
		t.Errorf("Available condition before ready = %+v", c)
	}
}

func TestDeploymentScalesUpAndDown(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node-a", true, nil)
	tc.createNode("node-b", true, nil)
	tc.startAgent(true)
	tc.startControllers(Config{})
	tc.createDeployment(testDeployment("web", 3, "serve-hostname"))
	tc.waitActive("web", 3)
	tc.waitRolledOut("web")

	tc.scale("web", 5)
	tc.waitActive("web", 5)
	tc.waitRolledOut("web")

	tc.scale("web", 2)
	tc.waitActive("web", 2)
	testutil.Eventually(t, waitTimeout, "terminated pods to be gone", func() error {
		all := tc.pods("default", "app=web")
		if len(all) != 2 {
			return errors.New(podNames(all))
		}
		return nil
	})
	tc.waitRolledOut("web")
	var d *appsv1.Deployment
	testutil.Eventually(t, waitTimeout, "status of 2 replicas", func() error {
		d = tc.getDeployment("web")
		st := d.Status
		if st.Replicas != 2 || st.UpdatedReplicas != 2 || st.ReadyReplicas != 2 || st.AvailableReplicas != 2 ||
			st.UnavailableReplicas != 0 || st.TerminatingReplicas == nil || *st.TerminatingReplicas != 0 {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
	if c := condition(d, appsv1.DeploymentAvailable); c.Status != corev1.ConditionTrue || c.Reason != reasonMinimumAvailable {
		t.Errorf("Available = %+v", c)
	}
	if c := condition(d, appsv1.DeploymentProgressing); c.Status != corev1.ConditionTrue || c.Reason != reasonNewRSAvailable {
		t.Errorf("Progressing = %+v", c)
	}
	if d.Annotations[revisionAnnotation] != "1" {
		t.Errorf("scaling changed the revision: %v", d.Annotations)
	}
}

func TestDeploymentScaleDownDeletesNotReadyFirst(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node-a", true, nil)
	agent := tc.startAgent(false)
	tc.startControllers(Config{})
	tc.createDeployment(testDeployment("web", 5, "serve-hostname"))
	pods := tc.waitActive("web", 5)
	testutil.Eventually(t, waitTimeout, "pods bound", func() error {
		pods = activePods(tc.pods("default", "app=web"))
		for _, p := range pods {
			if p.Spec.NodeName == "" {
				return errors.New(podNames(pods))
			}
		}
		return nil
	})
	ready := map[string]bool{}
	for _, p := range pods[:3] {
		tc.setPodStatus("default", p.Name, agent.ip(), true)
		ready[p.Name] = true
	}
	for _, p := range pods[3:] {
		tc.setPodStatus("default", p.Name, agent.ip(), false)
	}
	testutil.Eventually(t, waitTimeout, "3 ready replicas", func() error {
		d := tc.getDeployment("web")
		if d.Status.ReadyReplicas != 3 {
			return fmt.Errorf("%+v", d.Status)
		}
		return nil
	})
	tc.scale("web", 3)
	left := tc.waitActive("web", 3)
	for _, p := range left {
		if !ready[p.Name] {
			t.Errorf("scale down kept not-ready pod %s and deleted a ready one", p.Name)
		}
	}
}

func TestDeploymentRollingUpdate(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node-a", true, nil)
	tc.createNode("node-b", true, nil)
	agent := tc.startAgent(false)
	tc.startControllers(Config{})
	d := testDeployment("web", 4, "v1")
	maxSurge, maxUnavailable := intstr.FromInt32(1), intstr.FromString("0%")
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &maxSurge, MaxUnavailable: &maxUnavailable}}
	tc.createDeployment(d)
	tc.waitActive("web", 4)
	testutil.Eventually(t, waitTimeout, "v1 pods ready", func() error {
		tc.readyAll("default", "app=web", agent)
		msg, done := tc.rolloutStatus("web")
		if !done {
			return errors.New(msg)
		}
		return nil
	})
	oldHash := computeHash(&tc.getDeployment("web").Spec.Template, nil)

	tc.updateDeployment("web", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "v2" })
	newHash := computeHash(&tc.getDeployment("web").Spec.Template, nil)
	if newHash == oldHash {
		t.Fatal("template change did not change the hash")
	}

	// Step by step: with maxSurge 1 and maxUnavailable 0, at most 5 pods
	// exist and at least 4 are ready at every point, and the rollout only
	// moves when a new pod becomes ready.
	for step := 1; step <= 4; step++ {
		testutil.Eventually(t, waitTimeout, fmt.Sprintf("step %d: new pod %d created", step, step), func() error {
			all := tc.pods("default", "app=web")
			act := activePods(all)
			nNew, nReady, unbound := 0, 0, 0
			for _, p := range act {
				if p.Labels[appsv1.DefaultDeploymentUniqueLabelKey] == newHash {
					nNew++
				}
				if p.Spec.NodeName == "" {
					unbound++
				}
				if isPodReady(&p) {
					nReady++
				}
			}
			if len(act) > 5 || nReady < 4 {
				t.Fatalf("step %d: %d active, %d ready pods: %s", step, len(act), nReady, podNames(all))
			}
			if nNew != step || unbound != 0 {
				return errors.New(podNames(all))
			}
			return nil
		})
		if msg, done := tc.rolloutStatus("web"); done {
			t.Fatalf("step %d: rollout reported done: %s", step, msg)
		}
		tc.readyAll("default", "app=web", agent)
	}
	tc.waitRolledOut("web")
	pods := tc.waitActive("web", 4)
	for _, p := range pods {
		if p.Labels[appsv1.DefaultDeploymentUniqueLabelKey] != newHash || p.Spec.Containers[0].Image != "v2" {
			t.Errorf("pod %s not updated: hash %s image %s", p.Name, p.Labels[appsv1.DefaultDeploymentUniqueLabelKey], p.Spec.Containers[0].Image)
		}
	}
	got := tc.getDeployment("web")
	if got.Annotations[revisionAnnotation] != "2" {
		t.Errorf("deployment revision = %q, want 2", got.Annotations[revisionAnnotation])
	}
	st := got.Status
	if st.ObservedGeneration != got.Generation || st.Replicas != 4 || st.UpdatedReplicas != 4 || st.AvailableReplicas != 4 || st.ReadyReplicas != 4 {
		t.Errorf("final status %+v", st)
	}
	prog := condition(got, appsv1.DeploymentProgressing)
	if prog.Reason != reasonNewRSAvailable || prog.Message != fmt.Sprintf("ReplicaSet %q has successfully progressed.", "web-"+newHash) {
		t.Errorf("Progressing = %+v", prog)
	}

	// Rolling back to the first template makes its revision the newest.
	tc.updateDeployment("web", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "v1" })
	testutil.Eventually(t, waitTimeout, "rollback to v1", func() error {
		tc.readyAll("default", "app=web", agent)
		msg, done := tc.rolloutStatus("web")
		if !done {
			return errors.New(msg)
		}
		return nil
	})
	got = tc.getDeployment("web")
	if got.Annotations[revisionAnnotation] != "3" {
		t.Errorf("revision after rollback = %q, want 3", got.Annotations[revisionAnnotation])
	}
	for _, p := range tc.waitActive("web", 4) {
		if p.Labels[appsv1.DefaultDeploymentUniqueLabelKey] != oldHash {
			t.Errorf("pod %s after rollback has hash %s, want %s", p.Name, p.Labels[appsv1.DefaultDeploymentUniqueLabelKey], oldHash)
		}
	}
}

func TestDeploymentRecreate(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node-a", true, nil)
	tc.startAgent(true)
	tc.startControllers(Config{})
	d := testDeployment("db", 3, "v1")
	d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	tc.createDeployment(d)
	tc.waitRolledOut("db")

	tc.updateDeployment("db", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "v2" })
	newHash := computeHash(&tc.getDeployment("db").Spec.Template, nil)
	testutil.Eventually(t, waitTimeout, "recreated pods", func() error {
		all := tc.pods("default", "app=db")
		nNew, nOld := 0, 0
		for _, p := range all {
			if p.Labels[appsv1.DefaultDeploymentUniqueLabelKey] == newHash {
				nNew++
			} else {
				nOld++
			}
		}
		if nNew > 0 && nOld > 0 {
			t.Fatalf("new pods started before old ones were gone: %s", podNames(all))
		}
		if nNew != 3 {
			return errors.New(podNames(all))
		}
		return nil
	})
	tc.waitRolledOut("db")
}

func TestDeploymentReplacesFailedPods(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node-a", true, nil)
	tc.startAgent(true)
	tc.startControllers(Config{})
	tc.createDeployment(testDeployment("web", 2, "v1"))
	tc.waitRolledOut("web")
	victim := tc.waitActive("web", 2)[0]
	tc.updatePodStatus("default", victim.Name, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodFailed
		setPodCondition(p, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse})
	})
	pods := tc.waitActive("web", 2)
	for _, p := range pods {
		if p.Name == victim.Name {
			t.Errorf("failed pod %s still counted", p.Name)
		}
	}
	tc.waitRolledOut("web")
}

func TestDeploymentMinReadySeconds(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node-a", true, nil)
	tc.startAgent(true)
	tc.startControllers(Config{})
	d := testDeployment("web", 2, "v1")
	d.Spec.MinReadySeconds = 1
	tc.createDeployment(d)
	testutil.Eventually(t, waitTimeout, "ready but not yet available", func() error {
		st := tc.getDeployment("web").Status
		if st.ReadyReplicas != 2 {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
	if st := tc.getDeployment("web").Status; st.AvailableReplicas == 2 {
		// Possible only if more than a second passed since the pods became ready.
		t.Logf("pods already available: %+v", st)
	}
	tc.waitRolledOut("web")
}

func TestGarbageCollectorDeletesPodsOfDeletedDeployment(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node-a", true, nil)
	tc.startAgent(true)
	tc.startControllers(Config{})
	tc.createDeployment(testDeployment("web", 3, "v1"))
	tc.waitActive("web", 3)
	// A pod owned by something the collector does not know survives.
	foreign := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "foreign", Namespace: "default", OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "example.com/v1", Kind: "Thing", Name: "x", UID: "1234", Controller: ptrTo(true),
		}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "sleeper"}}},
	}
	if _, err := tc.client.CoreV1().Pods("default").Create(tc.ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := tc.client.AppsV1().Deployments("default").Delete(tc.ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "pods of the deleted deployment gone", func() error {
		all := tc.pods("default", "app=web")
		if len(all) != 0 {
			return errors.New(podNames(all))
		}
		return nil
	})
	if _, err := tc.client.CoreV1().Pods("default").Get(tc.ctx, "foreign", metav1.GetOptions{}); err != nil {
		t.Errorf("pod with an unknown owner kind: %v", err)
	}
}

func TestGarbageCollectorAfterRestart(t *testing.T) {
	tc := newTestCluster(t)
	tc.startControllers(Config{})
	tc.createDeployment(testDeployment("web", 2, "v1"))
	tc.waitActive("web", 2)
	tc.stopControllers()
	// Deleted while no controller runs: the restarted collector finds the orphans.
	if err := tc.client.AppsV1().Deployments("default").Delete(tc.ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.startControllers(Config{})
	testutil.Eventually(t, waitTimeout, "orphans collected after restart", func() error {
		all := tc.pods("default", "app=web")
		if len(all) != 0 {
			return errors.New(podNames(all))
		}
		return nil
	})
}
