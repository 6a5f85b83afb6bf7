package apiserver

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/minikit/minikit/internal/apiserver/validation"
	"github.com/minikit/minikit/internal/store"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var errConflict = errors.New("the object has been modified; please apply your changes to the latest version and try again")

// builtinNamespaces exist from the first start, as in every Kubernetes cluster.
var builtinNamespaces = []string{"default", "kube-system", "kube-public", "kube-node-lease"}

// bootstrap creates the built-in namespaces, the default/kubernetes Service and
// its Endpoints, the "kubernetes" ServiceCIDR and the default RBAC policy, and resumes the finalization of namespaces left Terminating by a crash.
func (s *Server) bootstrap() error {
	for _, ns := range builtinNamespaces {
		_, err := s.Create(nsResource, "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating namespace %q: %w", ns, err)
		}
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default",
			Labels: map[string]string{"component": "apiserver", "provider": "kubernetes"}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
			Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(s.cfg.Port),
		}}},
	}
	if _, err := s.Create(svcResource, "default", svc); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating service default/kubernetes: %w", err)
	}
	if err := s.ensureDefaultServiceCIDR(); err != nil {
		return err
	}
	if err := s.repairIPAddresses(); err != nil {
		return err
	}
	if err := s.ensureDefaultRBAC(); err != nil {
		return err
	}
	if s.publishesEndpoints() {
		// This server's lease and the endpoints it makes (endpoints.go); from
		// here on RunEndpointReconciler keeps both current.
		if err := s.syncAPIEndpoints(false); err != nil {
			return err
		}
	}
	return s.resumeNamespaceDeletions(0)
}

// defaultServiceCIDRName is the ServiceCIDR kube-apiserver creates for its
// --service-cluster-ip-range.
const defaultServiceCIDRName = "kubernetes"

var serviceCIDRResource = lookup(networkingv1.GroupName, "v1", "servicecidrs")

// ensureDefaultServiceCIDR creates the "kubernetes" ServiceCIDR for the
// configured service CIDR and marks it Ready, as kube-apiserver's default
// ServiceCIDR controller does: only when the condition is missing or Unknown,
// and never on a range that differs from the configuration (someone changed
// it: that needs an administrator, not an overwrite).
func (s *Server) ensureDefaultServiceCIDR() error {
	cidrs := []string{s.cfg.Validation.ServiceCIDR.Masked().String()}
	if p := s.cfg.Validation.SecondaryServiceCIDR; p.IsValid() {
		cidrs = append(cidrs, p.Masked().String())
	}
	sc := &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: defaultServiceCIDRName},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: cidrs},
	}
	obj, err := s.Create(serviceCIDRResource, "", sc)
	if apierrors.IsAlreadyExists(err) {
		obj, err = s.get(serviceCIDRResource, "", defaultServiceCIDRName)
	}
	if err != nil {
		return fmt.Errorf("creating servicecidr %s: %w", defaultServiceCIDRName, err)
	}
	cur := obj.(*networkingv1.ServiceCIDR)
	if cur.DeletionTimestamp == nil && len(cur.Spec.CIDRs) == 1 && len(cidrs) == 2 && cur.Spec.CIDRs[0] == cidrs[0] {
		// A single-stack cluster restarted dual-stack: kube-apiserver
		// upgrades its default ServiceCIDR the same way.
		obj, err = s.Update(serviceCIDRResource, "", defaultServiceCIDRName, "", func(o runtime.Object) (runtime.Object, error) {
			sc := o.(*networkingv1.ServiceCIDR)
			sc.Spec.CIDRs = cidrs
			return sc, nil
		})
		if err != nil {
			return fmt.Errorf("upgrading servicecidr %s to dual-stack: %w", defaultServiceCIDRName, err)
		}
		cur = obj.(*networkingv1.ServiceCIDR)
	}
	if cur.DeletionTimestamp != nil || !slices.Equal(cur.Spec.CIDRs, cidrs) {
		if cur.DeletionTimestamp == nil {
			s.log.Warn("the default ServiceCIDR does not match the configured service CIDRs", "servicecidr", cur.Spec.CIDRs, "configured", cidrs)
		}
		return nil
	}
	if c := apimeta.FindStatusCondition(cur.Status.Conditions, networkingv1.ServiceCIDRConditionReady); c != nil && c.Status != metav1.ConditionUnknown {
		return nil
	}
	_, err = s.Update(serviceCIDRResource, "", defaultServiceCIDRName, "status", func(o runtime.Object) (runtime.Object, error) {
		sc := o.(*networkingv1.ServiceCIDR)
		apimeta.SetStatusCondition(&sc.Status.Conditions, metav1.Condition{
			Type:               networkingv1.ServiceCIDRConditionReady,
			Status:             metav1.ConditionTrue,
			Message:            "Kubernetes default Service CIDR is ready",
			LastTransitionTime: metav1.NewTime(s.now().Truncate(time.Second)),
		})
		sc.ResourceVersion = ""
		return sc, nil
	})
	if err != nil {
		return fmt.Errorf("marking servicecidr %s ready: %w", defaultServiceCIDRName, err)
	}
	return nil
}

// validationFor is the validation config for writing obj: a Service asking
// for a ClusterIP outside the configured range may have one from another
// ServiceCIDR. list reads the store (or the write's transaction).
func (s *Server) validationFor(obj runtime.Object, list func(prefix string) []store.KV) validation.Config {
	cfg := s.cfg.Validation
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return cfg
	}
	for _, c := range append([]string{svc.Spec.ClusterIP}, svc.Spec.ClusterIPs...) {
		ip, err := netip.ParseAddr(c)
		if err == nil && !cfg.ServiceCIDR.Contains(ip) && !cfg.SecondaryServiceCIDR.Contains(ip) {
			cfg.ExtraServiceCIDRs = readyServiceCIDRs(list)
			return cfg
		}
	}
	return cfg
}

// readyServiceCIDRs are the ranges of the ServiceCIDRs ClusterIPs may come
// from: those Ready (or without a Ready condition yet, as kube-apiserver
// assumes) and not being deleted.
func readyServiceCIDRs(list func(prefix string) []store.KV) []netip.Prefix {
	var out []netip.Prefix
	for _, kv := range list(serviceCIDRResource.prefix("")) {
		var sc networkingv1.ServiceCIDR
		if decodeStored(kv.Value, &sc) != nil || sc.DeletionTimestamp != nil {
			continue
		}
		if c := apimeta.FindStatusCondition(sc.Status.Conditions, networkingv1.ServiceCIDRConditionReady); c != nil && c.Status != metav1.ConditionTrue {
			continue
		}
		for _, c := range sc.Spec.CIDRs {
			if p, err := netip.ParsePrefix(c); err == nil {
				out = append(out, p.Masked())
			}
		}
	}
	return out
}
