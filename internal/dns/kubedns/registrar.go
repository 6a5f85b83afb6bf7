// Package kubedns wires minikit's cluster DNS into Kubernetes the way a
// cluster does it: the kube-system/kube-dns Service (ClusterIP 10.96.0.10,
// ports dns 53/UDP and dns-tcp 53/TCP, CoreDNS's labels) and its Endpoints and
// EndpointSlices, which list each node's DNS listener. The Service has no
// selector: the Registrar on every node publishes its own listener, removes
// listeners of nodes that are gone and withdraws its own when it stops, so
// the service proxy DNATs the VIP to live listeners only.
package kubedns

//lint:file-ignore SA1019 core/v1 Endpoints is deprecated upstream but still served and read by kube-proxy-style consumers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// The kube-dns Service, as kubeadm and CoreDNS's manifest make it, except
// that it has no selector: its endpoints are the nodes' DNS listeners, which
// the Registrars write (one EndpointSlice per node, and the Endpoints derived
// from all of them).
const (
	ServiceNamespace = "kube-system"
	ServiceName      = "kube-dns"
	// ManagedBy marks the EndpointSlices the Registrars own.
	ManagedBy = "minikit-dns"
	// endpointsManagedByLabel is the Endpoints counterpart of
	// endpointslice.kubernetes.io/managed-by.
	endpointsManagedByLabel = "endpoints.kubernetes.io/managed-by"
)

// Registrar keeps kube-system/kube-dns pointing at every node's DNS listener:
// it creates the Service when it is missing, publishes this node's listener
// as the EndpointSlice kube-dns-<node>, deletes the slices of nodes that are
// gone, and rewrites the Endpoints from the slices. Every node runs one; they
// converge on the same objects because each computes them in full from the
// API (optimistic concurrency settles the races).
type Registrar struct {
	Client   kubernetes.Interface
	NodeName string
	Addr     netip.Addr // this node's listener
	Logger   *slog.Logger
	// Resync is the period of a full check besides events, default 30s.
	Resync time.Duration
}

func (r *Registrar) sliceName() string { return ServiceName + "-" + r.NodeName }

// Service is the kube-dns Service the cluster gets when none exists.
func Service() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ServiceNamespace, Name: ServiceName,
			Labels:      map[string]string{"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"},
			Annotations: map[string]string{"prometheus.io/scrape": "false"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: []corev1.ServicePort{
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
			{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
		}},
	}
}

func endpointPorts() []discoveryv1.EndpointPort {
	return []discoveryv1.EndpointPort{
		{Name: ptr.To("dns"), Port: ptr.To[int32](53), Protocol: ptr.To(corev1.ProtocolUDP)},
		{Name: ptr.To("dns-tcp"), Port: ptr.To[int32](53), Protocol: ptr.To(corev1.ProtocolTCP)},
	}
}

// Run registers this node until ctx ends, then withdraws it (so that the
// proxy stops sending queries to a listener that is going away). ready is
// closed when the listener can answer; nothing is published before.
func (r *Registrar) Run(ctx context.Context, ready <-chan struct{}) {
	if r.Logger == nil {
		r.Logger = slog.Default()
	}
	if r.Resync == 0 {
		r.Resync = 30 * time.Second
	}
	log := r.Logger.With("component", "dns")
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	h := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { poke() }, UpdateFunc: func(any, any) { poke() }, DeleteFunc: func(any) { poke() }}
	nodes := informers.NewSharedInformerFactory(r.Client, 0)
	nodeInf := nodes.Core().V1().Nodes().Informer()
	_, _ = nodeInf.AddEventHandler(h)
	sys := informers.NewSharedInformerFactoryWithOptions(r.Client, 0, informers.WithNamespace(ServiceNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = discoveryv1.LabelServiceName + "=" + ServiceName }))
	sliceInf := sys.Discovery().V1().EndpointSlices().Informer()
	_, _ = sliceInf.AddEventHandler(h)
	nodes.Start(ctx.Done())
	sys.Start(ctx.Done())
	defer nodes.Shutdown()
	defer sys.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), nodeInf.HasSynced, sliceInf.HasSynced) {
		return
	}
	select {
	case <-ctx.Done():
		return
	case <-ready:
	}
	tick := time.NewTicker(r.Resync)
	defer tick.Stop()
	backoff := time.Duration(0)
	for {
		if err := r.sync(ctx, nodeInf.GetStore(), sliceInf.GetStore(), true); err != nil && ctx.Err() == nil {
			// Nodes race on the shared Endpoints; a conflict just means "again".
			level := slog.LevelWarn
			if apierrors.IsConflict(err) {
				level = slog.LevelDebug
			}
			log.Log(ctx, level, "registering the kube-dns endpoint", "node", r.NodeName, "err", err)
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
			poke()
		} else {
			backoff = 0
		}
		select {
		case <-ctx.Done():
			wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := r.withdraw(wctx); err != nil {
				log.Warn("withdrawing the kube-dns endpoint", "node", r.NodeName, "err", err)
			}
			cancel()
			return
		case <-kick:
		case <-tick.C:
		}
		if backoff > 0 {
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
	}
}

