package printers

import (
	"reflect"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// kubectl get sa and kubectl get leases read as against kube-apiserver:
// NAME SECRETS AGE and NAME HOLDER AGE.
func TestServiceAccountAndLeaseTables(t *testing.T) {
	sa := &corev1.ServiceAccount{ObjectMeta: objectMeta("default", time.Hour),
		Secrets: []corev1.ObjectReference{{Name: "old-token"}}}
	holder := "node1"
	lease := &coordinationv1.Lease{ObjectMeta: objectMeta("node1", 2*time.Hour),
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}
	for _, tc := range []struct {
		resource string
		obj      runtime.Object
		columns  []string
		cells    []interface{}
	}{
		{"serviceaccounts", sa, []string{"Name", "Secrets", "Age"}, []interface{}{"default", int64(1), "60m"}},
		{"leases", lease, []string{"Name", "Holder", "Age"}, []interface{}{"node1", "node1", "120m"}},
	} {
		table, err := Table(tc.resource, []runtime.Object{tc.obj}, "", now)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, c := range table.ColumnDefinitions {
			names = append(names, c.Name)
		}
		if !reflect.DeepEqual(names, tc.columns) {
			t.Errorf("%s columns = %v, want %v", tc.resource, names, tc.columns)
		}
		if got := table.Rows[0].Cells; !reflect.DeepEqual(got, tc.cells) {
			t.Errorf("%s cells = %#v, want %#v", tc.resource, got, tc.cells)
		}
	}
}
