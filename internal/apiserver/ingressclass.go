package apiserver

import (
	"sort"

	networkingv1 "k8s.io/api/networking/v1"
)

var ingressClassResource = lookup(networkingv1.GroupName, "v1", "ingressclasses")

// annotationIngressClass is the class annotation older Ingresses use instead
// of spec.ingressClassName.
const annotationIngressClass = "kubernetes.io/ingress.class"

// admitIngress is kube-apiserver's DefaultIngressClass admission: a new
// Ingress that names no class (neither spec.ingressClassName nor the
// kubernetes.io/ingress.class annotation) gets the default IngressClass, the
// one annotated ingressclass.kubernetes.io/is-default-class=true; with
// several, the newest, and of equally new ones the first by name.
func (s *Server) admitIngress(ing *networkingv1.Ingress) {
	if ing.Spec.IngressClassName != nil {
		return
	}
	if _, ok := ing.Annotations[annotationIngressClass]; ok {
		return
	}
	kvs, _, err := s.store.List(ingressClassResource.prefix(""))
	if err != nil {
		return // as with no default class: the Ingress stays without one
	}
	var defaults []networkingv1.IngressClass
	for _, kv := range kvs {
		var ic networkingv1.IngressClass
		if decodeStored(kv.Value, &ic) == nil && ic.Annotations[networkingv1.AnnotationIsDefaultIngressClass] == "true" {
			defaults = append(defaults, ic)
		}
	}
	if len(defaults) == 0 {
		return
	}
	sort.Slice(defaults, func(i, j int) bool {
		ti, tj := defaults[i].CreationTimestamp.UnixNano(), defaults[j].CreationTimestamp.UnixNano()
		if ti == tj {
			return defaults[i].Name < defaults[j].Name
		}
		return ti > tj
	})
	name := defaults[0].Name
	ing.Spec.IngressClassName = &name
}
