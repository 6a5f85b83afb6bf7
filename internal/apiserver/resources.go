package apiserver

import (
	"fmt"
	"reflect"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	extv1beta1 "k8s.io/api/extensions/v1beta1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// resource describes one REST resource: where it lives in the URL space and the
// store, its Go type, and the hooks that give it Kubernetes semantics.
type resource struct {
	gv         schema.GroupVersion
	name       string // plural, as in the URL
	singular   string
	kind       string
	namespaced bool
	shortNames []string
	categories []string
	newObj     func() runtime.Object
	status     bool // has a status subresource (spec and status written separately)
	scale      bool // has the autoscaling/v1 scale subresource
	generation bool // metadata.generation bumps when spec changes
	// fields returns the fields this resource supports in fieldSelector, beyond
	// metadata.name and metadata.namespace.
	fields func(obj runtime.Object) fields.Set
	// ext, when set, prepares and validates writes with an upstream registry
	// strategy (CRDs and custom resources) instead of package validation.
	ext extStrategy
	// cr is set for the served versions of custom resources (customresource.go).
	cr *crVersion
}

func (r *resource) gvk() schema.GroupVersionKind { return r.gv.WithKind(r.kind) }

func (r *resource) gr() schema.GroupResource {
	return schema.GroupResource{Group: r.gv.Group, Resource: r.name}
}

// group is the group name used in store keys ("core" for the legacy group).
func (r *resource) storeGroup() string {
	if r.gv.Group == "" {
		return "core"
	}
	return r.gv.Group
}

// prefix is the store key prefix for the resource, optionally inside a namespace.
func (r *resource) prefix(ns string) string {
	p := "/registry/" + r.storeGroup() + "/" + r.name + "/"
	if r.namespaced && ns != "" {
		p += ns + "/"
	}
	return p
}

func (r *resource) key(ns, name string) string {
	if r.namespaced {
		return r.prefix(ns) + name
	}
	return r.prefix("") + name
}

// resources is every kind minikit serves, in discovery order.
var resources = []*resource{
	{gv: corev1.SchemeGroupVersion, name: "namespaces", singular: "namespace", kind: "Namespace", shortNames: []string{"ns"},
		newObj: func() runtime.Object { return &corev1.Namespace{} }, status: true,
		fields: func(o runtime.Object) fields.Set {
			return fields.Set{"status.phase": string(o.(*corev1.Namespace).Status.Phase)}
		}},
	{gv: corev1.SchemeGroupVersion, name: "nodes", singular: "node", kind: "Node", shortNames: []string{"no"},
		newObj: func() runtime.Object { return &corev1.Node{} }, status: true,
		fields: func(o runtime.Object) fields.Set {
			return fields.Set{"spec.unschedulable": fmt.Sprint(o.(*corev1.Node).Spec.Unschedulable)}
		}},
	{gv: corev1.SchemeGroupVersion, name: "pods", singular: "pod", kind: "Pod", namespaced: true, shortNames: []string{"po"},
		categories: []string{"all"}, newObj: func() runtime.Object { return &corev1.Pod{} }, status: true,
		fields: func(o runtime.Object) fields.Set {
			p := o.(*corev1.Pod)
			return fields.Set{
				"spec.nodeName":            p.Spec.NodeName,
				"spec.restartPolicy":       string(p.Spec.RestartPolicy),
				"spec.schedulerName":       p.Spec.SchedulerName,
				"spec.serviceAccountName":  p.Spec.ServiceAccountName,
				"spec.hostNetwork":         fmt.Sprint(p.Spec.HostNetwork),
				"status.phase":             string(p.Status.Phase),
				"status.podIP":             p.Status.PodIP,
				"status.nominatedNodeName": p.Status.NominatedNodeName,
			}
		}},
	{gv: corev1.SchemeGroupVersion, name: "services", singular: "service", kind: "Service", namespaced: true, shortNames: []string{"svc"},
		categories: []string{"all"}, newObj: func() runtime.Object { return &corev1.Service{} }, status: true,
		fields: func(o runtime.Object) fields.Set {
			s := o.(*corev1.Service)
			return fields.Set{"spec.clusterIP": s.Spec.ClusterIP, "spec.type": string(s.Spec.Type)}
		}},
	{gv: corev1.SchemeGroupVersion, name: "endpoints", singular: "endpoints", kind: "Endpoints", namespaced: true, shortNames: []string{"ep"},
		newObj: func() runtime.Object { return &corev1.Endpoints{} }},
	{gv: corev1.SchemeGroupVersion, name: "secrets", singular: "secret", kind: "Secret", namespaced: true,
		newObj: func() runtime.Object { return &corev1.Secret{} },
		fields: func(o runtime.Object) fields.Set { return fields.Set{"type": string(o.(*corev1.Secret).Type)} }},
	{gv: corev1.SchemeGroupVersion, name: "configmaps", singular: "configmap", kind: "ConfigMap", namespaced: true, shortNames: []string{"cm"},
		newObj: func() runtime.Object { return &corev1.ConfigMap{} }},
	{gv: corev1.SchemeGroupVersion, name: "events", singular: "event", kind: "Event", namespaced: true, shortNames: []string{"ev"},
		newObj: func() runtime.Object { return &corev1.Event{} },
		fields: func(o runtime.Object) fields.Set {
			e := o.(*corev1.Event)
			return fields.Set{
				"involvedObject.kind":            e.InvolvedObject.Kind,
				"involvedObject.namespace":       e.InvolvedObject.Namespace,
				"involvedObject.name":            e.InvolvedObject.Name,
				"involvedObject.uid":             string(e.InvolvedObject.UID),
				"involvedObject.apiVersion":      e.InvolvedObject.APIVersion,
				"involvedObject.resourceVersion": e.InvolvedObject.ResourceVersion,
				"involvedObject.fieldPath":       e.InvolvedObject.FieldPath,
				"reason":                         e.Reason,
				"reportingComponent":             e.ReportingController,
				"source":                         e.Source.Component,
				"type":                           e.Type,
			}
		}},
	{gv: corev1.SchemeGroupVersion, name: "serviceaccounts", singular: "serviceaccount", kind: "ServiceAccount", namespaced: true, shortNames: []string{"sa"},
		newObj: func() runtime.Object { return &corev1.ServiceAccount{} }},
	{gv: appsv1.SchemeGroupVersion, name: "deployments", singular: "deployment", kind: "Deployment", namespaced: true, shortNames: []string{"deploy"},
		categories: []string{"all"}, newObj: func() runtime.Object { return &appsv1.Deployment{} }, status: true, scale: true, generation: true},
	{gv: appsv1.SchemeGroupVersion, name: "replicasets", singular: "replicaset", kind: "ReplicaSet", namespaced: true, shortNames: []string{"rs"},
		categories: []string{"all"}, newObj: func() runtime.Object { return &appsv1.ReplicaSet{} }, status: true, scale: true, generation: true,
		fields: func(o runtime.Object) fields.Set {
			return fields.Set{"status.replicas": fmt.Sprint(o.(*appsv1.ReplicaSet).Status.Replicas)}
		}},
	{gv: corev1.SchemeGroupVersion, name: "replicationcontrollers", singular: "replicationcontroller", kind: "ReplicationController", namespaced: true, shortNames: []string{"rc"},
		categories: []string{"all"}, newObj: func() runtime.Object { return &corev1.ReplicationController{} }, status: true, scale: true, generation: true,
		fields: func(o runtime.Object) fields.Set {
			return fields.Set{"status.replicas": fmt.Sprint(o.(*corev1.ReplicationController).Status.Replicas)}
		}},
	{gv: discoveryv1.SchemeGroupVersion, name: "endpointslices", singular: "endpointslice", kind: "EndpointSlice", namespaced: true,
		newObj: func() runtime.Object { return &discoveryv1.EndpointSlice{} }},
	{gv: networkingv1.SchemeGroupVersion, name: "ingresses", singular: "ingress", kind: "Ingress", namespaced: true, shortNames: []string{"ing"},
		newObj: func() runtime.Object { return &networkingv1.Ingress{} }, status: true, generation: true},
	// NetworkPolicies are enforced by every node agent's netpol package (the
	// iptables chains it renders); the API only stores and validates them.
	{gv: networkingv1.SchemeGroupVersion, name: "networkpolicies", singular: "networkpolicy", kind: "NetworkPolicy", namespaced: true, shortNames: []string{"netpol"},
		newObj: func() runtime.Object { return &networkingv1.NetworkPolicy{} }, generation: true},
	{gv: networkingv1.SchemeGroupVersion, name: "ingressclasses", singular: "ingressclass", kind: "IngressClass",
		newObj: func() runtime.Object { return &networkingv1.IngressClass{} }},
	// ServiceCIDRs are the ranges ClusterIPs come from (the "kubernetes" one is
	// the configured service CIDR, bootstrap.go); IPAddresses record each
	// allocated ClusterIP (alloc.go), as kube-apiserver's MultiCIDRServiceAllocator does.
	{gv: networkingv1.SchemeGroupVersion, name: "servicecidrs", singular: "servicecidr", kind: "ServiceCIDR",
		newObj: func() runtime.Object { return &networkingv1.ServiceCIDR{} }, status: true},
	{gv: networkingv1.SchemeGroupVersion, name: "ipaddresses", singular: "ipaddress", kind: "IPAddress", shortNames: []string{"ip"},
		newObj: func() runtime.Object { return &networkingv1.IPAddress{} }},
	{gv: coordinationv1.SchemeGroupVersion, name: "leases", singular: "lease", kind: "Lease", namespaced: true,
		newObj: func() runtime.Object { return &coordinationv1.Lease{} }},
	// Served by conversion to networking.k8s.io/v1 (ingress_v1beta1.go); listed
	// here for discovery only.
	{gv: extv1beta1.SchemeGroupVersion, name: "ingresses", singular: "ingress", kind: "Ingress", namespaced: true, shortNames: []string{"ing"},
		newObj: func() runtime.Object { return &extv1beta1.Ingress{} }, status: true, generation: true},
	{gv: appsv1.SchemeGroupVersion, name: "statefulsets", singular: "statefulset", kind: "StatefulSet", namespaced: true, shortNames: []string{"sts"},
		categories: []string{"all"}, newObj: func() runtime.Object { return &appsv1.StatefulSet{} }, status: true, scale: true, generation: true},
	{gv: appsv1.SchemeGroupVersion, name: "daemonsets", singular: "daemonset", kind: "DaemonSet", namespaced: true, shortNames: []string{"ds"},
		categories: []string{"all"}, newObj: func() runtime.Object { return &appsv1.DaemonSet{} }, status: true, generation: true},
	{gv: batchv1.SchemeGroupVersion, name: "jobs", singular: "job", kind: "Job", namespaced: true,
		categories: []string{"all"}, newObj: func() runtime.Object { return &batchv1.Job{} }, status: true, generation: true},
	// RBAC (rbac.go): stored and validated like any kind; the authorizer
	// reads them for ServiceAccount tokens, and ClusterRoles with an
	// aggregationRule get their rules from the ClusterRoles they select.
	{gv: rbacv1.SchemeGroupVersion, name: "clusterrolebindings", singular: "clusterrolebinding", kind: "ClusterRoleBinding",
		newObj: func() runtime.Object { return &rbacv1.ClusterRoleBinding{} }},
	{gv: rbacv1.SchemeGroupVersion, name: "clusterroles", singular: "clusterrole", kind: "ClusterRole",
		newObj: func() runtime.Object { return &rbacv1.ClusterRole{} }},
	{gv: rbacv1.SchemeGroupVersion, name: "rolebindings", singular: "rolebinding", kind: "RoleBinding", namespaced: true,
		newObj: func() runtime.Object { return &rbacv1.RoleBinding{} }},
	{gv: rbacv1.SchemeGroupVersion, name: "roles", singular: "role", kind: "Role", namespaced: true,
		newObj: func() runtime.Object { return &rbacv1.Role{} }},
}

// scaleGVK is the kind of the scale subresource.
var scaleGVK = autoscalingv1.SchemeGroupVersion.WithKind("Scale")

// lookup finds a built-in resource by group, version and plural name.
func lookup(group, version, name string) *resource {
	for _, r := range resources {
		if r.gv.Group == group && r.gv.Version == version && r.name == name {
			return r
		}
	}
	return nil
}

// objectFields is the field set used to evaluate a fieldSelector on obj.
func (r *resource) objectFields(obj runtime.Object) fields.Set {
	m, _ := meta.Accessor(obj)
	set := fields.Set{"metadata.name": m.GetName()}
	if r.namespaced {
		set["metadata.namespace"] = m.GetNamespace()
	}
	if r.cr != nil {
		return r.cr.objectFields(obj)
	}
	if r.fields != nil {
		for k, v := range r.fields(obj) {
			set[k] = v
		}
	}
	return set
}

// checkFieldSelector rejects selectors on fields the resource does not index, with
// the message Kubernetes gives.
func (r *resource) checkFieldSelector(sel fields.Selector) error {
	known := r.objectFields(r.newObj())
	if r.cr != nil {
		known = r.cr.knownFields()
	}
	for _, req := range sel.Requirements() {
		if _, ok := known[req.Field]; !ok {
			return fmt.Errorf("%q is not a known field selector: only %q", req.Field, knownFields(known))
		}
	}
	return nil
}

func knownFields(set fields.Set) string {
	var keys []string
	for k := range set {
		keys = append(keys, k)
	}
	return strings.Join(sortStrings(keys), ", ")
}

// substruct returns the addressable struct field name of obj (Spec, Status), or an invalid Value.
func substruct(obj runtime.Object, name string) reflect.Value {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer {
		return reflect.Value{}
	}
	return v.Elem().FieldByName(name)
}

// copyField sets field name of dst from src (both the same type).
func copyField(dst, src runtime.Object, name string) {
	d, s := substruct(dst, name), substruct(src, name)
	if d.IsValid() && s.IsValid() && d.CanSet() {
		d.Set(s)
	}
}

// resetField sets field name of obj to its zero value.
func resetField(obj runtime.Object, name string) {
	if f := substruct(obj, name); f.IsValid() && f.CanSet() {
		f.Set(reflect.Zero(f.Type()))
	}
}

func metaOf(obj runtime.Object) metav1.Object {
	m, err := meta.Accessor(obj)
	if err != nil {
		panic(fmt.Sprintf("object %T has no metadata: %v", obj, err))
	}
	return m
}
