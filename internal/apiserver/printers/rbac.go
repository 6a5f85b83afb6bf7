package printers

import (
	"fmt"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Columns of kube-apiserver's printRoleBinding and printClusterRoleBinding
// (Roles and ClusterRoles have none: the default Name and Created At).

var roleBindingColumns = []metav1.TableColumnDefinition{
	nameColumn,
	column("Role", rbacv1.RoleBinding{}.SwaggerDoc()["roleRef"]),
	ageColumn,
	wideColumn("Users", "Users in the roleBinding"),
	wideColumn("Groups", "Groups in the roleBinding"),
	wideColumn("ServiceAccounts", "ServiceAccounts in the roleBinding"),
}

var clusterRoleBindingColumns = []metav1.TableColumnDefinition{
	nameColumn,
	column("Role", rbacv1.ClusterRoleBinding{}.SwaggerDoc()["roleRef"]),
	ageColumn,
	wideColumn("Users", "Users in the clusterRoleBinding"),
	wideColumn("Groups", "Groups in the clusterRoleBinding"),
	wideColumn("ServiceAccounts", "ServiceAccounts in the clusterRoleBinding"),
}

func roleBindingCells(b *rbacv1.RoleBinding, now time.Time) []interface{} {
	return bindingCells(b.Name, b.RoleRef, b.Subjects, age(b.CreationTimestamp, now))
}

func clusterRoleBindingCells(b *rbacv1.ClusterRoleBinding, now time.Time) []interface{} {
	return bindingCells(b.Name, b.RoleRef, b.Subjects, age(b.CreationTimestamp, now))
}

func bindingCells(name string, ref rbacv1.RoleRef, subjects []rbacv1.Subject, age string) []interface{} {
	users, groups, sas := []string{}, []string{}, []string{}
	for _, s := range subjects {
		switch s.Kind {
		case rbacv1.ServiceAccountKind:
			sas = append(sas, s.Namespace+"/"+s.Name)
		case rbacv1.UserKind:
			users = append(users, s.Name)
		case rbacv1.GroupKind:
			groups = append(groups, s.Name)
		}
	}
	return []interface{}{name, fmt.Sprintf("%s/%s", ref.Kind, ref.Name), age,
		strings.Join(users, ", "), strings.Join(groups, ", "), strings.Join(sas, ", ")}
}

func rbacKind(kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: rbacv1.GroupName, Version: "v1", Kind: kind}
}
