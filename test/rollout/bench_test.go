package rollout_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// BenchmarkRollout100 measures a rollout of a 100-replica Deployment to a
// new template (the default 25% surge and unavailability) in a 2-node lab,
// from the template change until the Deployment reports all 100 new pods
// available: ReplicaSets scaled, pods made and started on the nodes,
// readiness probes passed, old pods gone.
//
//	go test -run '^$' -bench Rollout100 -benchtime 3x ./test/rollout/
func BenchmarkRollout100(b *testing.B) {
	l := testenv.NewLab(b, 2)
	c := testenv.Client(b, l)
	ctx := context.Background()
	replicas := int32(100)
	lbls := map[string]string{"app": "bench"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "bench"}, Spec: appsv1.DeploymentSpec{
		Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: lbls},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: lbls}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "web", Image: "registry.k8s.io/serve_hostname", Ports: []corev1.ContainerPort{{ContainerPort: 9376}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(9376)}},
				PeriodSeconds: 1},
		}}}},
	}}
	if _, err := c.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	waitComplete(b, c, 1)
	b.Logf("initial 100 pods available after %v", time.Since(start).Round(time.Millisecond))
	b.ResetTimer()
	for i := range b.N {
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"bench/round":"%d"}}}}}`, i)
		if _, err := c.AppsV1().Deployments("default").Patch(ctx, "bench", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
		waitComplete(b, c, int64(i+2))
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/rollout")
}

// waitComplete waits until the deployment's generation gen is rolled out:
// every replica updated, available and no old one left.
func waitComplete(b *testing.B, c kubernetes.Interface, gen int64) {
	b.Helper()
	testutil.Eventually(b, 5*time.Minute, fmt.Sprintf("rollout of generation %d", gen), func() error {
		d, err := c.AppsV1().Deployments("default").Get(context.Background(), "bench", metav1.GetOptions{})
		if err != nil {
			return err
		}
		st := d.Status
		if d.Generation != gen || st.ObservedGeneration < gen || st.UpdatedReplicas != 100 || st.Replicas != 100 || st.AvailableReplicas != 100 {
			return fmt.Errorf("generation %d status %+v", d.Generation, st)
		}
		return nil
	})
}
