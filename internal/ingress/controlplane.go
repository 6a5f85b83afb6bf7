package ingress

//lint:file-ignore SA1019 core/v1 Endpoints is deprecated upstream but still served and read by kube-proxy-style consumers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/minikit/minikit/internal/ctrlloop"
	"github.com/minikit/minikit/internal/informer"
	"github.com/minikit/minikit/internal/ingress/config"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
)

// Names of what the control plane creates, as ingress-nginx's manifests do.
const (
	Namespace   = "ingress-nginx"
	ServiceName = "ingress-nginx-controller"
	ClassName   = "nginx"
	// ManagedBy marks the EndpointSlices this package writes for the Service
	// (the endpoints controller leaves selectorless Services to their owner).
	ManagedBy = "ingress.minikit.io"
)

// ControlPlaneConfig configures the control-plane side.
type ControlPlaneConfig struct {
	Client kubernetes.Interface
	Class  config.Class
	Logger *slog.Logger
}

// ControlPlane keeps the controller's Service endpoints and the Ingresses' status.
type ControlPlane struct {
	cfg ControlPlaneConfig
	log *slog.Logger

	all, ns   informers.SharedInformerFactory
	nodes     corelisters.NodeLister
	ings      networkinglisters.IngressLister
	classes   networkinglisters.IngressClassLister
	svcs      corelisters.ServiceLister
	endpoints corelisters.EndpointsLister
	slices    discoverylisters.EndpointSliceLister
	loop      *ctrlloop.Kicked
}

// NewControlPlane prepares the control-plane side; Run starts it.
func NewControlPlane(cfg ControlPlaneConfig) (*ControlPlane, error) {
	if cfg.Client == nil {
		return nil, errors.New("ingress: a client is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Class == (config.Class{}) {
		cfg.Class = config.DefaultClass
	}
	s := &ControlPlane{cfg: cfg, log: cfg.Logger.With("component", "ingress-server"), loop: ctrlloop.NewKicked()}
	s.all = informers.NewSharedInformerFactory(cfg.Client, 0)
	s.ns = informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithNamespace(Namespace))
	s.nodes = s.all.Core().V1().Nodes().Lister()
	s.ings = s.all.Networking().V1().Ingresses().Lister()
	s.classes = s.all.Networking().V1().IngressClasses().Lister()
	s.svcs = s.ns.Core().V1().Services().Lister()
	s.endpoints = s.ns.Core().V1().Endpoints().Lister()
	s.slices = s.ns.Discovery().V1().EndpointSlices().Lister()
	if err := informer.AddHandler(informer.OnChange(s.loop.Kick),
		s.all.Core().V1().Nodes().Informer(),
		s.all.Networking().V1().Ingresses().Informer(),
		s.all.Networking().V1().IngressClasses().Informer(),
		s.ns.Core().V1().Services().Informer(),
		s.ns.Core().V1().Endpoints().Informer(),
		s.ns.Discovery().V1().EndpointSlices().Informer(),
	); err != nil {
		return nil, err
	}
	return s, nil
}

