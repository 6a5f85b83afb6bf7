// Package validation owns the defaulting and validation of API objects,
// done the way the Kubernetes API server does them, so that a manifest that
// kubectl would reject against a real cluster is rejected here with the same
// field path and the same wording.
//
// Everything here is a pure function of the object (and, on update, the
// stored object): no I/O, no clock, no allocation of cluster IPs or node
// ports. The API server calls Default, then Validate, and turns a non-empty
// field.ErrorList into a 422 Invalid Status; on update it first carries the
// server-owned values of the stored object over, which PrepareForUpdate does
// the way Kubernetes' registry strategies do. Errors are apimachinery field
// errors so they print exactly like Kubernetes', e.g.
//
//	spec.ports[0].nodePort: Invalid value: 8080: provided port is not in the valid range. The range of valid ports is 30000-32767
//
// The rules follow kubernetes pkg/apis/core/validation, pkg/apis/apps/validation,
// pkg/apis/networking/validation and pkg/apis/discovery/validation; the range
// checks that Kubernetes does while allocating (node ports inside the node
// port range, cluster IPs inside the service CIDR) are done here too, since
// minikit's allocator should never see an out-of-range request.
//
// Validate expects what the server guarantees before it is called: name
// generation has happened and namespaced objects carry their namespace.
package validation

//lint:file-ignore SA1019 core/v1 Endpoints is deprecated upstream but still served, so still validated

import (
	"net/netip"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Config carries cluster settings that validation and defaulting depend on.
// A zero field means the default from DefaultConfig.
type Config struct {
	ServiceCIDR netip.Prefix // default 10.96.0.0/12
	// SecondaryServiceCIDR, of the other IP family, makes the cluster
	// dual-stack; zero means single-stack.
	SecondaryServiceCIDR     netip.Prefix
	NodePortMin, NodePortMax int32 // default 30000, 32767
	// ExtraServiceCIDRs are the ranges of the other ServiceCIDRs in use
	// (Ready and not being deleted): a Service may ask for a ClusterIP in
	// them too, as with kube-apiserver's multi-range allocator.
	ExtraServiceCIDRs []netip.Prefix
}

// DefaultConfig returns the settings of a stock kubeadm cluster.
func DefaultConfig() Config {
	return Config{
		ServiceCIDR: netip.MustParsePrefix("10.96.0.0/12"),
		NodePortMin: 30000,
		NodePortMax: 32767,
	}
}

// withDefaults fills zero fields so callers may pass Config{}.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if !c.ServiceCIDR.IsValid() {
		c.ServiceCIDR = d.ServiceCIDR
	}
	c.ServiceCIDR = c.ServiceCIDR.Masked()
	c.SecondaryServiceCIDR = c.SecondaryServiceCIDR.Masked()
	if c.NodePortMin == 0 && c.NodePortMax == 0 {
		c.NodePortMin, c.NodePortMax = d.NodePortMin, d.NodePortMax
	}
	return c
}

// Validate validates a new object (old == nil) or an update (old != nil,
// same type). Unknown types, and an old object of another type, yield nil.
func Validate(obj, old runtime.Object, cfg Config) field.ErrorList {
	cfg = cfg.withDefaults()
	switch o := obj.(type) {
	case *corev1.Namespace:
		return validateNamespace(o, oldAs[*corev1.Namespace](old))
	case *corev1.Node:
		return validateNode(o, oldAs[*corev1.Node](old))
	case *corev1.Pod:
		return validatePod(o, oldAs[*corev1.Pod](old))
	case *corev1.Service:
		return validateService(o, oldAs[*corev1.Service](old), cfg)
	case *corev1.Endpoints:
		return validateEndpoints(o, oldAs[*corev1.Endpoints](old))
	case *corev1.Secret:
		return validateSecret(o, oldAs[*corev1.Secret](old))
	case *corev1.ConfigMap:
		return validateConfigMap(o, oldAs[*corev1.ConfigMap](old))
	case *corev1.Event:
		return validateEvent(o, oldAs[*corev1.Event](old))
	case *corev1.ServiceAccount:
		return validateServiceAccount(o, oldAs[*corev1.ServiceAccount](old))
	case *coordinationv1.Lease:
		return validateLease(o, oldAs[*coordinationv1.Lease](old))
	case *appsv1.Deployment:
		return validateDeployment(o, oldAs[*appsv1.Deployment](old))
	case *appsv1.ReplicaSet:
		return validateReplicaSet(o, oldAs[*appsv1.ReplicaSet](old))
	case *corev1.ReplicationController:
		return validateReplicationController(o, oldAs[*corev1.ReplicationController](old))
	case *discoveryv1.EndpointSlice:
		return validateEndpointSlice(o, oldAs[*discoveryv1.EndpointSlice](old))
	case *networkingv1.Ingress:
		return validateIngress(o, oldAs[*networkingv1.Ingress](old))
	case *networkingv1.IngressClass:
		return validateIngressClass(o, oldAs[*networkingv1.IngressClass](old))
	case *networkingv1.NetworkPolicy:
		return validateNetworkPolicy(o, oldAs[*networkingv1.NetworkPolicy](old))
	case *networkingv1.ServiceCIDR:
		return validateServiceCIDR(o, oldAs[*networkingv1.ServiceCIDR](old))
	case *networkingv1.IPAddress:
		return validateIPAddress(o, oldAs[*networkingv1.IPAddress](old))
	case *appsv1.StatefulSet:
		return validateStatefulSet(o, oldAs[*appsv1.StatefulSet](old))
	case *appsv1.DaemonSet:
		return validateDaemonSet(o, oldAs[*appsv1.DaemonSet](old))
	case *batchv1.Job:
		return validateJob(o, oldAs[*batchv1.Job](old))
	case *rbacv1.Role:
		return validateRole(o, oldAs[*rbacv1.Role](old))
	case *rbacv1.ClusterRole:
		return validateClusterRole(o, oldAs[*rbacv1.ClusterRole](old))
	case *rbacv1.RoleBinding:
		return validateRoleBinding(o, oldAs[*rbacv1.RoleBinding](old))
	case *rbacv1.ClusterRoleBinding:
		return validateClusterRoleBinding(o, oldAs[*rbacv1.ClusterRoleBinding](old))
	}
	return nil
}

