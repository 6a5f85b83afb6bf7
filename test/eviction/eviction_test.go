// Package eviction_test checks the node agent's local ephemeral storage
// eviction in a lab, as the kubelet's eviction manager does it: a pod that
// writes past its ephemeral-storage limit is Failed with reason Evicted and
// leaves its Service's endpoints; one under its limit keeps running.
package eviction_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var ctx = context.Background()

// kexec runs kubectl exec through the API server and the node agent, as the
// e2e framework does: the command runs in the container's working directory.
func kexec(l *lab.Lab, pod string, argv ...string) (string, error) {
	args := append([]string{"--kubeconfig", l.Kubeconfig(), "exec", pod, "--"}, argv...)
	out, err := exec.Command("kubectl", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// limitedPod runs script in busybox with an ephemeral-storage limit of 5Mi.
func limitedPod(name, script string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: "busybox",
			Command: []string{"sh", "-c", script},
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
				corev1.ResourceEphemeralStorage: resource.MustParse("5Mi")}}}}},
	}
}

func TestEphemeralStorageLimit(t *testing.T) {
	testenv.RequireRoot(t)
	l := testenv.NewLab(t, 1)
	c := testenv.Client(t, l)
	for _, p := range []*corev1.Pod{
		limitedPod("hog", "sleep 3600"),
		// Writes 1Mi into its working directory, its writable layer.
		limitedPod("quiet", "dd if=/dev/urandom of=file bs=1M count=1 && sleep 3600"),
	} {
		if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hog"}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "hog"}, PublishNotReadyAddresses: true,
		Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	if _, err := c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitPodReady(t, c, "default", "hog")
	testenv.WaitPodReady(t, c, "default", "quiet")
	testutil.Eventually(t, 30*time.Second, "hog's endpoint", func() error {
		if n := testenv.ReadyEndpoints(c, "default", "hog"); n != 1 {
			return fmt.Errorf("%d ready endpoints", n)
		}
		return nil
	})
	testutil.Eventually(t, 30*time.Second, "quiet wrote its file", func() error {
		out, err := kexec(l, "quiet", "wc", "-c", "file")
		if err != nil || !strings.HasPrefix(out, "1048576 ") {
			return fmt.Errorf("wc -c file: %q (%v)", out, err)
		}
		return nil
	})

	// An exec runs in the container's working directory, as the container
	// does: 10Mi there is past the 5Mi limit.
	if out, err := kexec(l, "hog", "dd", "if=/dev/urandom", "of=file", "bs=1M", "count=10"); err != nil {
		t.Fatalf("dd in hog: %v: %s", err, out)
	}
	var hog *corev1.Pod
	testutil.Eventually(t, 60*time.Second, "hog evicted", func() error {
		p, err := c.CoreV1().Pods("default").Get(ctx, "hog", metav1.GetOptions{})
		if err != nil {
			return err
		}
		hog = p
		if p.Status.Phase != corev1.PodFailed || p.Status.Reason != "Evicted" {
			return fmt.Errorf("phase %q, reason %q", p.Status.Phase, p.Status.Reason)
		}
		return nil
	})
	if want := "Pod ephemeral local storage usage exceeds the total limit of containers 5Mi. "; hog.Status.Message != want {
		t.Errorf("hog's message is %q, want %q", hog.Status.Message, want)
	}
	for _, cs := range hog.Status.ContainerStatuses {
		if cs.State.Terminated == nil {
			t.Errorf("hog's container %s is not terminated: %+v", cs.Name, cs.State)
		}
	}
	testutil.Eventually(t, 30*time.Second, "hog's endpoint gone", func() error {
		if n := testenv.ReadyEndpoints(c, "default", "hog"); n != 0 {
			return fmt.Errorf("%d ready endpoints", n)
		}
		return nil
	})

	quiet, err := c.CoreV1().Pods("default").Get(ctx, "quiet", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if quiet.Status.Phase != corev1.PodRunning || quiet.Status.Reason != "" {
		t.Errorf("quiet, under its limit: phase %q, reason %q, message %q", quiet.Status.Phase, quiet.Status.Reason, quiet.Status.Message)
	}
}
