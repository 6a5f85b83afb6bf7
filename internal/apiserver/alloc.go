package apiserver

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"time"

	"github.com/minikit/minikit/internal/store"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Allocations live in the store next to the objects, written in the same transaction
// as the Service that owns them: a crash can never leave an IP or port owned twice
// or owned by nobody. The value of an allocation key is the owning Service's key.
//
// Each allocated ClusterIP also has its networking.k8s.io/v1 IPAddress object, as
// kube-apiserver's MultiCIDRServiceAllocator writes (named after the address,
// parentRef the Service, labelled managed-by ipallocator.k8s.io), written and
// deleted in that same transaction. The allocation key stays the authority: an
// IPAddress someone else created keeps its address from being handed out, and
// one deleted by hand is written again by the next write of its Service (and by
// the repair at start-up), as kube-apiserver's repair loop does.
const (
	allocIPPrefix   = "/registry/_ranges/serviceips/"
	allocPortPrefix = "/registry/_ranges/servicenodeports/"
)

var svcResource = lookup("", "v1", "services")

// beforeWrite runs inside the write transaction of a create (old == nil) or update.
func (s *Server) beforeWrite(tx store.Tx, res *resource, obj, old runtime.Object) error {
	if svc, ok := obj.(*corev1.Service); ok {
		var oldSvc *corev1.Service
		if old != nil {
			oldSvc = old.(*corev1.Service)
		}
		return s.allocateService(tx, svc, oldSvc)
	}
	if cr, ok := obj.(*rbacv1.ClusterRole); ok {
		return s.aggregateClusterRoles(tx, cr, false)
	}
	return nil
}

// beforeDelete runs inside the transaction that deletes obj.
func (s *Server) beforeDelete(tx store.Tx, res *resource, obj runtime.Object) error {
	if svc, ok := obj.(*corev1.Service); ok {
		owner := svcResource.key(svc.Namespace, svc.Name)
		for _, ip := range serviceIPs(svc) {
			releaseIP(tx, ip, svc)
		}
		for _, p := range serviceNodePorts(svc) {
			release(tx, allocPortPrefix+strconv.Itoa(int(p)), owner)
		}
	}
	if cr, ok := obj.(*rbacv1.ClusterRole); ok {
		return s.aggregateClusterRoles(tx, cr, true)
	}
	return nil
}

func release(tx store.Tx, key, owner string) {
	if kv, ok := tx.Get(key); ok && string(kv.Value) == owner {
		tx.Delete(key)
	}
}

// releaseIP frees svc's ClusterIP ip and deletes its IPAddress.
func releaseIP(tx store.Tx, ip string, svc *corev1.Service) {
	release(tx, allocIPPrefix+ip, svcResource.key(svc.Namespace, svc.Name))
	key := ipAddressResource.key("", ip)
	if cur, ok := storedIPAddress(tx, key); ok && isParent(cur.Spec.ParentRef, svc) {
		tx.Delete(key)
	}
}

var ipAddressResource = lookup(networkingv1.GroupName, "v1", "ipaddresses")

// ipAllocatorName is the managed-by label value of the IPAddresses that
// kube-apiserver's ClusterIP allocator writes.
const ipAllocatorName = "ipallocator.k8s.io"

func storedIPAddress(tx store.Tx, key string) (*networkingv1.IPAddress, bool) {
	kv, ok := tx.Get(key)
	if !ok {
		return nil, false
	}
	var ip networkingv1.IPAddress
	if err := decodeStored(kv.Value, &ip); err != nil {
		return nil, true // unreadable, but it exists: it still holds the address
	}
	return &ip, true
}

func isParent(ref *networkingv1.ParentReference, svc *corev1.Service) bool {
	return ref != nil && ref.Group == "" && ref.Resource == "services" && ref.Namespace == svc.Namespace && ref.Name == svc.Name
}

// ipTaken reports whether ip is allocated, or held by an IPAddress object.
func ipTaken(tx store.Tx, ip string) bool {
	if _, ok := tx.Get(allocIPPrefix + ip); ok {
		return true
	}
	_, ok := tx.Get(ipAddressResource.key("", ip))
	return ok
}

