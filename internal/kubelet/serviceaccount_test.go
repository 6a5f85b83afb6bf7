package kubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
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

// The user a projected token belongs to is the one user all the pod's
// containers run as, the container's runAsUser before the pod's.
func TestFsUserOf(t *testing.T) {
	u := func(v int64) *int64 { return &v }
	sc := func(v int64) *corev1.SecurityContext { return &corev1.SecurityContext{RunAsUser: &v} }
	for _, tt := range []struct {
		name       string
		pod        *corev1.PodSecurityContext
		init, main []*corev1.SecurityContext
		want       *int64
	}{
		{name: "nothing set", main: []*corev1.SecurityContext{nil}},
		{name: "the pod's", pod: &corev1.PodSecurityContext{RunAsUser: u(1000)}, main: []*corev1.SecurityContext{nil, nil}, want: u(1000)},
		{name: "the containers' agree", main: []*corev1.SecurityContext{sc(7), sc(7)}, want: u(7)},
		{name: "a container overrides the pod", pod: &corev1.PodSecurityContext{RunAsUser: u(1000)}, main: []*corev1.SecurityContext{sc(7)}, want: u(7)},
		{name: "two users", pod: &corev1.PodSecurityContext{RunAsUser: u(1000)}, main: []*corev1.SecurityContext{sc(7), nil}},
		{name: "an init container without one", init: []*corev1.SecurityContext{nil}, main: []*corev1.SecurityContext{sc(7)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: tt.pod}}
			for _, c := range tt.init {
				pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{SecurityContext: c})
			}
			for _, c := range tt.main {
				pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{SecurityContext: c})
			}
			got := fsUserOf(pod)
			if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
				t.Errorf("fsUserOf = %v, want %v", ptrString(got), ptrString(tt.want))
			}
		})
	}
}

func ptrString(p *int64) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

// A projected token's mode and owner follow runAsUser and fsGroup as the
// kubelet sets them (the cases of the [sig-auth] spec "should set ownership
// and permission when RunAsUser or FsGroup is present").
func TestProjectedTokenOwnership(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: it gives files to other users")
	}
	u := func(v int64) *int64 { return &v }
	for _, tt := range []struct {
		name               string
		runAsUser, fsGroup *int64
		perm               os.FileMode
		uid, gid           uint32
	}{
		{name: "runAsUser", runAsUser: u(1000), perm: 0o600, uid: 1000},
		{name: "fsGroup", fsGroup: u(10000), perm: 0o640, gid: 10000},
		{name: "both", runAsUser: u(1000), fsGroup: u(10000), perm: 0o640, uid: 1000, gid: 10000},
		{name: "neither", perm: 0o644},
	} {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewSimpleClientset()
			client.PrependReactor("create", "serviceaccounts", func(action k8stesting.Action) (bool, runtime.Object, error) {
				tr := action.(k8stesting.CreateActionImpl).GetObject().(*authenticationv1.TokenRequest).DeepCopy()
				tr.Status.Token = "header.payload.signature"
				tr.Status.ExpirationTimestamp = metav1.NewTime(time.Now().Add(time.Hour))
				return true, tr, nil
			})
			a := &Agent{cfg: Config{DataDir: t.TempDir()}, client: client}
			mode, exp := int32(0o644), int64(3600)
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
				Spec: corev1.PodSpec{ServiceAccountName: "default",
					SecurityContext: &corev1.PodSecurityContext{RunAsUser: tt.runAsUser, FSGroup: tt.fsGroup},
					Volumes: []corev1.Volume{{Name: "test-volume", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
						DefaultMode: &mode, Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &exp}}}}}}},
					Containers: []corev1.Container{{Name: "c", VolumeMounts: []corev1.VolumeMount{{Name: "test-volume", MountPath: "/test-volume", ReadOnly: true}}}},
				}}
			w := newPodWorker(a, "ns", "p", pod.UID)
			if err := w.ensureServiceAccountFiles(context.Background(), pod); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(filepath.Join(w.volumeDir("test-volume"), "token"))
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			if fi.Mode().Perm() != tt.perm || st.Uid != tt.uid || st.Gid != tt.gid {
				t.Errorf("token is %v %d:%d, want %v %d:%d", fi.Mode().Perm(), st.Uid, st.Gid, tt.perm, tt.uid, tt.gid)
			}
		})
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
	if due := time.Until(w.token.refreshAt["kube-api-access-abcde/token"]); due < 47*time.Minute || due > 49*time.Minute {
		t.Errorf("refresh due in %v, want 80%% of 3607 s", due)
	}
	w.token.refreshAt["kube-api-access-abcde/token"] = time.Now().Add(-time.Second) // 80% of the lifetime has passed
	if err := w.ensureServiceAccountFiles(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if read("token") != "token-2" || issued != 2 {
		t.Errorf("after the refresh time the token is %q after %d requests, want token-2", read("token"), issued)
	}
}
