package gateway

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/minikit/minikit/internal/ctrlloop"
	"github.com/minikit/minikit/internal/informer"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gwinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"
)

// Names and labels of what the control plane writes.
const (
	// ServiceSuffix ends the name of a Gateway's Service ("<gateway>-minikit",
	// see ServiceName).
	ServiceSuffix = "-minikit"
	// GatewayNameLabel marks a Gateway's Service with the Gateway's name (the
	// label Gateway API implementations put on generated objects).
	GatewayNameLabel = "gateway.networking.k8s.io/gateway-name"
	// ManagedBy marks the EndpointSlices this package writes.
	ManagedBy = "gateway.minikit.io"
	// DataPlaneAnnotation is set on its Node by a node's data plane when it
	// serves the data ports; only such Ready nodes become endpoints.
	DataPlaneAnnotation = "gateway.minikit.io/dataplane"
	// lbRequestAnnotation is the LoadBalancer stub's request annotation.
	lbRequestAnnotation = "metallb.io/loadBalancerIPs"
)

// DataPortMin and DataPortMax bound the node ports the data plane listens on,
// one per Gateway port, below the NodePort range.
const (
	DataPortMin = 20000
	DataPortMax = 29999
)

const (
	debounce = 20 * time.Millisecond
)

// ControlPlaneConfig configures the control plane.
type ControlPlaneConfig struct {
	Client  kubernetes.Interface
	Gateway gwclient.Interface
	Logger  *slog.Logger
}

// ControlPlane keeps the GatewayClass, the Gateways' Services and
// EndpointSlices, and the status of Gateways and HTTPRoutes.
type ControlPlane struct {
	cfg  ControlPlaneConfig
	log  *slog.Logger
	kube informers.SharedInformerFactory
	gw   gwinformers.SharedInformerFactory

	listers
	nodes corelisters.NodeLister
	loop  *ctrlloop.Kicked
}

// NewControlPlane prepares the control plane; Run starts it.
func NewControlPlane(cfg ControlPlaneConfig) (*ControlPlane, error) {
	if cfg.Client == nil || cfg.Gateway == nil {
		return nil, errors.New("gateway: clients are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &ControlPlane{cfg: cfg, log: cfg.Logger.With("component", "gateway-server"), loop: ctrlloop.NewKicked()}
	s.kube = informers.NewSharedInformerFactory(cfg.Client, 0)
	s.gw = gwinformers.NewSharedInformerFactory(cfg.Gateway, 0)
	s.listers = newListers(s.kube, s.gw)
	s.nodes = s.kube.Core().V1().Nodes().Lister()
	if err := s.listers.watch(s.loop.Kick, s.kube.Core().V1().Nodes().Informer()); err != nil {
		return nil, err
	}
	return s, nil
}

// Run creates the GatewayClass, then syncs on every change until ctx ends.
func (s *ControlPlane) Run(ctx context.Context) error {
	for {
		err := s.ensureClass(ctx)
		if err == nil {
			break
		}
		s.log.Warn("creating the GatewayClass, retrying", "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	s.kube.Start(ctx.Done())
	s.gw.Start(ctx.Done())
	defer s.kube.Shutdown()
	defer s.gw.Shutdown()
	if err := informer.WaitForSync(ctx, s.kube); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	for typ, ok := range s.gw.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("gateway: cache of %v did not sync", typ)
		}
	}
	s.loop.Run(ctx, debounce, func(ctx context.Context) error {
		start := time.Now()
		err := s.sync(ctx)
		if err == nil {
			s.log.Debug("gateway sync", "took", time.Since(start))
		}
		return err
	}, func(err error, retry time.Duration) {
		s.log.Warn("gateway sync failed, retrying", "in", retry, "err", err)
	})
	return nil
}

// ensureClass creates the GatewayClass "minikit" when it is missing; an
// existing one is left as it is.
func (s *ControlPlane) ensureClass(ctx context.Context) error {
	gc := &gatewayv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: ClassName},
		Spec: gatewayv1.GatewayClassSpec{ControllerName: ControllerName, Description: ptr("minikit: LoadBalancer pool addresses, each node's HTTP proxy")}}
	_, err := s.cfg.Gateway.GatewayV1().GatewayClasses().Create(ctx, gc, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating GatewayClass %s: %w", ClassName, err)
	}
	return nil
}