// claimIP records ip as svc's ClusterIP with its IPAddress. It fails when the
// address is allocated to another Service or held by an IPAddress that is not
// svc's.
func (s *Server) claimIP(tx store.Tx, ip string, svc *corev1.Service) error {
	owner := svcResource.key(svc.Namespace, svc.Name)
	key := ipAddressResource.key("", ip)
	if kv, ok := tx.Get(allocIPPrefix + ip); ok {
		if string(kv.Value) != owner {
			return fmt.Errorf("%s is allocated to %s", ip, kv.Value)
		}
	} else {
		if cur, ok := storedIPAddress(tx, key); ok && (cur == nil || !isParent(cur.Spec.ParentRef, svc)) {
			return fmt.Errorf("%s is held by IPAddress %s", ip, ip)
		}
		if err := tx.Put(allocIPPrefix+ip, []byte(owner)); err != nil {
			return err
		}
	}
	if _, ok := tx.Get(key); ok {
		return nil
	}
	family := corev1.IPv4Protocol
	if a, err := netip.ParseAddr(ip); err == nil && !a.Is4() {
		family = corev1.IPv6Protocol
	}
	obj := &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{
			Name: ip, UID: uuid.NewUUID(), CreationTimestamp: metav1.NewTime(s.now().Truncate(time.Second)),
			Labels: map[string]string{networkingv1.LabelIPAddressFamily: string(family), networkingv1.LabelManagedBy: ipAllocatorName},
		},
		Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: svc.Namespace, Name: svc.Name}},
	}
	return s.put(tx, ipAddressResource, key, obj)
}

// keepAllocated carries allocated values over an update that omits them, as
// Kubernetes does, so a PUT or apply without clusterIP or nodePort keeps them.
func keepAllocated(svc, old *corev1.Service) {
	dropTypeDependentFields(svc, old)
	if svc.Spec.Type == corev1.ServiceTypeExternalName || old.Spec.Type == corev1.ServiceTypeExternalName {
		return
	}
	if svc.Spec.ClusterIP == "" && len(svc.Spec.ClusterIPs) == 0 {
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = old.Spec.ClusterIP, old.Spec.ClusterIPs
	}
	if needsNodePorts(svc) && needsNodePorts(old) {
		for i := range svc.Spec.Ports {
			p := &svc.Spec.Ports[i]
			if p.NodePort != 0 {
				continue
			}
			for _, op := range old.Spec.Ports {
				// The update is not defaulted yet: an empty protocol is TCP.
				if op.Port == p.Port && orTCP(op.Protocol) == orTCP(p.Protocol) && op.NodePort != 0 {
					p.NodePort = op.NodePort
				}
			}
		}
	}
	if svc.Spec.HealthCheckNodePort == 0 && needsHealthCheck(svc) {
		svc.Spec.HealthCheckNodePort = old.Spec.HealthCheckNodePort
	}
}

// dropTypeDependentFields clears values the old type allocated and the new type does
// not use, when the client left them as they were (Kubernetes' dropTypeDependentFields).
func dropTypeDependentFields(svc, old *corev1.Service) {
	// The health check node port follows externalTrafficPolicy as well as
	// the type: a LoadBalancer going from Local to Cluster drops it too.
	if needsHealthCheck(old) && !needsHealthCheck(svc) && svc.Spec.HealthCheckNodePort == old.Spec.HealthCheckNodePort {
		svc.Spec.HealthCheckNodePort = 0
	}
	if svc.Spec.Type == old.Spec.Type {
		return
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName && svc.Spec.ClusterIP == old.Spec.ClusterIP {
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", nil
		svc.Spec.IPFamilies, svc.Spec.IPFamilyPolicy = nil, nil
	}
	if !needsNodePorts(svc) && svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		for i := range svc.Spec.Ports {
			p := &svc.Spec.Ports[i]
			for _, op := range old.Spec.Ports {
				if op.Port == p.Port && op.NodePort == p.NodePort {
					p.NodePort = 0
				}
			}
		}
		if svc.Spec.ExternalTrafficPolicy == old.Spec.ExternalTrafficPolicy && len(svc.Spec.ExternalIPs) == 0 {
			svc.Spec.ExternalTrafficPolicy = ""
		}
	}
	if !needsHealthCheck(svc) && svc.Spec.HealthCheckNodePort == old.Spec.HealthCheckNodePort {
		svc.Spec.HealthCheckNodePort = 0
	}
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer && svc.Spec.AllocateLoadBalancerNodePorts != nil &&
		old.Spec.AllocateLoadBalancerNodePorts != nil && *svc.Spec.AllocateLoadBalancerNodePorts == *old.Spec.AllocateLoadBalancerNodePorts {
		svc.Spec.AllocateLoadBalancerNodePorts = nil
	}
}

