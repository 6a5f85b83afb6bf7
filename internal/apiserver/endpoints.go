package apiserver

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/minikit/minikit/internal/store"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// Several API servers share one store. Each says it is alive with an identity
// Lease in kube-system, shaped as kube-apiserver's own (named
// apiserver-<hash of its identity>, labelled
// apiserver.kubernetes.io/identity=kube-apiserver), which also carries its
// advertise address. The default/kubernetes Endpoints and EndpointSlice name
// every server whose lease is fresh, sorted, as kube-apiserver's lease
// endpoint reconciler (--endpoint-reconciler-type=lease) does; each server
// renews its lease and reconciles the endpoints in one store transaction every
// apiLeaseRenew, so a server that stopped renewing leaves them within
// apiLeaseDuration+apiLeaseRenew (about 20 s). One server gives exactly one
// address: the endpoints a single server always had.
const (
	// IdentityLeaseLabel and IdentityLeaseComponent are kube-apiserver's
	// (k8s.io/apiserver/pkg/endpoints/... IdentityLeaseComponentLabelKey).
	IdentityLeaseLabel     = "apiserver.kubernetes.io/identity"
	IdentityLeaseComponent = "kube-apiserver"
	// AdvertiseAddressAnnotation holds the server's advertise address on its lease.
	AdvertiseAddressAnnotation = "minikit.io/advertise-address"

	apiLeaseDuration = 15 * time.Second
	apiLeaseRenew    = 5 * time.Second
	// apiLeaseGC is how long an expired identity lease stays before a live
	// server deletes it (kube-apiserver's identity lease GC waits an hour).
	apiLeaseGC = time.Hour
)

var leaseResource = lookup(coordinationv1.GroupName, "v1", "leases")

// IdentityLeaseName is the name of the identity Lease of the server with this
// identity, as kube-apiserver derives it from its hostname.
func IdentityLeaseName(identity string) string {
	h := sha256.Sum256([]byte(identity))
	return "apiserver-" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(h[:16]))
}

func (s *Server) identity() string {
	if s.cfg.Identity != "" {
		return s.cfg.Identity
	}
	h, _ := os.Hostname()
	return h
}

// publishesEndpoints reports whether this server takes part in the
// default/kubernetes endpoints: a loopback or unspecified advertise address
// reaches no one but this machine.
func (s *Server) publishesEndpoints() bool {
	ip, err := netip.ParseAddr(s.cfg.AdvertiseAddress)
	return err == nil && !ip.IsLoopback() && !ip.IsUnspecified()
}

// RunEndpointReconciler renews this server's identity lease and reconciles the
// default/kubernetes endpoints every few seconds until ctx ends; then it
// deletes its lease and, if other servers are still alive, takes its address
// out of the endpoints, as kube-apiserver does on shutdown. The last server
// leaves its address in place: a cluster whose only server stopped still
// points at where it comes back. It also resumes the deletion of namespaces
// whose server stopped mid-way (nsdelete.go).
func (s *Server) RunEndpointReconciler(ctx context.Context) error {
	if !s.publishesEndpoints() {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(apiLeaseRenew)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if err := s.syncAPIEndpoints(true); err != nil && !errors.Is(err, store.ErrClosed) {
				return fmt.Errorf("removing API server lease: %w", err)
			}
			return nil
		case <-t.C:
		}
		if err := s.syncAPIEndpoints(false); err != nil {
			if errors.Is(err, store.ErrClosed) {
				return nil
			}
			s.log.Warn("reconciling default/kubernetes endpoints", "err", err)
		}
		if err := s.resumeNamespaceDeletions(apiLeaseDuration); err != nil && !errors.Is(err, store.ErrClosed) {
			s.log.Warn("resuming namespace deletions", "err", err)
		}
	}
}

