package kubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Containers get the kubernetes Service's variables exactly as the kubelet
// writes them.
func TestAPIServiceEnv(t *testing.T) {
	svc := &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.1",
		Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}}}}
	want := []string{
		"KUBERNETES_SERVICE_HOST=10.96.0.1",
		"KUBERNETES_SERVICE_PORT=443",
		"KUBERNETES_SERVICE_PORT_HTTPS=443",
		"KUBERNETES_PORT=tcp://10.96.0.1:443",
		"KUBERNETES_PORT_443_TCP=tcp://10.96.0.1:443",
		"KUBERNETES_PORT_443_TCP_PROTO=tcp",
		"KUBERNETES_PORT_443_TCP_PORT=443",
		"KUBERNETES_PORT_443_TCP_ADDR=10.96.0.1",
	}
	if got := serviceEnv("kubernetes", svc); !slices.Equal(got, want) {
		t.Errorf("serviceEnv =\n%q\nwant\n%q", got, want)
	}
}

// The token volume is found by its token projection and the mount of it.
func TestProjectedVolume(t *testing.T) {
	vol := corev1.Volume{Name: "kube-api-access-abcde", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}}
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}, vol},
		Containers: []corev1.Container{{Name: "app", VolumeMounts: []corev1.VolumeMount{
			{Name: "data", MountPath: "/data"},
			{Name: vol.Name, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}}}},
	}}
	v, path := projectedVolume(pod)
	if v == nil || v.Name != vol.Name || path != "/var/run/secrets/kubernetes.io/serviceaccount" {
		t.Errorf("projectedVolume = %v, %q", v, path)
	}
	pod.Spec.Containers[0].VolumeMounts = pod.Spec.Containers[0].VolumeMounts[:1]
	if v, _ := projectedVolume(pod); v != nil {
		t.Errorf("an unmounted token volume was found: %v", v.Name)
	}
}

// The agent writes the projected volume's files and fetches a new bound token
// only when the held one is due (80% of its lifetime).
func TestServiceAccountFilesAndRefresh(t *testing.T) {
	client := fake.NewSimpleClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt", Namespace: "team"}, Data: map[string]string{"ca.crt": "CA PEM"}})
	issued := 0
	var bound *authenticationv1.BoundObjectReference
	client.PrependReactor("create", "serviceaccounts", func(action k8stesting.Action) (bool, runtime.Object, error) {
		ca, ok := action.(k8stesting.CreateActionImpl)
		if !ok || ca.GetSubresource() != "token" {
			return false, nil, nil
		}
		tr := ca.GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		issued++
		bound = tr.Spec.BoundObjectRef
		tr.Status.Token = fmt.Sprintf("token-%d", issued)
		tr.Status.ExpirationTimestamp = metav1.NewTime(time.Now().Add(time.Duration(*tr.Spec.ExpirationSeconds) * time.Second))
		return true, tr, nil
	})
	a := &Agent{cfg: Config{DataDir: t.TempDir()}, client: client}
	exp := int64(3607)
	mode := int32(0o644)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team", UID: "uid-1"},
		Spec: corev1.PodSpec{ServiceAccountName: "default",
			Volumes: []corev1.Volume{{Name: "kube-api-access-abcde", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				DefaultMode: &mode,
				Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &exp}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
						Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace",
						FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
				}}}}},
			Containers: []corev1.Container{{Name: "c", VolumeMounts: []corev1.VolumeMount{{Name: "kube-api-access-abcde", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}}}},
		}}
	w := newPodWorker(a, "team", "web", pod.UID)
	binds, err := w.volumeBinds(pod)
	if err != nil || len(binds) != 1 || binds[0].Target != "/var/run/secrets/kubernetes.io/serviceaccount" || !binds[0].ReadOnly {
		t.Fatalf("binds = %+v, %v", binds, err)
	}
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(binds[0].Source, name))
		return string(b)
	}
	ctx := context.Background()
	for range 3 {
		if err := w.ensureServiceAccountFiles(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	if read("token") != "token-1" || read("ca.crt") != "CA PEM" || read("namespace") != "team" || issued != 1 {
		t.Fatalf("files token=%q ca.crt=%q namespace=%q after %d token requests", read("token"), read("ca.crt"), read("namespace"), issued)
	}
	if bound == nil || bound.Kind != "Pod" || bound.Name != "web" || bound.UID != "uid-1" {
		t.Errorf("token bound to %+v, want the pod", bound)
	}
	if due := time.Until(w.token.refreshAt); due < 47*time.Minute || due > 49*time.Minute {
		t.Errorf("refresh due in %v, want 80%% of 3607 s", due)
	}
	w.token.refreshAt = time.Now().Add(-time.Second) // 80% of the lifetime has passed
	if err := w.ensureServiceAccountFiles(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if read("token") != "token-2" || issued != 2 {
		t.Errorf("after the refresh time the token is %q after %d requests, want token-2", read("token"), issued)
	}
}
