package config

import (
	networkingv1 "k8s.io/api/networking/v1"
)

// Class says which Ingresses a controller serves, as ingress-nginx's
// --controller-class, --ingress-class and --watch-ingress-without-class flags do.
type Class struct {
	// Controller is the spec.controller of the IngressClasses served
	// (ingress-nginx's k8s.io/ingress-nginx).
	Controller string
	// Name is the value of the legacy kubernetes.io/ingress.class annotation
	// served ("nginx").
	Name string
	// WithoutClass serves Ingresses that name no class even when no class of this
	// controller is the cluster's default.
	WithoutClass bool
}

// DefaultClass is ingress-nginx's: IngressClass controller k8s.io/ingress-nginx,
// annotation value "nginx".
var DefaultClass = Class{Controller: "k8s.io/ingress-nginx", Name: "nginx"}

// Serves reports whether an Ingress belongs to this controller, given the
// cluster's IngressClasses:
//   - spec.ingressClassName names an IngressClass whose controller is ours;
//   - else the legacy annotation equals our class name;
//   - else (no class at all) one of our IngressClasses is marked default, which is
//     what the API server's DefaultIngressClass admission would have filled in, or
//     WithoutClass is set.
func (c Class) Serves(ing *networkingv1.Ingress, classes []*networkingv1.IngressClass) bool {
	if n := ing.Spec.IngressClassName; n != nil {
		for _, ic := range classes {
			if ic.Name == *n {
				return ic.Spec.Controller == c.Controller
			}
		}
		return false
	}
	if a, ok := ing.Annotations[AnnotationIngressClass]; ok {
		return a == c.Name
	}
	if c.WithoutClass {
		return true
	}
	for _, ic := range classes {
		if ic.Spec.Controller == c.Controller && ic.Annotations[networkingv1.AnnotationIsDefaultIngressClass] == "true" {
			return true
		}
	}
	return false
}