// Run creates the controller's objects, then keeps endpoints and status in
// step with the nodes and Ingresses until ctx ends.
func (s *ControlPlane) Run(ctx context.Context) error {
	for {
		err := s.ensureObjects(ctx)
		if err == nil {
			break
		}
		s.log.Warn("creating the ingress-nginx objects, retrying", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	s.all.Start(ctx.Done())
	s.ns.Start(ctx.Done())
	defer s.all.Shutdown()
	defer s.ns.Shutdown()
	if err := informer.WaitForSync(ctx, s.all, s.ns); err != nil {
		return fmt.Errorf("ingress: %w", err)
	}
	s.loop.Run(ctx, debounce, s.sync, func(err error, retry time.Duration) {
		s.log.Warn("ingress sync failed, retrying", "in", retry, "err", err)
	})
	return nil
}

// ensureObjects creates the namespace, the default IngressClass and the Service
// when they are missing; existing ones are left as they are (a user may have
// changed them on purpose).
func (s *ControlPlane) ensureObjects(ctx context.Context) error {
	c := s.cfg.Client
	lbl := map[string]string{"app.kubernetes.io/name": "ingress-nginx", "app.kubernetes.io/part-of": "ingress-nginx"}
	_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace, Labels: lbl}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", Namespace, err)
	}
	if _, err := c.NetworkingV1().IngressClasses().Get(ctx, ClassName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		classes, err := c.NetworkingV1().IngressClasses().List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("listing ingress classes: %w", err)
		}
		ann := map[string]string{}
		// Two default classes would make class-less Ingresses ambiguous: only
		// claim the default when nobody has.
		if !slices.ContainsFunc(classes.Items, func(ic networkingv1.IngressClass) bool {
			return ic.Annotations[networkingv1.AnnotationIsDefaultIngressClass] == "true"
		}) {
			ann[networkingv1.AnnotationIsDefaultIngressClass] = "true"
		}
		ic := &networkingv1.IngressClass{
			ObjectMeta: metav1.ObjectMeta{Name: ClassName, Labels: withComponent(lbl), Annotations: ann},
			Spec:       networkingv1.IngressClassSpec{Controller: s.cfg.Class.Controller},
		}
		if _, err := c.NetworkingV1().IngressClasses().Create(ctx, ic, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating ingress class %s: %w", ClassName, err)
		}
	} else if err != nil {
		return fmt.Errorf("reading ingress class %s: %w", ClassName, err)
	}
	return s.ensureService(ctx)
}

func withComponent(l map[string]string) map[string]string {
	m := map[string]string{"app.kubernetes.io/component": "controller"}
	for k, v := range l {
		m[k] = v
	}
	return m
}

// ensureService creates ingress-nginx-controller: a NodePort Service for ports
// http 80 and https 443, without a selector: its endpoints are the nodes'
// controllers, which this Server writes.
func (s *ControlPlane) ensureService(ctx context.Context) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: ServiceName,
			Labels: withComponent(map[string]string{"app.kubernetes.io/name": "ingress-nginx", "app.kubernetes.io/part-of": "ingress-nginx"})},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeNodePort,
			Ports: []corev1.ServicePort{
				{Name: "http", Port: servicePortHTTP, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP, AppProtocol: ptr("http")},
				{Name: "https", Port: servicePortHTTPS, TargetPort: intstr.FromString("https"), Protocol: corev1.ProtocolTCP, AppProtocol: ptr("https")},
			},
		},
	}
	_, err := s.cfg.Client.CoreV1().Services(Namespace).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating service %s/%s: %w", Namespace, ServiceName, err)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// listener is one node's controller as the API shows it.
type listener struct {
	node      string
	ip        string
	http, tls int32
	ready     bool
}

func nodeIP(n *corev1.Node) string {
	for _, t := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, a := range n.Status.Addresses {
			if a.Type == t && a.Address != "" {
				return a.Address
			}
		}
	}
	return ""
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (s *ControlPlane) listeners() ([]listener, error) {
	nodes, err := s.nodes.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var ls []listener
	for _, n := range nodes {
		h, t, ok := Listeners(n)
		ip := nodeIP(n)
		if !ok || ip == "" {
			continue
		}
		ls = append(ls, listener{node: n.Name, ip: ip, http: h, tls: t, ready: nodeReady(n) && n.DeletionTimestamp == nil})
	}
	slices.SortFunc(ls, func(a, b listener) int { return strings.Compare(a.node, b.node) })
	return ls, nil
}

func (s *ControlPlane) sync(ctx context.Context) error {
	svc, err := s.svcs.Services(Namespace).Get(ServiceName)
	if apierrors.IsNotFound(err) {
		return s.ensureService(ctx)
	}
	if err != nil {
		return err
	}
	ls, err := s.listeners()
	if err != nil {
		return err
	}
	return errors.Join(s.syncEndpoints(ctx, svc, ls), s.syncSlices(ctx, svc, ls), s.syncStatus(ctx, svc, ls))
}