func orTCP(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

func needsClusterIP(svc *corev1.Service) bool {
	return svc.Spec.Type != corev1.ServiceTypeExternalName && svc.Spec.ClusterIP != corev1.ClusterIPNone
}

func needsNodePorts(svc *corev1.Service) bool {
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort:
		return true
	case corev1.ServiceTypeLoadBalancer:
		return svc.Spec.AllocateLoadBalancerNodePorts == nil || *svc.Spec.AllocateLoadBalancerNodePorts
	}
	return false
}

func needsHealthCheck(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
}

func serviceIPs(svc *corev1.Service) []string {
	var out []string
	for _, ip := range append([]string{svc.Spec.ClusterIP}, svc.Spec.ClusterIPs...) {
		if ip != "" && ip != corev1.ClusterIPNone && !contains(out, ip) {
			out = append(out, ip)
		}
	}
	return out
}

func serviceNodePorts(svc *corev1.Service) []int32 {
	var out []int32
	for _, p := range svc.Spec.Ports {
		if p.NodePort != 0 && !containsPort(out, p.NodePort) {
			out = append(out, p.NodePort)
		}
	}
	if svc.Spec.HealthCheckNodePort != 0 && !containsPort(out, svc.Spec.HealthCheckNodePort) {
		out = append(out, svc.Spec.HealthCheckNodePort)
	}
	return out
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func containsPort(s []int32, v int32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// allocateService assigns and records the Service's ClusterIP and NodePorts and
// releases what it no longer uses. Conflicts are field errors, as in Kubernetes.
func (s *Server) allocateService(tx store.Tx, svc, old *corev1.Service) error {
	owner := svcResource.key(svc.Namespace, svc.Name)
	var errs field.ErrorList
	spec := field.NewPath("spec")

	// Clear what the new type does not use.
	if !needsNodePorts(svc) {
		for i := range svc.Spec.Ports {
			if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
				svc.Spec.Ports[i].NodePort = 0
			}
		}
	}
	if !needsHealthCheck(svc) {
		svc.Spec.HealthCheckNodePort = 0
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", nil
		svc.Spec.IPFamilies, svc.Spec.IPFamilyPolicy = nil, nil
	}

	if needsClusterIP(svc) {
		// One ClusterIP per family, in ipFamilies' order (validation made
		// them agree): the ones asked for are claimed, the rest allocated.
		if svc.Spec.ClusterIP != "" && len(svc.Spec.ClusterIPs) == 0 {
			svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
		}
		fams := svc.Spec.IPFamilies
		if len(fams) == 0 {
			fams = s.cfg.Validation.Families()[:1]
		}
		ips := make([]string, len(fams))
		copy(ips, svc.Spec.ClusterIPs)
		for i, fam := range fams {
			if ips[i] == "" {
				ip, err := s.allocateIP(tx, svc, fam)
				if err != nil {
					return err
				}
				ips[i] = ip
			} else if err := s.claimIP(tx, ips[i], svc); err != nil {
				// Kubernetes names the whole list, not its element.
				errs = append(errs, field.Invalid(spec.Child("clusterIPs"), svc.Spec.ClusterIPs,
					"failed to allocate IP "+ips[i]+": provided IP is already allocated"))
			}
		}
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = ips[0], ips
	}
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		if !needsNodePorts(svc) && p.NodePort == 0 {
			continue
		}
		path := spec.Child("ports").Index(i).Child("nodePort")
		if p.NodePort == 0 {
			// Two ports of one Service with the same number share a NodePort, as Kubernetes does for TCP+UDP.
			if np := sameNumberNodePort(svc, i); np != 0 {
				p.NodePort = np
				continue
			}
			np, err := s.allocatePort(tx, owner)
			if err != nil {
				return err
			}
			p.NodePort = np
		} else if err := claim(tx, allocPortPrefix+strconv.Itoa(int(p.NodePort)), owner); err != nil {
			errs = append(errs, field.Invalid(path, p.NodePort, fmt.Sprintf("provided port is already allocated")))
		}
	}
	if needsHealthCheck(svc) {
		if svc.Spec.HealthCheckNodePort == 0 {
			np, err := s.allocatePort(tx, owner)
			if err != nil {
				return err
			}
			svc.Spec.HealthCheckNodePort = np
		} else if err := claim(tx, allocPortPrefix+strconv.Itoa(int(svc.Spec.HealthCheckNodePort)), owner); err != nil {
			errs = append(errs, field.Invalid(spec.Child("healthCheckNodePort"), svc.Spec.HealthCheckNodePort, "provided port is already allocated"))
		}
	}
	if len(errs) > 0 {
		return apierrors.NewInvalid(svcResource.gvk().GroupKind(), svc.Name, errs)
	}
	if old != nil {
		for _, ip := range serviceIPs(old) {
			if !contains(serviceIPs(svc), ip) {
				releaseIP(tx, ip, old)
			}
		}
		for _, p := range serviceNodePorts(old) {
			if !containsPort(serviceNodePorts(svc), p) {
				release(tx, allocPortPrefix+strconv.Itoa(int(p)), owner)
			}
		}
	}
	return nil
}

