package apiserver

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// ensureAPIEndpointSlice publishes the default/kubernetes EndpointSlice beside
// its Endpoints, as kube-apiserver's endpoint reconciler does: kube-proxy
// programs Services from slices, and pods reach the API at 10.96.0.1:443
// through it (rest.InClusterConfig). Minimal: one address, the https port.
func (s *Server) ensureAPIEndpointSlice() error {
	res := lookup("discovery.k8s.io", "v1", "endpointslices")
	ready := true
	want := func(sl *discoveryv1.EndpointSlice) {
		sl.AddressType = discoveryv1.AddressTypeIPv4
		sl.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{s.cfg.AdvertiseAddress},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}
		name, proto, port := "https", corev1.ProtocolTCP, s.cfg.Port
		sl.Ports = []discoveryv1.EndpointPort{{Name: &name, Protocol: &proto, Port: &port}}
	}
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default",
		Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}}}
	want(sl)
	_, err := s.Create(res, "default", sl)
	if apierrors.IsAlreadyExists(err) {
		_, err = s.Update(res, "default", "kubernetes", "", func(cur runtime.Object) (runtime.Object, error) {
			c := cur.(*discoveryv1.EndpointSlice)
			want(c)
			c.ResourceVersion = ""
			return c, nil
		})
	}
	if err != nil {
		return fmt.Errorf("writing endpointslice default/kubernetes: %w", err)
	}
	return nil
}