// Warnings are the warnings Kubernetes returns with an accepted write of
// obj (its registry strategies' WarningsOnCreate/WarningsOnUpdate), for
// kubectl to print as "Warning: ...". Only types with warnings are listed.
func Warnings(obj runtime.Object) []string {
	switch o := obj.(type) {
	case *networkingv1.NetworkPolicy:
		return networkPolicyWarnings(o)
	}
	return nil
}

// oldAs returns old as a T, or the zero T (a nil pointer) when old is nil or
// of another type; a nil old means "create".
func oldAs[T runtime.Object](old runtime.Object) T {
	t, _ := old.(T)
	return t
}

var metaPath = field.NewPath("metadata")

// metaOf returns the metadata of a stored object, or nil on create (a nil
// pointer of the object's type).
func metaOf[T interface {
	comparable
	metav1.ObjectMetaAccessor
}](old T) *metav1.ObjectMeta {
	var none T
	if old == none {
		return nil
	}
	return old.GetObjectMeta().(*metav1.ObjectMeta)
}

// Name rules per kind, as in Kubernetes: most names are DNS-1123
// subdomains; namespaces and services are DNS-1123 labels because they
// become single DNS labels (<svc>.<ns>.svc.cluster.local). Service names
// follow RelaxedServiceNameValidation (a label, not a DNS-1035 label), the
// behaviour of current Kubernetes.
var (
	nameIsSubdomain = apimachineryvalidation.NameIsDNSSubdomain
	nameIsLabel     = apimachineryvalidation.NameIsDNSLabel
)

// validateMeta checks metadata on create, or on update the create rules plus
// immutability of identity fields.
func validateMeta(meta, old *metav1.ObjectMeta, namespaced bool, nameFn apimachineryvalidation.ValidateNameFunc) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(meta, namespaced, nameFn, metaPath)
	if old != nil {
		allErrs = append(allErrs, validateMetaUpdate(meta, old)...)
	}
	return allErrs
}

// validateMetaUpdate is apimachinery's ValidateObjectMetaUpdate without its
// resourceVersion check: an unconditional update carries no resourceVersion
// and the server, like Kubernetes' store, fills it from the stored object.
func validateMetaUpdate(meta, old *metav1.ObjectMeta) field.ErrorList {
	var allErrs field.ErrorList
	if old.DeletionTimestamp != nil {
		allErrs = append(allErrs, apimachineryvalidation.ValidateNoNewFinalizers(meta.Finalizers, old.Finalizers, metaPath.Child("finalizers"))...)
	}
	if meta.Generation < old.Generation {
		allErrs = append(allErrs, field.Invalid(metaPath.Child("generation"), meta.Generation, "must not be decremented"))
	}
	allErrs = append(allErrs, immutable(meta.Name, old.Name, metaPath.Child("name"))...)
	allErrs = append(allErrs, immutable(meta.Namespace, old.Namespace, metaPath.Child("namespace"))...)
	allErrs = append(allErrs, immutable(meta.UID, old.UID, metaPath.Child("uid"))...)
	allErrs = append(allErrs, immutable(meta.CreationTimestamp, old.CreationTimestamp, metaPath.Child("creationTimestamp"))...)
	return allErrs
}

// immutable reports "field is immutable" when the values differ semantically.
func immutable(newVal, oldVal any, fldPath *field.Path) field.ErrorList {
	if apiequality.Semantic.DeepEqual(newVal, oldVal) {
		return nil
	}
	return field.ErrorList{field.Invalid(fldPath, newVal, apimachineryvalidation.FieldImmutableErrorMsg)}
}

// Small wrappers turning apimachinery's []string checks into field errors.

func dns1123Label(value string, fldPath *field.Path) field.ErrorList {
	return msgs(fldPath, value, validation.IsDNS1123Label(value))
}

func dns1123Subdomain(value string, fldPath *field.Path) field.ErrorList {
	return msgs(fldPath, value, validation.IsDNS1123Subdomain(value))
}

func qualifiedName(value string, fldPath *field.Path) field.ErrorList {
	return msgs(fldPath, value, content.IsLabelKey(value))
}

func msgs(fldPath *field.Path, value any, details []string) field.ErrorList {
	var allErrs field.ErrorList
	for _, d := range details {
		allErrs = append(allErrs, field.Invalid(fldPath, value, d))
	}
	return allErrs
}

func nonNegative(value int64, fldPath *field.Path) field.ErrorList {
	return apimachineryvalidation.ValidateNonnegativeField(value, fldPath)
}

func portNum(port int32, fldPath *field.Path) field.ErrorList {
	return msgs(fldPath, port, validation.IsValidPortNum(int(port)))
}