func sameNumberNodePort(svc *corev1.Service, i int) int32 {
	for j, q := range svc.Spec.Ports {
		if j != i && q.Port == svc.Spec.Ports[i].Port && q.NodePort != 0 {
			return q.NodePort
		}
	}
	return 0
}

// claim records key as owned by owner, failing if someone else owns it.
func claim(tx store.Tx, key, owner string) error {
	if kv, ok := tx.Get(key); ok {
		if string(kv.Value) == owner {
			return nil
		}
		return fmt.Errorf("%s is owned by %s", key, kv.Value)
	}
	return tx.Put(key, []byte(owner))
}

// fixedClusterIPs are the addresses Kubernetes gives its own Services: the API at the
// first address of the range, cluster DNS at the tenth.
var fixedClusterIPs = map[string]int{"default/kubernetes": 1, "kube-system/kube-dns": 10}

// allocateIP picks a free ClusterIP. Like Kubernetes (KEP-3070) the lowest band of
// the range is kept for static addresses and dynamic ones come from above it first.
func (s *Server) allocateIP(tx store.Tx, svc *corev1.Service, fam corev1.IPFamily) (string, error) {
	cidr, ok := s.cfg.Validation.CIDRFor(fam)
	if !ok {
		// Validation refuses a family the cluster lacks; this is a bug.
		return "", apierrors.NewInternalError(fmt.Errorf("no service CIDR of family %s", fam))
	}
	if n, ok := fixedClusterIPs[svc.Namespace+"/"+svc.Name]; ok && cidr == s.cfg.Validation.ServiceCIDR.Masked() {
		ip := nthAddr(cidr.Addr(), n).String()
		if s.claimIP(tx, ip, svc) == nil {
			return ip, nil
		}
	}
	if ip, ok, err := s.allocateFrom(tx, svc, cidr, true); ok || err != nil {
		return ip, err
	}
	// The configured range is full: as kube-apiserver's allocator does, take
	// one from the other ServiceCIDRs of the family.
	for _, p := range readyServiceCIDRs(tx.List) {
		if p.Addr().Is4() != cidr.Addr().Is4() || p == cidr {
			continue
		}
		if ip, ok, err := s.allocateFrom(tx, svc, p, false); ok || err != nil {
			return ip, err
		}
	}
	return "", apierrors.NewInternalError(fmt.Errorf("failed to allocate a serviceIP: range is full"))
}