// syncEndpoints writes the Service's Endpoints: ready nodes' listeners as
// addresses, the others as notReadyAddresses, grouped by port pair.
func (s *ControlPlane) syncEndpoints(ctx context.Context, svc *corev1.Service, ls []listener) error {
	type ports struct{ http, tls int32 }
	groups := map[ports]*corev1.EndpointSubset{}
	var order []ports
	for _, l := range ls {
		k := ports{l.http, l.tls}
		sub := groups[k]
		if sub == nil {
			sub = &corev1.EndpointSubset{Ports: []corev1.EndpointPort{
				{Name: "http", Port: l.http, Protocol: corev1.ProtocolTCP, AppProtocol: ptr("http")},
				{Name: "https", Port: l.tls, Protocol: corev1.ProtocolTCP, AppProtocol: ptr("https")},
			}}
			groups[k] = sub
			order = append(order, k)
		}
		addr := corev1.EndpointAddress{IP: l.ip, NodeName: ptr(l.node)}
		if l.ready {
			sub.Addresses = append(sub.Addresses, addr)
		} else {
			sub.NotReadyAddresses = append(sub.NotReadyAddresses, addr)
		}
	}
	var subsets []corev1.EndpointSubset
	for _, k := range order {
		subsets = append(subsets, *groups[k])
	}
	want := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: ServiceName, Labels: svc.Labels},
		Subsets:    subsets,
	}
	cur, err := s.endpoints.Endpoints(Namespace).Get(ServiceName)
	switch {
	case apierrors.IsNotFound(err):
		_, err = s.cfg.Client.CoreV1().Endpoints(Namespace).Create(ctx, want, metav1.CreateOptions{})
		return wrap(err, "creating endpoints %s/%s", Namespace, ServiceName)
	case err != nil:
		return err
	case apiequality.Semantic.DeepEqual(cur.Subsets, want.Subsets) && apiequality.Semantic.DeepEqual(cur.Labels, want.Labels):
		return nil
	}
	upd := cur.DeepCopy()
	upd.Subsets, upd.Labels = want.Subsets, want.Labels
	_, err = s.cfg.Client.CoreV1().Endpoints(Namespace).Update(ctx, upd, metav1.UpdateOptions{})
	return wrap(err, "updating endpoints %s/%s", Namespace, ServiceName)
}

func wrap(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}

// sliceName is the EndpointSlice of one node's controller.
func sliceName(node string) string {
	n := ServiceName + "-" + node
	if len(n) > 63 {
		n = n[:63]
	}
	return strings.TrimRight(n, "-.")
}