// sync makes the API match: the Service exists, our slice says what it
// should, slices of gone nodes are deleted, the Endpoints mirror the slices.
func (r *Registrar) sync(ctx context.Context, nodeStore, sliceStore cache.Store, publish bool) error {
	if err := r.ensureService(ctx); err != nil {
		return err
	}
	nodeReady := map[string]bool{}
	for _, o := range nodeStore.List() {
		n := o.(*corev1.Node)
		nodeReady[n.Name] = isNodeReady(n)
	}
	var errs []error
	var mine []*discoveryv1.EndpointSlice
	haveOwn := false
	for _, o := range sliceStore.List() {
		s := o.(*discoveryv1.EndpointSlice)
		if s.Labels[discoveryv1.LabelManagedBy] != ManagedBy {
			continue
		}
		node := sliceNode(s)
		if s.Name == r.sliceName() {
			haveOwn = true
			continue // recomputed below
		}
		if _, exists := nodeReady[node]; !exists {
			err := r.Client.DiscoveryV1().EndpointSlices(ServiceNamespace).Delete(ctx, s.Name,
				metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				errs = append(errs, fmt.Errorf("deleting the kube-dns slice %q of gone node %q: %w", s.Name, node, err))
			}
			continue
		}
		mine = append(mine, s)
	}
	if publish {
		own, err := r.ensureSlice(ctx, nodeReady[r.NodeName] || len(nodeReady) == 0)
		if err != nil {
			errs = append(errs, err)
		} else {
			mine = append(mine, own)
		}
	} else if haveOwn {
		errs = append(errs, r.withdraw(ctx))
	}
	errs = append(errs, r.ensureEndpoints(ctx, mine))
	return errors.Join(errs...)
}

func isNodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func sliceNode(s *discoveryv1.EndpointSlice) string {
	for _, ep := range s.Endpoints {
		if ep.NodeName != nil {
			return *ep.NodeName
		}
	}
	return strings.TrimPrefix(s.Name, ServiceName+"-")
}

func (r *Registrar) ensureService(ctx context.Context) error {
	svcs := r.Client.CoreV1().Services(ServiceNamespace)
	if _, err := svcs.Get(ctx, ServiceName, metav1.GetOptions{}); err == nil || !apierrors.IsNotFound(err) {
		return err
	}
	_, err := svcs.Create(ctx, Service(), metav1.CreateOptions{})
	if apierrors.IsNotFound(err) {
		// kube-system itself is missing.
		_, err = r.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ServiceNamespace}}, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			_, err = svcs.Create(ctx, Service(), metav1.CreateOptions{})
		}
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating service %s/%s: %w", ServiceNamespace, ServiceName, err)
	}
	return nil
}

func (r *Registrar) desiredSlice(ready bool) *discoveryv1.EndpointSlice {
	fam := discoveryv1.AddressTypeIPv4
	if r.Addr.Is6() {
		fam = discoveryv1.AddressTypeIPv6
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ServiceNamespace, Name: r.sliceName(),
			Labels: map[string]string{discoveryv1.LabelServiceName: ServiceName, discoveryv1.LabelManagedBy: ManagedBy, "k8s-app": "kube-dns"}},
		AddressType: fam,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{r.Addr.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready), Terminating: ptr.To(false)},
			NodeName:   ptr.To(r.NodeName),
		}},
		Ports: endpointPorts(),
	}
}