// nthAddr is the address n after base, of base's family.
func nthAddr(base netip.Addr, n int) netip.Addr {
	if base.Is4() {
		a := base.As4()
		v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
		v += uint32(n)
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	a := base.As16()
	carry := uint64(n)
	for i := 15; i >= 0 && carry > 0; i-- {
		v := uint64(a[i]) + carry
		a[i], carry = byte(v), v>>8
	}
	return netip.AddrFrom16(a)
}

// allocateFrom claims a free address of cidr for svc, at random, skipping the
// network and broadcast addresses; with band, addresses of the lowest band
// (kept for addresses users choose) only when the rest are taken.
func (s *Server) allocateFrom(tx store.Tx, svc *corev1.Service, cidr netip.Prefix, band bool) (string, bool, error) {
	base := cidr.Addr()
	size := 1 << 24 // a bigger range is only searched in its first 2^24
	if bits := base.BitLen() - cidr.Bits(); bits < 24 {
		size = 1 << bits
	}
	low := 0
	if band {
		low = min(max(16, size/16), 256)
		if low >= size-2 {
			low = 0
		}
	}
	try := func(lo, hi int) (string, bool, error) {
		if hi <= lo {
			return "", false, nil
		}
		start := lo + rand.IntN(hi-lo)
		for i := 0; i < hi-lo; i++ {
			n := lo + (start-lo+i)%(hi-lo)
			ip := nthAddr(base, n).String()
			if !ipTaken(tx, ip) {
				return ip, true, s.claimIP(tx, ip, svc)
			}
		}
		return "", false, nil
	}
	if ip, ok, err := try(max(low, 1), size-1); ok || err != nil {
		return ip, ok, err
	}
	return try(1, max(low, 1))
}

// allocatePort picks a free NodePort. Like Kubernetes (KEP-3668) the lowest band
// of the range (30000-30085 by default) is kept for ports users choose, so that
// an explicit `nodePort: 30007` does not collide with one handed out earlier;
// dynamic ports come from above it first.
func (s *Server) allocatePort(tx store.Tx, owner string) (int32, error) {
	lo, hi := int(s.cfg.Validation.NodePortMin), int(s.cfg.Validation.NodePortMax)
	size := hi - lo + 1
	band := min(max(16, size/32), 128)
	if band >= size {
		band = 0
	}
	try := func(from, to int) (int32, bool) { // [from, to)
		n := to - from
		if n <= 0 {
			return 0, false
		}
		start := rand.IntN(n)
		for i := 0; i < n; i++ {
			p := from + (start+i)%n
			key := allocPortPrefix + strconv.Itoa(p)
			if _, taken := tx.Get(key); !taken {
				tx.Put(key, []byte(owner))
				return int32(p), true
			}
		}
		return 0, false
	}
	if p, ok := try(lo+band, hi+1); ok {
		return p, nil
	}
	if p, ok := try(lo, lo+band); ok {
		return p, nil
	}
	return 0, apierrors.NewInternalError(fmt.Errorf("failed to allocate a nodePort: range is full"))
}

// repairIPAddresses makes the IPAddress objects agree with the ClusterIP
// allocations, as kube-apiserver's repair loop does: an allocation without
// its IPAddress (a store written before IPAddresses existed, or one deleted by
// hand) gets it back, and an IPAddress of ours whose allocation is gone is
// deleted. One transaction, so it is all or nothing.
func (s *Server) repairIPAddresses() error {
	_, err := s.store.Update(func(tx store.Tx) error {
		for _, kv := range tx.List(allocIPPrefix) {
			ip := kv.Key[len(allocIPPrefix):]
			if _, ok := tx.Get(ipAddressResource.key("", ip)); ok {
				continue
			}
			skv, ok := tx.Get(string(kv.Value))
			if !ok {
				continue
			}
			var svc corev1.Service
			if err := decodeStored(skv.Value, &svc); err != nil {
				return fmt.Errorf("decoding %s: %w", kv.Value, err)
			}
			if err := s.claimIP(tx, ip, &svc); err != nil {
				return fmt.Errorf("writing ipaddress %s of service %s/%s: %w", ip, svc.Namespace, svc.Name, err)
			}
		}
		for _, kv := range tx.List(ipAddressResource.prefix("")) {
			var ip networkingv1.IPAddress
			if decodeStored(kv.Value, &ip) != nil || ip.Labels[networkingv1.LabelManagedBy] != ipAllocatorName || ip.Spec.ParentRef == nil {
				continue
			}
			ref := ip.Spec.ParentRef
			if a, ok := tx.Get(allocIPPrefix + ip.Name); ok && string(a.Value) == svcResource.key(ref.Namespace, ref.Name) {
				continue
			}
			if err := tx.Delete(kv.Key); err != nil {
				return err
			}
		}
		return nil
	})
	return err
}
