package printers

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestReplicaSetCells(t *testing.T) {
	tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx:1.27"}}}}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: objectMeta("web-5d4f8b7c9", 45*time.Second),
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr(int32(3)), Template: tmpl,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web", "pod-template-hash": "5d4f8b7c9"}}},
		Status: appsv1.ReplicaSetStatus{Replicas: 3, ReadyReplicas: 2},
	}
	checkRows(t, "replicasets", []rowCase{
		{"rolling out", rs,
			[]interface{}{"web-5d4f8b7c9", int64(3), int64(3), int64(2), "45s", "nginx", "nginx:1.27", "app=web,pod-template-hash=5d4f8b7c9"}},
		{"scaled to zero",
			&appsv1.ReplicaSet{ObjectMeta: objectMeta("old", time.Hour), Spec: appsv1.ReplicaSetSpec{Replicas: ptr(int32(0)), Selector: &metav1.LabelSelector{}}},
			[]interface{}{"old", int64(0), int64(0), int64(0), "60m", "", "", ""}},
	})
	checkRows(t, "replicationcontrollers", []rowCase{
		{"equality selector",
			&corev1.ReplicationController{ObjectMeta: objectMeta("nginx", 45*time.Second),
				Spec:   corev1.ReplicationControllerSpec{Selector: map[string]string{"app": "nginx"}, Template: &tmpl},
				Status: corev1.ReplicationControllerStatus{Replicas: 1, ReadyReplicas: 1}},
			[]interface{}{"nginx", int64(1), int64(1), int64(1), "45s", "nginx", "nginx:1.27", "app=nginx"}},
		{"no template", &corev1.ReplicationController{ObjectMeta: objectMeta("empty", 45*time.Second), Spec: corev1.ReplicationControllerSpec{Replicas: ptr(int32(2))}},
			[]interface{}{"empty", int64(2), int64(0), int64(0), "45s", "", "", "<none>"}},
	})
}
