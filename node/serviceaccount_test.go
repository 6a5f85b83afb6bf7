package node

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