// syncAPIEndpoints renews (or, with remove, deletes) this server's identity
// lease and writes the default/kubernetes Endpoints and EndpointSlice from the
// fresh leases, all in one transaction, so concurrent servers never write
// endpoints from a stale view. The store may run the closure more than once:
// it reads everything it writes from tx.
func (s *Server) syncAPIEndpoints(remove bool) error {
	ip, err := netip.ParseAddr(s.cfg.AdvertiseAddress)
	if err != nil {
		return fmt.Errorf("parsing advertise address %q: %w", s.cfg.AdvertiseAddress, err)
	}
	ip = ip.Unmap()
	addrType := discoveryv1.AddressTypeIPv4
	if !ip.Is4() {
		addrType = discoveryv1.AddressTypeIPv6
	}
	// The address type is immutable: a cluster that changed family replaces the
	// slice (a delete watchers see, then a create).
	if !remove {
		if cur, gerr := s.get(proxySliceResource, "default", "kubernetes"); gerr == nil && cur.(*discoveryv1.EndpointSlice).AddressType != addrType {
			if _, err := s.Delete(proxySliceResource, "default", "kubernetes", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("replacing endpointslice default/kubernetes: %w", err)
			}
		}
	}
	name := IdentityLeaseName(s.identity())
	leaseKey := leaseResource.key(metav1.NamespaceSystem, name)
	_, err = s.store.Update(func(tx store.Tx) error {
		now := s.now()
		if remove {
			if _, ok := tx.Get(leaseKey); ok {
				if err := tx.Delete(leaseKey); err != nil {
					return err
				}
			}
		} else if err := s.renewLease(tx, leaseKey, name, ip, now); err != nil {
			return fmt.Errorf("renewing lease kube-system/%s: %w", name, err)
		}
		live, err := s.liveServers(tx, addrType, now)
		if err != nil {
			return err
		}
		if len(live) == 0 {
			return nil // the last server stopping: leave its address in place
		}
		if err := s.writeAPIEndpoints(tx, live); err != nil {
			return fmt.Errorf("writing endpoints default/kubernetes: %w", err)
		}
		if err := s.writeAPIEndpointSlice(tx, addrType, live); err != nil {
			return fmt.Errorf("writing endpointslice default/kubernetes: %w", err)
		}
		return nil
	})
	return err
}

// renewLease writes this server's identity lease with renewTime now.
func (s *Server) renewLease(tx store.Tx, key, name string, ip netip.Addr, now time.Time) error {
	mt := metav1.NewMicroTime(now)
	dur := int32(apiLeaseDuration / time.Second)
	holder := name + "_" + s.instance
	want := coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &mt}
	lease := &coordinationv1.Lease{}
	if kv, ok := tx.Get(key); ok {
		if err := decodeStored(kv.Value, lease); err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != holder {
			want.AcquireTime = &mt // a new process of this server
		} else {
			want.AcquireTime = lease.Spec.AcquireTime
		}
	} else {
		lease.ObjectMeta = metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceSystem,
			UID: uuid.NewUUID(), CreationTimestamp: metav1.NewTime(now.Truncate(time.Second))}
		want.AcquireTime = &mt
	}
	if lease.Labels == nil {
		lease.Labels = map[string]string{}
	}
	lease.Labels[IdentityLeaseLabel] = IdentityLeaseComponent
	lease.Labels[corev1.LabelHostname] = s.identity()
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[AdvertiseAddressAnnotation] = ip.String()
	lease.Spec = want
	return s.put(tx, leaseResource, key, lease)
}

// liveServers lists the advertise addresses of the fresh identity leases of
// family addrType, sorted, and deletes identity leases expired for apiLeaseGC.
func (s *Server) liveServers(tx store.Tx, addrType discoveryv1.AddressType, now time.Time) ([]netip.Addr, error) {
	var live []netip.Addr
	for _, kv := range tx.List(leaseResource.prefix(metav1.NamespaceSystem)) {
		var l coordinationv1.Lease
		if decodeStored(kv.Value, &l) != nil || l.Labels[IdentityLeaseLabel] != IdentityLeaseComponent {
			continue
		}
		if l.Spec.RenewTime == nil {
			continue
		}
		dur := apiLeaseDuration
		if l.Spec.LeaseDurationSeconds != nil {
			dur = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
		}
		expires := l.Spec.RenewTime.Add(dur)
		if !now.Before(expires) {
			if now.Sub(expires) > apiLeaseGC {
				if err := tx.Delete(kv.Key); err != nil {
					return nil, err
				}
			}
			continue
		}
		ip, err := netip.ParseAddr(l.Annotations[AdvertiseAddressAnnotation])
		if err != nil || ip.Unmap().Is4() != (addrType == discoveryv1.AddressTypeIPv4) {
			continue
		}
		if ip = ip.Unmap(); !slices.Contains(live, ip) {
			live = append(live, ip)
		}
	}
	// In the order of their text, as kube-apiserver's come from listing
	// /masterleases/IP keys: 192.0.2.10 before 192.0.2.9.
	slices.SortFunc(live, func(a, b netip.Addr) int { return strings.Compare(a.String(), b.String()) })
	return live, nil
}

