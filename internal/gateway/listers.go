package gateway

import (
	"slices"

	"github.com/minikit/minikit/internal/informer"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"
	gwlisters "sigs.k8s.io/gateway-api/pkg/client/listers/apis/v1"
)

// listers are what both halves read to build a World.
type listers struct {
	classes  gwlisters.GatewayClassLister
	gateways gwlisters.GatewayLister
	routes   gwlisters.HTTPRouteLister
	grpc     gwlisters.GRPCRouteLister
	tls      gwlisters.TLSRouteLister
	tcp      gwlisters.TCPRouteLister
	udp      gwlisters.UDPRouteLister
	grants   gwlisters.ReferenceGrantLister
	svcs     corelisters.ServiceLister
	secrets  corelisters.SecretLister
	nss      corelisters.NamespaceLister
	slices   discoverylisters.EndpointSliceLister
	infs     []cache.SharedIndexInformer
}

func newListers(kube informers.SharedInformerFactory, gw gwinformers.SharedInformerFactory) listers {
	v1 := gw.Gateway().V1()
	return listers{
		classes: v1.GatewayClasses().Lister(), gateways: v1.Gateways().Lister(), routes: v1.HTTPRoutes().Lister(), grpc: v1.GRPCRoutes().Lister(), tls: v1.TLSRoutes().Lister(),
		tcp: v1.TCPRoutes().Lister(), udp: v1.UDPRoutes().Lister(), grants: v1.ReferenceGrants().Lister(),
		svcs: kube.Core().V1().Services().Lister(), secrets: kube.Core().V1().Secrets().Lister(), nss: kube.Core().V1().Namespaces().Lister(), slices: kube.Discovery().V1().EndpointSlices().Lister(),
		infs: []cache.SharedIndexInformer{v1.GatewayClasses().Informer(), v1.Gateways().Informer(), v1.HTTPRoutes().Informer(), v1.GRPCRoutes().Informer(), v1.TLSRoutes().Informer(),
			v1.TCPRoutes().Informer(), v1.UDPRoutes().Informer(), v1.ReferenceGrants().Informer(),
			kube.Core().V1().Services().Informer(), kube.Core().V1().Secrets().Informer(), kube.Core().V1().Namespaces().Informer(), kube.Discovery().V1().EndpointSlices().Informer()},
	}
}

// watch calls f on every change of the listers' objects (and of more).
func (l listers) watch(f func(), more ...cache.SharedIndexInformer) error {
	return informer.AddHandler(informer.OnChange(f), append(slices.Clone(l.infs), more...)...)
}

// world is the World of the Gateways whose class names this controller, and
// every Service (the control plane allocates data ports from them).
func (l listers) world() (World, []*corev1.Service, error) {
	w := World{Services: map[types.NamespacedName]*corev1.Service{}, Secrets: map[types.NamespacedName]*corev1.Secret{},
		Namespaces: map[string]map[string]string{}}
	classes, err := l.classes.List(labels.Everything())
	if err != nil {
		return w, nil, err
	}
	ours := map[string]bool{}
	for _, gc := range classes {
		if gc.Spec.ControllerName == ControllerName {
			ours[gc.Name] = true
		}
	}
	all, err := l.gateways.List(labels.Everything())
	if err != nil {
		return w, nil, err
	}
	for _, g := range all {
		if ours[string(g.Spec.GatewayClassName)] {
			w.Gateways = append(w.Gateways, g)
		}
	}
	slices.SortFunc(w.Gateways, func(a, b *gatewayv1.Gateway) int { return compareKey(a.ObjectMeta, b.ObjectMeta) })
	if w.HTTPRoutes, err = l.routes.List(labels.Everything()); err != nil {
		return w, nil, err
	}
	slices.SortFunc(w.HTTPRoutes, func(a, b *gatewayv1.HTTPRoute) int { return compareKey(a.ObjectMeta, b.ObjectMeta) })
	if w.GRPCRoutes, err = l.grpc.List(labels.Everything()); err != nil {
		return w, nil, err
	}
	slices.SortFunc(w.GRPCRoutes, func(a, b *gatewayv1.GRPCRoute) int { return compareKey(a.ObjectMeta, b.ObjectMeta) })
	if w.TLSRoutes, err = l.tls.List(labels.Everything()); err != nil {
		return w, nil, err
	}
	slices.SortFunc(w.TLSRoutes, func(a, b *gatewayv1.TLSRoute) int { return compareKey(a.ObjectMeta, b.ObjectMeta) })
	if w.TCPRoutes, err = l.tcp.List(labels.Everything()); err != nil {
		return w, nil, err
	}
	slices.SortFunc(w.TCPRoutes, func(a, b *gatewayv1.TCPRoute) int { return compareKey(a.ObjectMeta, b.ObjectMeta) })
	if w.UDPRoutes, err = l.udp.List(labels.Everything()); err != nil {
		return w, nil, err
	}
	slices.SortFunc(w.UDPRoutes, func(a, b *gatewayv1.UDPRoute) int { return compareKey(a.ObjectMeta, b.ObjectMeta) })
	if w.Grants, err = l.grants.List(labels.Everything()); err != nil {
		return w, nil, err
	}
	svcs, err := l.svcs.List(labels.Everything())
	if err != nil {
		return w, nil, err
	}
	for _, svc := range svcs {
		w.Services[types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}] = svc
	}
	// Only the Secrets a listener names: the rules read nothing else.
	named := map[types.NamespacedName]bool{}
	for _, g := range w.Gateways {
		for _, ln := range g.Spec.Listeners {
			if ln.TLS == nil || tlsMode(ln) == gatewayv1.TLSModePassthrough {
				continue
			}
			for _, ref := range ln.TLS.CertificateRefs {
				named[types.NamespacedName{Namespace: string(deref(ref.Namespace, gatewayv1.Namespace(g.Namespace))), Name: string(ref.Name)}] = true
			}
		}
	}
	for k := range named {
		if s, err := l.secrets.Secrets(k.Namespace).Get(k.Name); err == nil {
			w.Secrets[k] = s
		}
	}
	nss, err := l.nss.List(labels.Everything())
	if err != nil {
		return w, nil, err
	}
	for _, ns := range nss {
		w.Namespaces[ns.Name] = ns.Labels
	}
	return w, svcs, nil
}