func (r *Registrar) ensureSlice(ctx context.Context, ready bool) (*discoveryv1.EndpointSlice, error) {
	want := r.desiredSlice(ready)
	api := r.Client.DiscoveryV1().EndpointSlices(ServiceNamespace)
	cur, err := api.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		got, err := api.Create(ctx, want, metav1.CreateOptions{})
		if err != nil {
			return nil, fmt.Errorf("creating endpointslice %s/%s: %w", ServiceNamespace, want.Name, err)
		}
		return got, nil
	case err != nil:
		return nil, fmt.Errorf("getting endpointslice %s/%s: %w", ServiceNamespace, want.Name, err)
	}
	if apiequality.Semantic.DeepEqual(cur.Endpoints, want.Endpoints) && apiequality.Semantic.DeepEqual(cur.Ports, want.Ports) &&
		cur.AddressType == want.AddressType && labelsHave(cur.Labels, want.Labels) {
		return cur, nil
	}
	upd := cur.DeepCopy()
	upd.Endpoints, upd.Ports, upd.AddressType = want.Endpoints, want.Ports, want.AddressType
	if upd.Labels == nil {
		upd.Labels = map[string]string{}
	}
	for k, v := range want.Labels {
		upd.Labels[k] = v
	}
	got, err := api.Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("updating endpointslice %s/%s: %w", ServiceNamespace, want.Name, err)
	}
	return got, nil
}

func labelsHave(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// ensureEndpoints writes the Endpoints object from the slices: ready
// listeners in addresses, the others in notReadyAddresses.
func (r *Registrar) ensureEndpoints(ctx context.Context, slices_ []*discoveryv1.EndpointSlice) error {
	var ready, notReady []corev1.EndpointAddress
	for _, s := range slices_ {
		for _, ep := range s.Endpoints {
			for _, a := range ep.Addresses {
				ea := corev1.EndpointAddress{IP: a, NodeName: ep.NodeName}
				if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
					ready = append(ready, ea)
				} else {
					notReady = append(notReady, ea)
				}
			}
		}
	}
	byIP := func(a, b corev1.EndpointAddress) int { return strings.Compare(a.IP, b.IP) }
	slices.SortFunc(ready, byIP)
	slices.SortFunc(notReady, byIP)
	var subsets []corev1.EndpointSubset
	if len(ready)+len(notReady) > 0 {
		subsets = []corev1.EndpointSubset{{Addresses: ready, NotReadyAddresses: notReady, Ports: []corev1.EndpointPort{
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
			{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP},
		}}}
	}
	api := r.Client.CoreV1().Endpoints(ServiceNamespace)
	cur, err := api.Get(ctx, ServiceName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		ep := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: ServiceNamespace, Name: ServiceName,
			Labels: map[string]string{endpointsManagedByLabel: ManagedBy, "k8s-app": "kube-dns"}}, Subsets: subsets}
		if _, err := api.Create(ctx, ep, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating endpoints %s/%s: %w", ServiceNamespace, ServiceName, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("getting endpoints %s/%s: %w", ServiceNamespace, ServiceName, err)
	}
	if apiequality.Semantic.DeepEqual(cur.Subsets, subsets) {
		return nil
	}
	upd := cur.DeepCopy()
	upd.Subsets = subsets
	if upd.Labels == nil {
		upd.Labels = map[string]string{}
	}
	upd.Labels[endpointsManagedByLabel] = ManagedBy
	if _, err := api.Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating endpoints %s/%s: %w", ServiceNamespace, ServiceName, err)
	}
	return nil
}

// withdraw deletes this node's slice and its address from the Endpoints.
func (r *Registrar) withdraw(ctx context.Context) error {
	err := r.Client.DiscoveryV1().EndpointSlices(ServiceNamespace).Delete(ctx, r.sliceName(), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting endpointslice %s/%s: %w", ServiceNamespace, r.sliceName(), err)
	}
	for range 5 {
		api := r.Client.CoreV1().Endpoints(ServiceNamespace)
		cur, err := api.Get(ctx, ServiceName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		upd := cur.DeepCopy()
		changed := false
		for i := range upd.Subsets {
			ss := &upd.Subsets[i]
			keep := func(a corev1.EndpointAddress) bool { return a.IP != r.Addr.String() }
			n1, n2 := len(ss.Addresses), len(ss.NotReadyAddresses)
			ss.Addresses = slices.DeleteFunc(ss.Addresses, func(a corev1.EndpointAddress) bool { return !keep(a) })
			ss.NotReadyAddresses = slices.DeleteFunc(ss.NotReadyAddresses, func(a corev1.EndpointAddress) bool { return !keep(a) })
			changed = changed || n1 != len(ss.Addresses) || n2 != len(ss.NotReadyAddresses)
		}
		upd.Subsets = slices.DeleteFunc(upd.Subsets, func(ss corev1.EndpointSubset) bool {
			return len(ss.Addresses)+len(ss.NotReadyAddresses) == 0
		})
		if !changed {
			return nil
		}
		_, err = api.Update(ctx, upd, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return fmt.Errorf("updating endpoints %s/%s: conflicts", ServiceNamespace, ServiceName)
}