// sync computes and writes everything from the listers.
func (s *ControlPlane) sync(ctx context.Context) error {
	var errs []error
	classes, err := s.classes.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, gc := range classes {
		if gc.Spec.ControllerName != ControllerName {
			continue
		}
		if err := s.syncClass(ctx, gc); err != nil {
			errs = append(errs, err)
		}
	}
	w, svcs, err := s.listers.world()
	if err != nil {
		return err
	}
	res := Compute(w)
	used := usedDataPorts(svcs)
	eps := s.dataPlaneNodes()
	for _, g := range w.Gateways {
		svc, err := s.syncService(ctx, g, used)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := s.syncSlice(ctx, svc, eps); err != nil {
			errs = append(errs, err)
		}
		if err := s.syncGatewayStatus(ctx, g, svc, len(eps) > 0, res); err != nil {
			errs = append(errs, err)
		}
	}
	gw := s.cfg.Gateway.GatewayV1()
	errs = append(errs, syncRouteStatus(ctx, "HTTPRoute", w.HTTPRoutes, res.Parents, (*gatewayv1.HTTPRoute).DeepCopy,
		func(r *gatewayv1.HTTPRoute) *gatewayv1.RouteStatus { return &r.Status.RouteStatus },
		func(ctx context.Context, r *gatewayv1.HTTPRoute) (*gatewayv1.HTTPRoute, error) {
			return gw.HTTPRoutes(r.Namespace).UpdateStatus(ctx, r, metav1.UpdateOptions{})
		})...)
	errs = append(errs, syncRouteStatus(ctx, "GRPCRoute", w.GRPCRoutes, res.GRPCParents, (*gatewayv1.GRPCRoute).DeepCopy,
		func(r *gatewayv1.GRPCRoute) *gatewayv1.RouteStatus { return &r.Status.RouteStatus },
		func(ctx context.Context, r *gatewayv1.GRPCRoute) (*gatewayv1.GRPCRoute, error) {
			return gw.GRPCRoutes(r.Namespace).UpdateStatus(ctx, r, metav1.UpdateOptions{})
		})...)
	errs = append(errs, syncRouteStatus(ctx, "TLSRoute", w.TLSRoutes, res.TLSParents, (*gatewayv1.TLSRoute).DeepCopy,
		func(r *gatewayv1.TLSRoute) *gatewayv1.RouteStatus { return &r.Status.RouteStatus },
		func(ctx context.Context, r *gatewayv1.TLSRoute) (*gatewayv1.TLSRoute, error) {
			return gw.TLSRoutes(r.Namespace).UpdateStatus(ctx, r, metav1.UpdateOptions{})
		})...)
	errs = append(errs, syncRouteStatus(ctx, "TCPRoute", w.TCPRoutes, res.TCPParents, (*gatewayv1.TCPRoute).DeepCopy,
		func(r *gatewayv1.TCPRoute) *gatewayv1.RouteStatus { return &r.Status.RouteStatus },
		func(ctx context.Context, r *gatewayv1.TCPRoute) (*gatewayv1.TCPRoute, error) {
			return gw.TCPRoutes(r.Namespace).UpdateStatus(ctx, r, metav1.UpdateOptions{})
		})...)
	errs = append(errs, syncRouteStatus(ctx, "UDPRoute", w.UDPRoutes, res.UDPParents, (*gatewayv1.UDPRoute).DeepCopy,
		func(r *gatewayv1.UDPRoute) *gatewayv1.RouteStatus { return &r.Status.RouteStatus },
		func(ctx context.Context, r *gatewayv1.UDPRoute) (*gatewayv1.UDPRoute, error) {
			return gw.UDPRoutes(r.Namespace).UpdateStatus(ctx, r, metav1.UpdateOptions{})
		})...)
	return errors.Join(errs...)
}

