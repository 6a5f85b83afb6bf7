package controllers

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestComputeHash(t *testing.T) {
	tmpl := testDeployment("web", 1, "v1").Spec.Template
	h := computeHash(&tmpl, nil)
	if !regexp.MustCompile("^[bcdfghjklmnpqrstvwxz2456789]{6,10}$").MatchString(h) {
		t.Errorf("hash %q is not a safely encoded fnv32a", h)
	}
	if again := computeHash(tmpl.DeepCopy(), nil); again != h {
		t.Errorf("hash not stable: %s vs %s", h, again)
	}
	changed := tmpl.DeepCopy()
	changed.Spec.Containers[0].Image = "v2"
	if computeHash(changed, nil) == h {
		t.Error("image change did not change the hash")
	}
	if computeHash(&tmpl, ptrTo[int32](1)) == h {
		t.Error("collision count did not change the hash")
	}
}

func TestResolveFenceposts(t *testing.T) {
	i, s := intstr.FromInt32, intstr.FromString
	for _, tt := range []struct {
		surge, unavail intstr.IntOrString
		replicas       int
		wantS, wantU   int
	}{
		{s("25%"), s("25%"), 4, 1, 1},
		{s("25%"), s("25%"), 3, 1, 0}, // surge rounds up, unavailable down
		{s("25%"), s("25%"), 10, 3, 2},
		{i(0), i(0), 3, 0, 1}, // both zero: one unavailable
		{s("0%"), s("10%"), 3, 0, 1},
		{i(2), i(1), 5, 2, 1},
		{s("100%"), s("0%"), 3, 3, 0},
	} {
		ru := &appsv1.RollingUpdateDeployment{MaxSurge: &tt.surge, MaxUnavailable: &tt.unavail}
		gs, gu := resolveFenceposts(ru, tt.replicas)
		if gs != tt.wantS || gu != tt.wantU {
			t.Errorf("surge %s unavailable %s of %d = %d, %d; want %d, %d",
				tt.surge.String(), tt.unavail.String(), tt.replicas, gs, gu, tt.wantS, tt.wantU)
		}
	}
}

func TestSortForDeletion(t *testing.T) {
	now := time.Now()
	ago := func(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d).Truncate(time.Second)) }
	pod := func(name, node string, phase corev1.PodPhase, readySince time.Duration, created time.Duration, mutate ...func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: ago(created)},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
		if readySince > 0 {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: ago(readySince)}}
		}
		for _, m := range mutate {
			m(p)
		}
		return p
	}
	pods := []*corev1.Pod{
		pod("ready-old", "a", corev1.PodRunning, time.Hour, 2*time.Hour),
		pod("ready-recent", "a", corev1.PodRunning, time.Minute, 2*time.Hour),
		pod("running-not-ready", "b", corev1.PodRunning, 0, time.Hour),
		pod("pending", "b", corev1.PodPending, 0, time.Hour),
		pod("unscheduled", "", corev1.PodPending, 0, 3*time.Hour),
		pod("ready-costly", "c", corev1.PodRunning, time.Minute, time.Hour, func(p *corev1.Pod) {
			p.Annotations = map[string]string{deletionCostAnnotation: "100"}
		}),
		pod("ready-alone", "d", corev1.PodRunning, time.Minute, 3*time.Hour),
		pod("ready-restarted", "e", corev1.PodRunning, time.Minute, 3*time.Hour, func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{RestartCount: 3}}
		}),
	}
	sortForDeletion(pods, pods, now)
	var got []string
	for _, p := range pods {
		got = append(got, p.Name)
	}
	want := "unscheduled pending running-not-ready ready-recent ready-old ready-restarted ready-alone ready-costly"
	if strings.Join(got, " ") != want {
		t.Errorf("deletion order\n got  %s\n want %s", strings.Join(got, " "), want)
	}
}

// TestImports keeps the package talking to the cluster through the API only.
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"apiserver", "store", "proxy", "dns", "ingress", "node", "sandbox"} {
			if dep == "github.com/minikit/minikit/"+banned || strings.HasPrefix(dep, "github.com/minikit/minikit/"+banned+"/") {
				t.Errorf("controllers depends on %s", dep)
			}
		}
	}
}