// syncSlices writes one EndpointSlice per node controller, which is what
// kube-proxy-style proxies read.
func (s *ControlPlane) syncSlices(ctx context.Context, svc *corev1.Service, ls []listener) error {
	owned, err := s.slices.EndpointSlices(Namespace).List(labels.SelectorFromSet(labels.Set{
		discoveryv1.LabelServiceName: ServiceName, discoveryv1.LabelManagedBy: ManagedBy}))
	if err != nil {
		return err
	}
	cur := map[string]*discoveryv1.EndpointSlice{}
	for _, sl := range owned {
		cur[sl.Name] = sl
	}
	var errs []error
	for _, l := range ls {
		name := sliceName(l.node)
		want := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name,
				Labels: map[string]string{discoveryv1.LabelServiceName: ServiceName, discoveryv1.LabelManagedBy: ManagedBy},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID,
					Controller: ptr(true), BlockOwnerDeletion: ptr(true)}}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{
				Addresses:  []string{l.ip},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr(l.ready), Serving: ptr(l.ready), Terminating: ptr(false)},
				NodeName:   ptr(l.node),
				TargetRef:  &corev1.ObjectReference{Kind: "Node", Name: l.node},
			}},
			Ports: []discoveryv1.EndpointPort{
				{Name: ptr("http"), Port: ptr(l.http), Protocol: ptr(corev1.ProtocolTCP), AppProtocol: ptr("http")},
				{Name: ptr("https"), Port: ptr(l.tls), Protocol: ptr(corev1.ProtocolTCP), AppProtocol: ptr("https")},
			},
		}
		if strings.Contains(l.ip, ":") {
			want.AddressType = discoveryv1.AddressTypeIPv6
		}
		old, ok := cur[name]
		delete(cur, name)
		switch {
		case !ok:
			_, err := s.cfg.Client.DiscoveryV1().EndpointSlices(Namespace).Create(ctx, want, metav1.CreateOptions{})
			if !apierrors.IsAlreadyExists(err) {
				errs = append(errs, wrap(err, "creating endpointslice %s/%s", Namespace, name))
			}
		case !apiequality.Semantic.DeepEqual(old.Endpoints, want.Endpoints) || !apiequality.Semantic.DeepEqual(old.Ports, want.Ports) ||
			old.AddressType != want.AddressType:
			upd := old.DeepCopy()
			upd.Endpoints, upd.Ports, upd.AddressType = want.Endpoints, want.Ports, want.AddressType
			_, err := s.cfg.Client.DiscoveryV1().EndpointSlices(Namespace).Update(ctx, upd, metav1.UpdateOptions{})
			errs = append(errs, wrap(err, "updating endpointslice %s/%s", Namespace, name))
		}
	}
	for name := range cur {
		err := s.cfg.Client.DiscoveryV1().EndpointSlices(Namespace).Delete(ctx, name, metav1.DeleteOptions{})
		if !apierrors.IsNotFound(err) {
			errs = append(errs, wrap(err, "deleting endpointslice %s/%s", Namespace, name))
		}
	}
	return errors.Join(errs...)
}

// statusAddresses is what Ingresses of the class are reachable at: the
// Service's load-balancer addresses if it has any (--publish-service), else
// the ready nodes' addresses (--report-node-internal-ip-address).
func statusAddresses(svc *corev1.Service, ls []listener) []networkingv1.IngressLoadBalancerIngress {
	var out []networkingv1.IngressLoadBalancerIngress
	for _, lb := range svc.Status.LoadBalancer.Ingress {
		out = append(out, networkingv1.IngressLoadBalancerIngress{IP: lb.IP, Hostname: lb.Hostname})
	}
	if len(out) > 0 {
		return out
	}
	var ips []string
	for _, l := range ls {
		if l.ready {
			ips = append(ips, l.ip)
		}
	}
	slices.Sort(ips)
	for _, ip := range slices.Compact(ips) {
		out = append(out, networkingv1.IngressLoadBalancerIngress{IP: ip})
	}
	return out
}

// syncStatus writes status.loadBalancer.ingress on the Ingresses of the class,
// and clears it on Ingresses that left the class if it still shows ours.
func (s *ControlPlane) syncStatus(ctx context.Context, svc *corev1.Service, ls []listener) error {
	want := statusAddresses(svc, ls)
	ings, err := s.ings.List(labels.Everything())
	if err != nil {
		return err
	}
	classes, err := s.classes.List(labels.Everything())
	if err != nil {
		return err
	}
	var errs []error
	for _, ing := range ings {
		cur := ing.Status.LoadBalancer.Ingress
		target := want
		if !s.cfg.Class.Serves(ing, classes) {
			if len(cur) == 0 || !apiequality.Semantic.DeepEqual(cur, want) {
				continue
			}
			target = nil
		}
		if apiequality.Semantic.DeepEqual(cur, target) || (len(cur) == 0 && len(target) == 0) {
			continue
		}
		upd := ing.DeepCopy()
		upd.Status.LoadBalancer.Ingress = target
		_, err := s.cfg.Client.NetworkingV1().Ingresses(ing.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
		if !apierrors.IsNotFound(err) {
			errs = append(errs, wrap(err, "updating the status of ingress %s/%s", ing.Namespace, ing.Name))
		}
	}
	return errors.Join(errs...)
}