func compareKey(a, b metav1.ObjectMeta) int {
	if a.Namespace != b.Namespace {
		if a.Namespace < b.Namespace {
			return -1
		}
		return 1
	}
	switch {
	case a.Name < b.Name:
		return -1
	case a.Name > b.Name:
		return 1
	}
	return 0
}

// SupportedFeatures is what every GatewayClass of ControllerName says in
// status.supportedFeatures, sorted by name as the API asks: exactly the
// features whose tests of the upstream conformance suite (v1.6.3) pass
// against minikit, so that the suite, run without --supported-features,
// reads them from the class and runs those tests. A feature goes in with the
// run that passes its tests (scripts/gateway-conformance.sh), never before.
var SupportedFeatures = []gatewayv1.FeatureName{
	"GRPCRoute",
	"Gateway",
	"HTTPRoute",
	"HTTPRoute303RedirectStatusCode",
	"HTTPRoute307RedirectStatusCode",
	"HTTPRoute308RedirectStatusCode",
	"HTTPRouteBackendRequestHeaderModification",
	"HTTPRouteBackendTimeout",
	"HTTPRouteCORS",
	"HTTPRouteHostRewrite",
	"HTTPRouteMethodMatching",
	"HTTPRouteNamedRouteRule",
	"HTTPRouteParentRefPort",
	"HTTPRoutePathRedirect",
	"HTTPRoutePathRewrite",
	"HTTPRoutePortRedirect",
	"HTTPRouteQueryParamMatching",
	"HTTPRouteRequestMirror",
	"HTTPRouteRequestMultipleMirrors",
	"HTTPRouteRequestPercentageMirror",
	"HTTPRouteRequestTimeout",
	"HTTPRouteResponseHeaderModification",
	"HTTPRouteSchemeRedirect",
	"ReferenceGrant",
	"TCPRoute",
	"TLSRoute",
	"UDPRoute",
}

func (s *ControlPlane) syncClass(ctx context.Context, gc *gatewayv1.GatewayClass) error {
	next := gc.DeepCopy()
	next.Status.SupportedFeatures = next.Status.SupportedFeatures[:0]
	for _, f := range SupportedFeatures {
		next.Status.SupportedFeatures = append(next.Status.SupportedFeatures, gatewayv1.SupportedFeature{Name: f})
	}
	meta.SetStatusCondition(&next.Status.Conditions, metav1.Condition{Type: string(gatewayv1.GatewayClassConditionStatusAccepted),
		Status: metav1.ConditionTrue, Reason: string(gatewayv1.GatewayClassReasonAccepted), Message: "handled by " + string(ControllerName),
		ObservedGeneration: gc.Generation})
	if apiequality.Semantic.DeepEqual(gc.Status, next.Status) {
		return nil
	}
	if _, err := s.cfg.Gateway.GatewayV1().GatewayClasses().UpdateStatus(ctx, next, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating status of GatewayClass %s: %w", gc.Name, err)
	}
	return nil
}

// ServiceName is the name of a Gateway's Service: "<gateway>-minikit" when
// that is a valid Service name (a DNS-1035 label: at most 63 characters,
// starting with a letter, no dots). A Gateway's name is a DNS-1123 subdomain
// (up to 253 characters, dots, a leading digit), so for the others the name
// is made valid (dots become dashes, "gw-" before a leading digit), cut to
// fit, and followed by a hash of the whole Gateway name so that two Gateways
// cut to the same prefix still get two Services.
func ServiceName(gateway string) string {
	name := gateway + ServiceSuffix
	if len(validation.IsDNS1035Label(name)) == 0 {
		return name
	}
	sum := sha256.Sum256([]byte(gateway))
	tail := "-" + hex.EncodeToString(sum[:4]) + ServiceSuffix
	base := strings.ReplaceAll(gateway, ".", "-")
	if base[0] < 'a' || base[0] > 'z' {
		base = "gw-" + base
	}
	if room := validation.DNS1035LabelMaxLength - len(tail); len(base) > room {
		base = base[:room]
	}
	return base + tail
}

