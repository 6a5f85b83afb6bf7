package minikittest_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/minikit/minikit/pkg/minikittest"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// exampleT stands in for the *testing.T a test has, so that the examples
// run: it keeps a temporary directory and runs the cleanups at finish.
type exampleT struct {
	testing.TB
	dir      string
	cleanups []func()
}

func newExampleT() *exampleT {
	dir, err := os.MkdirTemp("", "minikittest-example-")
	if err != nil {
		panic(err)
	}
	return &exampleT{dir: dir}
}

func (t *exampleT) Helper()                        {}
func (t *exampleT) TempDir() string                { d, _ := os.MkdirTemp(t.dir, ""); return d }
func (t *exampleT) Cleanup(f func())               { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (t *exampleT) Fatal(a ...any)                 { panic(fmt.Sprint(a...)) }
func (t *exampleT) Logf(format string, a ...any)   {}
func (t *exampleT) finish() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	os.RemoveAll(t.dir)
}

// A test starts its own API, with the controllers: a Deployment makes its
// Pods, which stay Pending since no node runs them.
func ExampleStartAPI() {
	t := newExampleT() // in a test: the test's t
	defer t.finish()

	cfg := minikittest.StartAPI(t)
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	labels := map[string]string{"app": "web"}
	client.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}},
	}, metav1.CreateOptions{})

	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		pods, _ := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if pods != nil && len(pods.Items) == 2 {
			fmt.Println(len(pods.Items), "pods,", pods.Items[0].Status.Phase)
			break
		}
	}
	// Output: 2 pods, Pending
}

// CRDs from files or directories are Established when StartAPI returns.
func ExampleWithCRDs() {
	t := newExampleT() // in a test: the test's t
	defer t.finish()

	cfg := minikittest.StartAPI(t, minikittest.WithCRDs("testdata/crds/widgets.yaml"))
	client := kubernetes.NewForConfigOrDie(cfg)
	res, err := client.Discovery().ServerResourcesForGroupVersion("example.com/v1")
	if err != nil {
		panic(err)
	}
	for _, r := range res.APIResources {
		fmt.Println(r.Name, r.Kind)
	}
	// Output:
	// widgets Widget
	// widgets/status Widget
}
