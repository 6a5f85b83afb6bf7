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
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/kubectl/pkg/polymorphichelpers"
)

func testStatefulSet(name string, replicas int32, muts ...func(*appsv1.StatefulSet)) *appsv1.StatefulSet {
	lbls := map[string]string{"app": name}
	s := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    &replicas,
			ServiceName: "nginx",
			Selector:    &metav1.LabelSelector{MatchLabels: lbls},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: lbls},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx"}}},
			},
		},
	}
	for _, m := range muts {
		m(s)
	}
	return s
}

func (tc *testCluster) createStatefulSet(s *appsv1.StatefulSet) *appsv1.StatefulSet {
	tc.t.Helper()
	got, err := tc.client.AppsV1().StatefulSets(s.Namespace).Create(tc.ctx, s, metav1.CreateOptions{})
	if err != nil {
		tc.t.Fatalf("creating statefulset: %v", err)
	}
	return got
}

func (tc *testCluster) getStatefulSet(name string) *appsv1.StatefulSet {
	tc.t.Helper()
	s, err := tc.client.AppsV1().StatefulSets("default").Get(tc.ctx, name, metav1.GetOptions{})
	if err != nil {
		tc.t.Fatalf("getting statefulset: %v", err)
	}
	return s
}

func (tc *testCluster) updateStatefulSet(name string, mutate func(*appsv1.StatefulSet)) {
	tc.t.Helper()
	for {
		s := tc.getStatefulSet(name)
		mutate(s)
		_, err := tc.client.AppsV1().StatefulSets("default").Update(tc.ctx, s, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "modified") {
			tc.t.Fatalf("updating statefulset: %v", err)
		}
	}
}

// waitSetPods waits until the pods of set name that are not being deleted
// are exactly names.
func (tc *testCluster) waitSetPods(name string, names ...string) map[string]corev1.Pod {
	tc.t.Helper()
	slices.Sort(names)
	byName := map[string]corev1.Pod{}
	testutil.Eventually(tc.t, waitTimeout, fmt.Sprintf("pods %v of %s", names, name), func() error {
		all := tc.pods("default", "app="+name)
		clear(byName)
		var have []string
		for _, p := range all {
			if p.DeletionTimestamp == nil {
				have = append(have, p.Name)
				byName[p.Name] = p
			}
		}
		slices.Sort(have)
		if !slices.Equal(have, names) {
			return errors.New(podNames(all))
		}
		return nil
	})
	return byName
}

func (tc *testCluster) setRolloutStatus(name string) (string, bool) {
	tc.t.Helper()
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(tc.getStatefulSet(name))
	if err != nil {
		tc.t.Fatal(err)
	}
	msg, done, err := (&polymorphichelpers.StatefulSetStatusViewer{}).Status(&unstructured.Unstructured{Object: u}, 0)
	if err != nil {
		return err.Error(), false
	}
	return strings.TrimSpace(msg), done
}