// usedDataPorts is the data ports the Gateways' Services hold: the allocation
// table, read back from the API on every sync.
func usedDataPorts(svcs []*corev1.Service) map[int32]types.NamespacedName {
	used := map[int32]types.NamespacedName{}
	for _, svc := range svcs {
		if svc.Labels[GatewayNameLabel] == "" {
			continue
		}
		for _, p := range svc.Spec.Ports {
			if tp := p.TargetPort.IntVal; tp >= DataPortMin && tp <= DataPortMax {
				used[tp] = types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
			}
		}
	}
	return used
}

// servicePorts is the Gateway's distinct listener ports, each with the data
// port it already holds or a free one: protocol UDP for UDP listeners, TCP
// for the others (a port number may appear once for each, a Service may mix
// protocols), each its own data port.
func servicePorts(g *gatewayv1.Gateway, old *corev1.Service, used map[int32]types.NamespacedName) ([]corev1.ServicePort, error) {
	self := types.NamespacedName{Namespace: g.Namespace, Name: ServiceName(g.Name)}
	type portKey struct {
		port  int32
		proto corev1.Protocol
	}
	held := map[portKey]int32{}
	if old != nil {
		for _, p := range old.Spec.Ports {
			if tp := p.TargetPort.IntVal; tp >= DataPortMin && tp <= DataPortMax && used[tp] == self {
				held[portKey{p.Port, p.Protocol}] = tp
			}
		}
	}
	var out []corev1.ServicePort
	next := int32(DataPortMin)
	for _, l := range g.Spec.Listeners {
		port := int32(l.Port)
		proto := corev1.ProtocolTCP
		if l.Protocol == gatewayv1.UDPProtocolType {
			proto = corev1.ProtocolUDP
		}
		if slices.ContainsFunc(out, func(p corev1.ServicePort) bool { return p.Port == port && p.Protocol == proto }) {
			continue
		}
		tp, ok := held[portKey{port, proto}]
		if !ok {
			for ; next <= DataPortMax; next++ {
				if _, taken := used[next]; !taken {
					break
				}
			}
			if next > DataPortMax {
				return nil, fmt.Errorf("no free data port in %d-%d for Gateway %s/%s", DataPortMin, DataPortMax, g.Namespace, g.Name)
			}
			tp = next
			used[tp] = self
		}
		out = append(out, corev1.ServicePort{Name: portName(proto, port), Protocol: proto, Port: port, TargetPort: intstr.FromInt32(tp)})
	}
	slices.SortFunc(out, func(a, b corev1.ServicePort) int {
		return cmp.Or(cmp.Compare(a.Port, b.Port), strings.Compare(string(a.Protocol), string(b.Protocol)))
	})
	return out, nil
}

func portName(proto corev1.Protocol, port int32) string {
	if proto == corev1.ProtocolUDP {
		return "udp-" + strconv.Itoa(int(port))
	}
	return "tcp-" + strconv.Itoa(int(port))
}

