package upstreamproxy

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Endpoint is one endpoint of a hand-made EndpointSlice.
type Endpoint struct {
	IP, Node                      string
	NotReady, Terminating, NotSrv bool
}

// Shape is a Service and the endpoints of its one slice. Services have no
// selector: the test owns their EndpointSlices, so both proxies see exactly
// these endpoints whether or not pods exist.
type Shape struct {
	Svc       *corev1.Service
	Ports     []discovery.EndpointPort
	Endpoints []Endpoint
	// LBIngress is written to the status (the Service's loadBalancerClass
	// keeps minikit's own LoadBalancer controller away from it).
	LBIngress []string
}

// LBClass is the loadBalancerClass of the test's LoadBalancer Services.
const LBClass = "example.com/upstream-parity"

// Create creates the Service, its status and its EndpointSlice.
func (s Shape) Create(ctx context.Context, c kubernetes.Interface) error {
	svc, err := c.CoreV1().Services(s.Svc.Namespace).Create(ctx, s.Svc, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating service %s/%s: %w", s.Svc.Namespace, s.Svc.Name, err)
	}
	if len(s.LBIngress) > 0 {
		for _, ip := range s.LBIngress {
			svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
		}
		if _, err := c.CoreV1().Services(svc.Namespace).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("setting the load balancer status of %s/%s: %w", svc.Namespace, svc.Name, err)
		}
	}
	if len(s.Ports) == 0 {
		return nil
	}
	_, err = c.DiscoveryV1().EndpointSlices(svc.Namespace).Create(ctx, s.Slice(svc.Name+"-1"), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating the endpointslice of %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}

// Slice is the shape's EndpointSlice under the given name.
func (s Shape) Slice(name string) *discovery.EndpointSlice {
	sl := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Svc.Namespace, Labels: map[string]string{
			discovery.LabelServiceName: s.Svc.Name, discovery.LabelManagedBy: "upstream-parity.minikit.dev"}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       s.Ports,
	}
	for _, e := range s.Endpoints {
		ready, serving, term := !e.NotReady, !e.NotSrv, e.Terminating
		ep := discovery.Endpoint{Addresses: []string{e.IP},
			Conditions: discovery.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &term}}
		if e.Node != "" {
			n := e.Node
			ep.NodeName = &n
		}
		sl.Endpoints = append(sl.Endpoints, ep)
	}
	return sl
}
