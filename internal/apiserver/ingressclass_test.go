package apiserver

import (
	"context"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDefaultIngressClass is kube-apiserver's DefaultIngressClass admission:
// an Ingress naming no class gets the default one, the newest of several,
// and one naming a class (or using the annotation) keeps what it says.
func TestDefaultIngressClass(t *testing.T) {
	a := newTestAPI(t)
	cs, _ := a.clients(t)
	ctx := context.Background()
	ingress := func(name string, mutate ...func(*networkingv1.Ingress)) *string {
		t.Helper()
		ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.IngressSpec{
			DefaultBackend: &networkingv1.IngressBackend{Service: &networkingv1.IngressServiceBackend{
				Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}}}}
		for _, m := range mutate {
			m(ing)
		}
		got, err := cs.NetworkingV1().Ingresses("default").Create(ctx, ing, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got.Spec.IngressClassName
	}
	class := func(name string, isDefault bool) {
		t.Helper()
		ic := &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.IngressClassSpec{Controller: "example.com/" + name}}
		if isDefault {
			ic.Annotations = map[string]string{networkingv1.AnnotationIsDefaultIngressClass: "true"}
		}
		if _, err := cs.NetworkingV1().IngressClasses().Create(ctx, ic, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	name := func(p *string) string {
		if p == nil {
			return "<nil>"
		}
		return *p
	}

	class("plain", false)
	if got := ingress("a"); got != nil {
		t.Errorf("no default class: ingressClassName %s, want none", *got)
	}
	class("first", true)
	if got := name(ingress("b")); got != "first" {
		t.Errorf("one default class: ingressClassName %s, want first", got)
	}
	// Creation times have a one-second resolution: the newer default wins.
	a.srv.now = func() time.Time { return time.Now().Add(2 * time.Second) }
	class("newer", true)
	if got := name(ingress("c")); got != "newer" {
		t.Errorf("two default classes: ingressClassName %s, want newer", got)
	}
	if got := name(ingress("d", func(i *networkingv1.Ingress) { i.Spec.IngressClassName = ptrTo("plain") })); got != "plain" {
		t.Errorf("a named class: ingressClassName %s, want plain", got)
	}
	if got := ingress("e", func(i *networkingv1.Ingress) {
		i.Annotations = map[string]string{"kubernetes.io/ingress.class": "plain"}
	}); got != nil {
		t.Errorf("the class annotation: ingressClassName %s, want none", *got)
	}
}
