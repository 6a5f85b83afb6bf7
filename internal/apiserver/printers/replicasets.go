package printers

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// replicaSetColumns are kubectl's columns for ReplicaSets and
// ReplicationControllers (kubernetes pkg/printers/internalversion).
var replicaSetColumns = []metav1.TableColumnDefinition{
	nameColumn,
	column("Desired", appsv1.ReplicaSetSpec{}.SwaggerDoc()["replicas"]),
	column("Current", appsv1.ReplicaSetStatus{}.SwaggerDoc()["replicas"]),
	column("Ready", appsv1.ReplicaSetStatus{}.SwaggerDoc()["readyReplicas"]),
	ageColumn,
	wideColumn("Containers", "Names of each container in the template."),
	wideColumn("Images", "Images referenced by each container in the template."),
	wideColumn("Selector", appsv1.ReplicaSetSpec{}.SwaggerDoc()["selector"]),
}

func replicaSetCells(rs *appsv1.ReplicaSet, now time.Time) []interface{} {
	selector := "<invalid>"
	if s, err := metav1.LabelSelectorAsSelector(rs.Spec.Selector); err == nil {
		selector = s.String()
	}
	return controllerCells(rs.ObjectMeta, rs.Spec.Replicas, rs.Status.Replicas, rs.Status.ReadyReplicas, &rs.Spec.Template, selector, now)
}

func replicationControllerCells(rc *corev1.ReplicationController, now time.Time) []interface{} {
	return controllerCells(rc.ObjectMeta, rc.Spec.Replicas, rc.Status.Replicas, rc.Status.ReadyReplicas, rc.Spec.Template,
		labels.FormatLabels(rc.Spec.Selector), now)
}

func controllerCells(m metav1.ObjectMeta, replicas *int32, current, ready int32, t *corev1.PodTemplateSpec, selector string, now time.Time) []interface{} {
	desired := int32(1) // the API default for an unset spec.replicas
	if replicas != nil {
		desired = *replicas
	}
	var names, images string
	if t != nil {
		names, images = containerCells(t.Spec.Containers)
	}
	return []interface{}{m.Name, int64(desired), int64(current), int64(ready), age(m.CreationTimestamp, now), names, images, selector}
}