var endpointsResource = lookup("", "v1", "endpoints")

// writeAPIEndpoints points default/kubernetes' Endpoints at the live servers.
func (s *Server) writeAPIEndpoints(tx store.Tx, live []netip.Addr) error {
	addrs := make([]corev1.EndpointAddress, len(live))
	for i, ip := range live {
		addrs[i] = corev1.EndpointAddress{IP: ip.String()}
	}
	want := []corev1.EndpointSubset{{
		Addresses: addrs,
		Ports:     []corev1.EndpointPort{{Name: "https", Port: s.cfg.Port, Protocol: corev1.ProtocolTCP}},
	}}
	labels := map[string]string{"endpointslice.kubernetes.io/skip-mirror": "true"}
	key := endpointsResource.key("default", "kubernetes")
	ep := &corev1.Endpoints{}
	if kv, ok := tx.Get(key); ok {
		if err := decodeStored(kv.Value, ep); err != nil {
			return err
		}
		if apiequality.Semantic.DeepEqual(ep.Subsets, want) && ep.Labels["endpointslice.kubernetes.io/skip-mirror"] == "true" {
			return nil
		}
	} else {
		ep.ObjectMeta = s.newMeta("default", "kubernetes")
	}
	if ep.Labels == nil {
		ep.Labels = map[string]string{}
	}
	for k, v := range labels {
		ep.Labels[k] = v
	}
	ep.Subsets = want
	return s.put(tx, endpointsResource, key, ep)
}

// writeAPIEndpointSlice writes the EndpointSlice of default/kubernetes that the
// proxies read, as kube-apiserver's endpoints adapter does next to the Endpoints:
// named after the Service, labelled with its name only (no managed-by label, so
// the endpoints controller, which leaves selector-less Services alone, never
// touches it), one ready endpoint per API server.
func (s *Server) writeAPIEndpointSlice(tx store.Tx, addrType discoveryv1.AddressType, live []netip.Addr) error {
	ready := true
	name, proto, port := "https", corev1.ProtocolTCP, s.cfg.Port
	eps := make([]discoveryv1.Endpoint, len(live))
	for i, ip := range live {
		eps[i] = discoveryv1.Endpoint{Addresses: []string{ip.String()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}
	}
	labels := map[string]string{discoveryv1.LabelServiceName: "kubernetes"}
	ports := []discoveryv1.EndpointPort{{Name: &name, Protocol: &proto, Port: &port}}
	key := proxySliceResource.key("default", "kubernetes")
	sl := &discoveryv1.EndpointSlice{}
	if kv, ok := tx.Get(key); ok {
		if err := decodeStored(kv.Value, sl); err != nil {
			return err
		}
		if sl.AddressType != addrType {
			return fmt.Errorf("endpointslice default/kubernetes has address type %s, this server %s", sl.AddressType, addrType)
		}
		if apiequality.Semantic.DeepEqual(sl.Labels, labels) && apiequality.Semantic.DeepEqual(sl.Endpoints, eps) &&
			apiequality.Semantic.DeepEqual(sl.Ports, ports) {
			return nil
		}
	} else {
		sl.ObjectMeta = s.newMeta("default", "kubernetes")
		sl.AddressType = addrType
	}
	sl.Labels, sl.Endpoints, sl.Ports = labels, eps, ports
	return s.put(tx, proxySliceResource, key, sl)
}

// newMeta is the metadata of an object the server creates itself.
func (s *Server) newMeta(ns, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: ns, UID: uuid.NewUUID(),
		CreationTimestamp: metav1.NewTime(s.now().Truncate(time.Second))}
}