func TestStatefulSetOrderedReady(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node1", true, nil)
	tc.startControllers(Config{})
	a := tc.startAgent(false)
	set := tc.createStatefulSet(testStatefulSet("web", 3))
	if set.Spec.PodManagementPolicy != appsv1.OrderedReadyPodManagement || set.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType ||
		*set.Spec.UpdateStrategy.RollingUpdate.Partition != 0 || *set.Spec.RevisionHistoryLimit != 10 {
		t.Errorf("defaults: %+v", set.Spec)
	}

	// One at a time, each once the one before is Running and Ready.
	for i := range 3 {
		var names []string
		for j := 0; j <= i; j++ {
			names = append(names, fmt.Sprintf("web-%d", j))
		}
		pods := tc.waitSetPods("web", names...)
		p := pods[names[i]]
		if p.Spec.Hostname != p.Name || p.Spec.Subdomain != "nginx" {
			t.Errorf("pod %s: hostname %q subdomain %q", p.Name, p.Spec.Hostname, p.Spec.Subdomain)
		}
		if p.Labels[appsv1.StatefulSetPodNameLabel] != p.Name || p.Labels[appsv1.PodIndexLabel] != fmt.Sprint(i) ||
			!strings.HasPrefix(p.Labels[appsv1.ControllerRevisionHashLabelKey], "web-") {
			t.Errorf("pod %s labels %v", p.Name, p.Labels)
		}
		if ref := metav1.GetControllerOf(&p); ref == nil || ref.Kind != "StatefulSet" || ref.UID != set.UID {
			t.Errorf("pod %s: controller ref %+v", p.Name, ref)
		}
		testutil.Eventually(t, waitTimeout, p.Name+" bound and made ready", func() error {
			tc.readyAll("default", "app=web", a)
			got, err := tc.client.CoreV1().Pods("default").Get(tc.ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !isPodReady(got) {
				return fmt.Errorf("not ready: %+v", got.Status.Conditions)
			}
			return nil
		})
	}
	testutil.Eventually(t, waitTimeout, "status with three ready", func() error {
		st := tc.getStatefulSet("web").Status
		if st.Replicas != 3 || st.ReadyReplicas != 3 || st.AvailableReplicas != 3 || st.CurrentReplicas != 3 ||
			st.UpdatedReplicas != 3 || st.CurrentRevision == "" || st.CurrentRevision != st.UpdateRevision || st.ObservedGeneration != 1 {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
	if msg, done := tc.setRolloutStatus("web"); !done {
		t.Errorf("rollout status not done: %s", msg)
	}

	// Scale down through the scale subresource: the highest ordinal goes first.
	s, err := tc.client.AppsV1().StatefulSets("default").GetScale(tc.ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Spec.Replicas != 3 || s.Status.Replicas != 3 || s.Status.Selector != "app=web" {
		t.Errorf("scale = %+v", s)
	}
	s.Spec.Replicas = 1
	if _, err := tc.client.AppsV1().StatefulSets("default").UpdateScale(tc.ctx, "web", s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.startAgent(false) // finishes deletions
	tc.waitSetPods("web", "web-0")
	testutil.Eventually(t, waitTimeout, "status after scale down", func() error {
		st := tc.getStatefulSet("web").Status
		if st.Replicas != 1 || st.ReadyReplicas != 1 || st.ObservedGeneration != 2 {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
	var deleted []string
	for _, e := range tc.events("web") {
		if e.Reason == "SuccessfulDelete" {
			deleted = append(deleted, e.Message)
		}
	}
	if len(deleted) != 2 || !strings.Contains(deleted[0], "web-2") || !strings.Contains(deleted[1], "web-1") {
		t.Errorf("deletions %q, want web-2 then web-1", deleted)
	}
}

// events are the events about the object name, oldest first.
func (tc *testCluster) events(name string) []corev1.Event {
	tc.t.Helper()
	l, err := tc.client.CoreV1().Events("default").List(tc.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		tc.t.Fatal(err)
	}
	slices.SortFunc(l.Items, func(a, b corev1.Event) int { return strings.Compare(a.Name, b.Name) })
	return l.Items
}

func TestStatefulSetParallelAndStableNames(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node1", true, nil)
	tc.startControllers(Config{})
	tc.startAgent(false)
	tc.createStatefulSet(testStatefulSet("db", 3, func(s *appsv1.StatefulSet) { s.Spec.PodManagementPolicy = appsv1.ParallelPodManagement }))
	// All at once, none ready.
	pods := tc.waitSetPods("db", "db-0", "db-1", "db-2")
	old := pods["db-1"]
	if err := tc.client.CoreV1().Pods("default").Delete(tc.ctx, "db-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "db-1 recreated under its name", func() error {
		p, err := tc.client.CoreV1().Pods("default").Get(tc.ctx, "db-1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.UID == old.UID || p.DeletionTimestamp != nil {
			return errors.New(string(p.UID))
		}
		return nil
	})
	// A failed pod is replaced too.
	tc.updatePodStatus("default", "db-2", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed })
	failedUID := pods["db-2"].UID
	testutil.Eventually(t, waitTimeout, "failed db-2 replaced", func() error {
		p, err := tc.client.CoreV1().Pods("default").Get(tc.ctx, "db-2", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.UID == failedUID || p.Status.Phase == corev1.PodFailed {
			return errors.New(string(p.UID))
		}
		return nil
	})
}

func TestStatefulSetRollingUpdatePartition(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node1", true, nil)
	tc.startControllers(Config{})
	tc.startAgent(true)
	tc.createStatefulSet(testStatefulSet("web", 3))
	testutil.Eventually(t, waitTimeout, "rolled out", func() error {
		msg, done := tc.setRolloutStatus("web")
		if !done {
			return errors.New(msg)
		}
		return nil
	})
	first := tc.getStatefulSet("web").Status.CurrentRevision

	tc.updateStatefulSet("web", func(s *appsv1.StatefulSet) {
		s.Spec.Template.Spec.Containers[0].Image = "nginx:1.27"
		s.Spec.UpdateStrategy.RollingUpdate.Partition = ptrTo[int32](1)
	})
	testutil.Eventually(t, waitTimeout, "ordinals 1 and 2 updated, 0 kept", func() error {
		st := tc.getStatefulSet("web").Status
		pods := tc.waitSetPods("web", "web-0", "web-1", "web-2")
		ok := st.UpdatedReplicas == 2 && st.CurrentReplicas == 1 && st.ReadyReplicas == 3 && st.CurrentRevision == first && st.UpdateRevision != first &&
			pods["web-0"].Spec.Containers[0].Image == "nginx" && pods["web-1"].Spec.Containers[0].Image == "nginx:1.27" &&
			pods["web-2"].Spec.Containers[0].Image == "nginx:1.27"
		if !ok {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
	if msg, done := tc.setRolloutStatus("web"); !done {
		t.Errorf("partitioned rollout not done: %s", msg)
	}
	tc.updateStatefulSet("web", func(s *appsv1.StatefulSet) { s.Spec.UpdateStrategy.RollingUpdate.Partition = ptrTo[int32](0) })
	testutil.Eventually(t, waitTimeout, "all updated and the update revision current", func() error {
		st := tc.getStatefulSet("web").Status
		if st.UpdatedReplicas != 3 || st.CurrentReplicas != 3 || st.CurrentRevision != st.UpdateRevision || st.CurrentRevision == first ||
			st.ReadyReplicas != 3 {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
	for _, p := range tc.waitSetPods("web", "web-0", "web-1", "web-2") {
		if p.Labels[appsv1.ControllerRevisionHashLabelKey] != tc.getStatefulSet("web").Status.UpdateRevision {
			t.Errorf("pod %s at revision %s", p.Name, p.Labels[appsv1.ControllerRevisionHashLabelKey])
		}
	}
}

func TestStatefulSetOnDelete(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node1", true, nil)
	tc.startControllers(Config{})
	tc.startAgent(true)
	tc.createStatefulSet(testStatefulSet("web", 2, func(s *appsv1.StatefulSet) {
		s.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	}))
	tc.waitSetPods("web", "web-0", "web-1")
	tc.updateStatefulSet("web", func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.Containers[0].Image = "nginx:1.27" })
	testutil.Eventually(t, waitTimeout, "generation 2 observed, no pod replaced", func() error {
		st := tc.getStatefulSet("web").Status
		if st.ObservedGeneration != 2 || st.UpdatedReplicas != 0 || st.ReadyReplicas != 2 {
			return fmt.Errorf("%+v", st)
		}
		return nil
	})
	if err := tc.client.CoreV1().Pods("default").Delete(tc.ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "web-1 recreated from the new template", func() error {
		pods := tc.waitSetPods("web", "web-0", "web-1")
		if pods["web-1"].Spec.Containers[0].Image != "nginx:1.27" || pods["web-0"].Spec.Containers[0].Image != "nginx" {
			return fmt.Errorf("web-0 on %s, web-1 on %s", pods["web-0"].Spec.Containers[0].Image, pods["web-1"].Spec.Containers[0].Image)
		}
		return nil
	})
}

// TestStatefulSetHostnamesInEndpointSlices checks what cluster DNS needs for
// web-0.nginx.default.svc.cluster.local: the headless Service's slice names
// each pod by its hostname.
func TestStatefulSetHostnamesInEndpointSlices(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node1", true, nil)
	tc.startControllers(Config{})
	tc.startAgent(true)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "nginx", Namespace: "default"}, Spec: corev1.ServiceSpec{
		ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "web"},
		Ports: []corev1.ServicePort{{Name: "web", Port: 80}},
	}}
	if _, err := tc.client.CoreV1().Services("default").Create(tc.ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tc.createStatefulSet(testStatefulSet("web", 2))
	testutil.Eventually(t, waitTimeout, "hostnames in the slice", func() error {
		l, err := tc.client.DiscoveryV1().EndpointSlices("default").List(tc.ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=nginx"})
		if err != nil {
			return err
		}
		var hosts []string
		for _, s := range l.Items {
			for _, e := range s.Endpoints {
				if e.Hostname != nil {
					hosts = append(hosts, *e.Hostname)
				}
			}
		}
		slices.Sort(hosts)
		if !slices.Equal(hosts, []string{"web-0", "web-1"}) {
			return fmt.Errorf("%v", hosts)
		}
		return nil
	})
}

// TestGarbageCollectorDeletesPodsOfDeletedWorkloads: kubectl delete sts/ds
// (background propagation) leaves the pods to the garbage collector.
func TestGarbageCollectorDeletesPodsOfDeletedWorkloads(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("node1", true, nil)
	tc.startControllers(Config{})
	tc.startAgent(true)
	tc.createStatefulSet(testStatefulSet("web", 2))
	tc.createDaemonSet(testDaemonSet("agent"))
	tc.waitSetPods("web", "web-0", "web-1")
	tc.waitDaemonNodes("agent", "node1")
	bg := metav1.DeletePropagationBackground
	if err := tc.client.AppsV1().StatefulSets("default").Delete(tc.ctx, "web", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	if err := tc.client.AppsV1().DaemonSets("default").Delete(tc.ctx, "agent", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "pods of the deleted workloads gone", func() error {
		all := append(tc.pods("default", "app=web"), tc.pods("default", "app=agent")...)
		if len(all) != 0 {
			return errors.New(podNames(all))
		}
		return nil
	})
}
