package apiserver

import (
	"context"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// What upstream's "[sig-auth] SubjectReview should support SubjectReview API
// operations" does, through client-go with protobuf bodies: a
// SubjectAccessReview and a LocalSubjectAccessReview for a ServiceAccount
// agree with what a client impersonating it (user, UID and groups) is
// allowed, before and after it is bound.
func TestRBACSubjectReviewsAgreeWithImpersonation(t *testing.T) {
	a := newTestAPI(t)
	ctx := context.Background()
	cfg := &rest.Config{Host: a.url, ContentConfig: rest.ContentConfig{ContentType: "application/vnd.kubernetes.protobuf"}}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "e2e"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	name := serviceaccount.MakeUsername(sa.Namespace, sa.Name)
	groups := append([]string{"system:authenticated"}, serviceaccount.MakeGroupNames(sa.Namespace)...)
	imp := rest.CopyConfig(cfg)
	imp.Impersonate = rest.ImpersonationConfig{UserName: name, UID: string(sa.UID), Groups: groups}
	as, err := kubernetes.NewForConfig(imp)
	if err != nil {
		t.Fatal(err)
	}
	spec := authorizationv1.SubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Resource: "configmaps", Namespace: "default", Version: "v1"},
		User:               name, Groups: groups, UID: string(sa.UID),
	}
	check := func(want bool) {
		t.Helper()
		sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// As the e2e spec: the local review names the account by its short
		// name; its groups decide.
		lspec := spec
		lspec.User = sa.Name
		lsar, err := cs.AuthorizationV1().LocalSubjectAccessReviews("default").Create(ctx,
			&authorizationv1.LocalSubjectAccessReview{ObjectMeta: metav1.ObjectMeta{Namespace: "default"}, Spec: lspec}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, listErr := as.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
		if listErr != nil && !apierrors.IsForbidden(listErr) {
			t.Fatalf("impersonated list: %v", listErr)
		}
		if allowed := listErr == nil; allowed != want || sar.Status.Allowed != want || lsar.Status.Allowed != want {
			t.Errorf("list allowed %v, SubjectAccessReview %+v, LocalSubjectAccessReview %+v; want %v", allowed, sar.Status, lsar.Status, want)
		}
	}
	check(false)
	// Bound through its namespace's group, which the local review carries too.
	a.post(roleBindingsPath, `{"metadata":{"name":"view"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"view"},
		"subjects":[{"kind":"Group","name":"system:serviceaccounts:default","apiGroup":"rbac.authorization.k8s.io"}]}`).mustCode(t, 201, nil)
	check(true)
}