// syncService creates or updates the Gateway's LoadBalancer Service.
func (s *ControlPlane) syncService(ctx context.Context, g *gatewayv1.Gateway, used map[int32]types.NamespacedName) (*corev1.Service, error) {
	name := ServiceName(g.Name)
	old, err := s.svcs.Services(g.Namespace).Get(name)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	if old != nil && old.Labels[GatewayNameLabel] != g.Name {
		return nil, fmt.Errorf("service %s/%s exists and is not Gateway %s's", g.Namespace, name, g.Name)
	}
	ports, err := servicePorts(g, old, used)
	if err != nil {
		return nil, err
	}
	ann := map[string]string{}
	var ips []string
	for _, a := range g.Spec.Addresses {
		if a.Type == nil || *a.Type == gatewayv1.IPAddressType {
			ips = append(ips, a.Value)
		}
	}
	if len(ips) > 0 {
		ann[lbRequestAnnotation] = strings.Join(ips, ",")
	}
	want := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: g.Namespace, Labels: map[string]string{GatewayNameLabel: g.Name},
			Annotations: ann,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: gatewayv1.GroupVersion.String(), Kind: kindGateway, Name: g.Name, UID: g.UID,
				Controller: ptr(true)}}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: ports},
	}
	if old == nil {
		svc, err := s.cfg.Client.CoreV1().Services(g.Namespace).Create(ctx, want, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("creating Service %s/%s for Gateway %s: %w", g.Namespace, name, g.Name, err)
		}
		return svc, nil
	}
	next := old.DeepCopy()
	next.Labels, next.Annotations, next.OwnerReferences = mergeMap(next.Labels, want.Labels), want.Annotations, want.OwnerReferences
	// Keep the NodePorts the API allocated for ports that stay.
	for i := range ports {
		for _, op := range old.Spec.Ports {
			if op.Port == ports[i].Port && op.Protocol == ports[i].Protocol {
				ports[i].NodePort = op.NodePort
			}
		}
	}
	next.Spec.Ports = ports
	if apiequality.Semantic.DeepEqual(old.Spec, next.Spec) && apiequality.Semantic.DeepEqual(old.ObjectMeta, next.ObjectMeta) {
		return old, nil
	}
	svc, err := s.cfg.Client.CoreV1().Services(g.Namespace).Update(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("updating Service %s/%s for Gateway %s: %w", g.Namespace, name, g.Name, err)
	}
	return svc, nil
}

func mergeMap(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// dataPlaneNodes is the InternalIPs of Ready nodes whose data plane serves.
func (s *ControlPlane) dataPlaneNodes() []string {
	nodes, err := s.nodes.List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []string
	for _, n := range nodes {
		if n.Annotations[DataPlaneAnnotation] == "" || !nodeReady(n) {
			continue
		}
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				out = append(out, a.Address)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// syncSlice keeps the Service's one EndpointSlice equal to the data-plane
// nodes on the data ports.
func (s *ControlPlane) syncSlice(ctx context.Context, svc *corev1.Service, nodes []string) error {
	want := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svc.Name, Namespace: svc.Namespace,
			Labels:          map[string]string{discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: ManagedBy},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID, Controller: ptr(true)}}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for _, p := range svc.Spec.Ports {
		want.Ports = append(want.Ports, discoveryv1.EndpointPort{Name: ptr(p.Name), Protocol: ptr(p.Protocol), Port: ptr(p.TargetPort.IntVal)})
	}
	for _, ip := range nodes {
		want.Endpoints = append(want.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)}})
	}
	old, err := s.slices.EndpointSlices(svc.Namespace).Get(svc.Name)
	switch {
	case apierrors.IsNotFound(err):
		if _, err := s.cfg.Client.DiscoveryV1().EndpointSlices(svc.Namespace).Create(ctx, want, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating EndpointSlice %s/%s: %w", svc.Namespace, svc.Name, err)
		}
		return nil
	case err != nil:
		return err
	}
	if apiequality.Semantic.DeepEqual(old.Endpoints, want.Endpoints) && apiequality.Semantic.DeepEqual(old.Ports, want.Ports) &&
		old.Labels[discoveryv1.LabelManagedBy] == ManagedBy {
		return nil
	}
	next := old.DeepCopy()
	next.Labels, next.OwnerReferences, next.Ports, next.Endpoints, next.AddressType = want.Labels, want.OwnerReferences, want.Ports, want.Endpoints, want.AddressType
	if _, err := s.cfg.Client.DiscoveryV1().EndpointSlices(svc.Namespace).Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating EndpointSlice %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return nil
}

