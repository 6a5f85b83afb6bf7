package printers

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Columns of kube-apiserver's printServiceAccount and printLease.

var serviceAccountColumns = []metav1.TableColumnDefinition{
	nameColumn,
	{Name: "Secrets", Type: "string", Description: corev1.ServiceAccount{}.SwaggerDoc()["secrets"]},
	ageColumn,
}

func serviceAccountCells(sa *corev1.ServiceAccount, now time.Time) []interface{} {
	return []interface{}{sa.Name, int64(len(sa.Secrets)), age(sa.CreationTimestamp, now)}
}

var leaseColumns = []metav1.TableColumnDefinition{
	nameColumn,
	column("Holder", coordinationv1.LeaseSpec{}.SwaggerDoc()["holderIdentity"]),
	ageColumn,
}

func leaseCells(l *coordinationv1.Lease, now time.Time) []interface{} {
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	return []interface{}{l.Name, holder, age(l.CreationTimestamp, now)}
}

func coordinationKind(kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: "coordination.k8s.io", Version: "v1", Kind: kind}
}