// syncGatewayStatus writes addresses, Accepted, Programmed and the listeners.
func (s *ControlPlane) syncGatewayStatus(ctx context.Context, g *gatewayv1.Gateway, svc *corev1.Service, serving bool, res Result) error {
	key := types.NamespacedName{Namespace: g.Namespace, Name: g.Name}
	next := g.DeepCopy()
	next.Status.Addresses = nil
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP != "" {
			next.Status.Addresses = append(next.Status.Addresses, gatewayv1.GatewayStatusAddress{Type: ptr(gatewayv1.IPAddressType), Value: in.IP})
		}
	}
	accepted := res.Accepted[key]
	meta.SetStatusCondition(&next.Status.Conditions, accepted)
	prog := metav1.Condition{Type: string(gatewayv1.GatewayConditionProgrammed), Status: metav1.ConditionTrue,
		Reason: string(gatewayv1.GatewayReasonProgrammed), ObservedGeneration: g.Generation}
	switch {
	case accepted.Status != metav1.ConditionTrue:
		prog.Status, prog.Reason, prog.Message = metav1.ConditionFalse, string(gatewayv1.GatewayReasonInvalid), "the Gateway is not accepted"
	case len(next.Status.Addresses) == 0:
		prog.Status, prog.Reason = metav1.ConditionFalse, string(gatewayv1.GatewayReasonAddressNotAssigned)
		prog.Message = fmt.Sprintf("Service %s/%s has no address from the LoadBalancer pool yet (kubectl describe service says why)", svc.Namespace, svc.Name)
	case !serving:
		prog.Status, prog.Reason, prog.Message = metav1.ConditionFalse, string(gatewayv1.GatewayReasonPending), "no node's data plane is serving yet"
	}
	meta.SetStatusCondition(&next.Status.Conditions, prog)
	var listeners []gatewayv1.ListenerStatus
	for _, l := range res.Listeners[key] {
		var old []metav1.Condition
		for _, ol := range g.Status.Listeners {
			if ol.Name == l.Name {
				old = slices.Clone(ol.Conditions)
			}
		}
		for _, c := range l.Conditions {
			if c.Type == string(gatewayv1.ListenerConditionProgrammed) && c.Status == metav1.ConditionTrue && prog.Status != metav1.ConditionTrue {
				c.Status, c.Reason = metav1.ConditionFalse, string(gatewayv1.ListenerReasonPending)
			}
			meta.SetStatusCondition(&old, c)
		}
		l.Conditions = old
		listeners = append(listeners, l)
	}
	next.Status.Listeners = listeners
	if apiequality.Semantic.DeepEqual(g.Status, next.Status) {
		return nil
	}
	if _, err := s.cfg.Gateway.GatewayV1().Gateways(g.Namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating status of Gateway %s/%s: %w", g.Namespace, g.Name, err)
	}
	return nil
}

// syncRouteStatus writes status.parents of each route of one kind from the
// computed parents (routeParents keeps other controllers' entries), where it
// changed. The five route kinds differ only in their Go types.
func syncRouteStatus[R metav1.Object](ctx context.Context, kind string, routes []R, parents map[types.NamespacedName][]gatewayv1.RouteParentStatus,
	deepCopy func(R) R, status func(R) *gatewayv1.RouteStatus, update func(context.Context, R) (R, error)) []error {
	var errs []error
	for _, rt := range routes {
		next := deepCopy(rt)
		status(next).Parents = routeParents(status(rt).Parents, parents[types.NamespacedName{Namespace: rt.GetNamespace(), Name: rt.GetName()}])
		if apiequality.Semantic.DeepEqual(status(rt), status(next)) {
			continue
		}
		if _, err := update(ctx, next); err != nil {
			errs = append(errs, fmt.Errorf("updating status of %s %s/%s: %w", kind, rt.GetNamespace(), rt.GetName(), err))
		}
	}
	return errs
}

// routeParents is a route's status.parents with this controller's entries
// replaced by parents (keeping each condition's transition time while its
// status holds) and other controllers' kept.
func routeParents(old, parents []gatewayv1.RouteParentStatus) []gatewayv1.RouteParentStatus {
	var out []gatewayv1.RouteParentStatus
	for _, p := range old {
		if p.ControllerName != ControllerName {
			out = append(out, p)
		}
	}
	for _, p := range parents {
		var conds []metav1.Condition
		for _, op := range old {
			if op.ControllerName == ControllerName && apiequality.Semantic.DeepEqual(op.ParentRef, p.ParentRef) {
				conds = slices.Clone(op.Conditions)
			}
		}
		for _, c := range p.Conditions {
			meta.SetStatusCondition(&conds, c)
		}
		p.Conditions = conds
		out = append(out, p)
	}
	return out
}
