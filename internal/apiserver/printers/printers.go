// Package printers turns API objects into the metav1.Table that kubectl asks
// the API server for (Accept: application/json;as=Table;v=v1;g=meta.k8s.io).
//
// It owns the column set of every resource minikit serves and keeps it equal
// to kube-apiserver's (Kubernetes pkg/printers/internalversion): the same
// column names, types, formats and priorities, and the same cell text, so
// `kubectl get` and `kubectl get -o wide` read exactly as they would against a
// real cluster. kubectl renders whatever the server sends; a column that drifts
// here is a column students see wrong.
//
// Like kube-apiserver, every row carries all cells, the priority-1 ("wide")
// ones included, and kubectl hides those unless asked for -o wide. For the
// same reason nothing is truncated (kube-apiserver prints with Wide set).
// Resources without a printer get kube-apiserver's default table: Name and
// Created At.
//
// Printing is pure: callers pass the current time, so AGE cells are
// deterministic, and input objects are never modified.
package printers

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
)

// printer knows how one resource is shown.
type printer struct {
	resource string // plural, lowercase: "services"
	kind     schema.GroupVersionKind
	columns  []metav1.TableColumnDefinition
	// cells returns false when obj is not this printer's type.
	cells func(obj runtime.Object, now time.Time) ([]interface{}, bool)
	// conditions, when set, returns the row conditions for obj (pods mark
	// finished rows Completed, which kubectl uses to dim or filter them).
	conditions func(obj runtime.Object) []metav1.TableRowCondition
}

// known lists every resource with its own columns. A slice, not a map, so
// Cells tries printers in a fixed order.
var known = []printer{
	{resource: "namespaces", kind: coreKind("Namespace"), columns: namespaceColumns, cells: typed(namespaceCells)},
	{resource: "nodes", kind: coreKind("Node"), columns: nodeColumns, cells: typed(nodeCells)},
	{resource: "pods", kind: coreKind("Pod"), columns: podColumns, cells: typed(podCells), conditions: podConditions},
	{resource: "services", kind: coreKind("Service"), columns: serviceColumns, cells: typed(serviceCells)},
	{resource: "endpoints", kind: coreKind("Endpoints"), columns: endpointsColumns, cells: typed(endpointsCells)},
	{resource: "endpointslices", kind: discoveryKind("EndpointSlice"), columns: endpointSliceColumns, cells: typed(endpointSliceCells)},
	{resource: "deployments", kind: appsKind("Deployment"), columns: deploymentColumns, cells: typed(deploymentCells)},
	{resource: "replicasets", kind: appsKind("ReplicaSet"), columns: replicaSetColumns, cells: typed(replicaSetCells)},
	{resource: "replicationcontrollers", kind: coreKind("ReplicationController"), columns: replicaSetColumns, cells: typed(replicationControllerCells)},
	{resource: "ingresses", kind: networkingKind("Ingress"), columns: ingressColumns, cells: typed(ingressCells)},
	{resource: "ingressclasses", kind: networkingKind("IngressClass"), columns: ingressClassColumns, cells: typed(ingressClassCells)},
	{resource: "networkpolicies", kind: networkingKind("NetworkPolicy"), columns: networkPolicyColumns, cells: typed(networkPolicyCells)},
	{resource: "servicecidrs", kind: networkingKind("ServiceCIDR"), columns: serviceCIDRColumns, cells: typed(serviceCIDRCells)},
	{resource: "ipaddresses", kind: networkingKind("IPAddress"), columns: ipAddressColumns, cells: typed(ipAddressCells)},
	{resource: "secrets", kind: coreKind("Secret"), columns: secretColumns, cells: typed(secretCells)},
	{resource: "configmaps", kind: coreKind("ConfigMap"), columns: configMapColumns, cells: typed(configMapCells)},
	{resource: "events", kind: coreKind("Event"), columns: eventColumns, cells: typed(eventCells)},
	{resource: "statefulsets", kind: appsKind("StatefulSet"), columns: statefulSetColumns, cells: typed(statefulSetCells)},
	{resource: "daemonsets", kind: appsKind("DaemonSet"), columns: daemonSetColumns, cells: typed(daemonSetCells)},
	{resource: "jobs", kind: batchKind("Job"), columns: jobColumns, cells: typed(jobCells)},
	{resource: "serviceaccounts", kind: coreKind("ServiceAccount"), columns: serviceAccountColumns, cells: typed(serviceAccountCells)},
	{resource: "leases", kind: coordinationKind("Lease"), columns: leaseColumns, cells: typed(leaseCells)},
	{resource: "rolebindings", kind: rbacKind("RoleBinding"), columns: roleBindingColumns, cells: typed(roleBindingCells)},
	{resource: "clusterrolebindings", kind: rbacKind("ClusterRoleBinding"), columns: clusterRoleBindingColumns, cells: typed(clusterRoleBindingCells)},
}

// typed adapts a cell function for one concrete type to the printer table.
func typed[T runtime.Object](f func(T, time.Time) []interface{}) func(runtime.Object, time.Time) ([]interface{}, bool) {
	return func(obj runtime.Object, now time.Time) ([]interface{}, bool) {
		t, ok := obj.(T)
		if !ok {
			return nil, false
		}
		return f(t, now), true
	}
}

func lookup(resource string) *printer {
	for i := range known {
		if known[i].resource == resource {
			return &known[i]
		}
	}
	return nil
}

// Columns returns the column definitions for a resource (plural lowercase,
// e.g. "services"), or nil when unknown.
func Columns(resource string) []metav1.TableColumnDefinition {
	p := lookup(resource)
	if p == nil {
		return nil
	}
	return slices.Clone(p.columns)
}

// Cells returns the row cells for one object, in Columns order. now is used
// for AGE. Objects of a type without a printer get the default cells (name
// and creation time); objects without metadata get nil.
func Cells(obj runtime.Object, now time.Time) []interface{} {
	for i := range known {
		if cells, ok := known[i].cells(obj, now); ok {
			return cells
		}
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil
	}
	return defaultCells(m)
}

// Table builds a complete metav1.Table (TypeMeta kind Table, apiVersion
// meta.k8s.io/v1) for objects of one resource.
//
// includeObject follows the `includeObject` query parameter: "None",
// "Object" or "Metadata" (the default when empty). With Metadata,
// row.Object holds a metav1.PartialObjectMetadata (apiVersion meta.k8s.io/v1)
// with the object's ObjectMeta; with Object, a copy of the full object with
// its apiVersion and kind set. Any other value is an error, as it is for
// kube-apiserver (which answers 400 Bad Request).
//
// Every object must be of the resource's type. The table's list metadata
// (resourceVersion, continue) is left for the caller to fill in.
func Table(resource string, objs []runtime.Object, includeObject string, now time.Time) (*metav1.Table, error) {
	policy, err := IncludeObject(includeObject)
	if err != nil {
		return nil, fmt.Errorf("building %s table: %w", resource, err)
	}

	p := lookup(resource)
	table := &metav1.Table{
		TypeMeta: metav1.TypeMeta{APIVersion: metav1.SchemeGroupVersion.String(), Kind: "Table"},
		// Rows is never nil so an empty list encodes as [] rather than null.
		Rows: make([]metav1.TableRow, 0, len(objs)),
	}
	if p != nil {
		table.ColumnDefinitions = slices.Clone(p.columns)
	} else {
		table.ColumnDefinitions = defaultColumns()
	}
	for _, obj := range objs {
		row, err := tableRow(p, obj, policy, now)
		if err != nil {
			return nil, fmt.Errorf("building %s table: %w", resource, err)
		}
		table.Rows = append(table.Rows, row)
	}
	return table, nil
}

func tableRow(p *printer, obj runtime.Object, policy metav1.IncludeObjectPolicy, now time.Time) (metav1.TableRow, error) {
	var row metav1.TableRow
	if obj == nil {
		return row, errors.New("nil object")
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return row, fmt.Errorf("reading metadata of %T: %w", obj, err)
	}

	kind := obj.GetObjectKind().GroupVersionKind()
	if p == nil {
		row.Cells = defaultCells(m)
	} else {
		cells, ok := p.cells(obj, now)
		if !ok {
			return row, fmt.Errorf("object %q is a %T, not a %s", objectName(m), obj, p.kind.Kind)
		}
		row.Cells = cells
		if p.conditions != nil {
			row.Conditions = p.conditions(obj)
		}
		if kind.Empty() {
			kind = p.kind
		}
	}

	switch policy {
	case metav1.IncludeMetadata:
		// Copied so the table shares no maps or slices with the caller's object.
		partial := meta.AsPartialObjectMetadata(m).DeepCopy()
		partial.SetGroupVersionKind(metav1.SchemeGroupVersion.WithKind("PartialObjectMetadata"))
		row.Object.Object = partial
	case metav1.IncludeObject:
		if kind.Empty() {
			return row, fmt.Errorf("including object %q: kind of %T is unknown", objectName(m), obj)
		}
		// Objects from a store usually have an empty TypeMeta, and kubectl
		// cannot decode an embedded object without apiVersion and kind.
		full := obj.DeepCopyObject()
		full.GetObjectKind().SetGroupVersionKind(kind)
		row.Object.Object = full
	}
	return row, nil
}

func objectName(m metav1.Object) string {
	if ns := m.GetNamespace(); ns != "" {
		return ns + "/" + m.GetName()
	}
	return m.GetName()
}

// defaultColumns are kube-apiserver's default table convertor columns, used
// for every resource without a printer of its own.
func defaultColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		nameColumn,
		{Name: "Created At", Type: "date", Description: objectMetaDoc["creationTimestamp"]},
	}
}

func defaultCells(m metav1.Object) []interface{} {
	return []interface{}{m.GetName(), m.GetCreationTimestamp().UTC().Format(time.RFC3339)}
}

var (
	objectMetaDoc = metav1.ObjectMeta{}.SwaggerDoc()
	nameColumn    = metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name", Description: objectMetaDoc["name"]}
	ageColumn     = column("Age", objectMetaDoc["creationTimestamp"])
)

// column is a string column always shown.
func column(name, description string) metav1.TableColumnDefinition {
	return metav1.TableColumnDefinition{Name: name, Type: "string", Description: description}
}

// wideColumn is a string column kubectl shows only with -o wide.
func wideColumn(name, description string) metav1.TableColumnDefinition {
	return metav1.TableColumnDefinition{Name: name, Type: "string", Priority: 1, Description: description}
}

// age is kubectl's AGE: a short human duration, <unknown> for a zero time.
func age(t metav1.Time, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

func microAge(t metav1.MicroTime, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

// orNone returns s, or <none> when it is empty.
func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func coreKind(kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Version: "v1", Kind: kind}
}

func appsKind(kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: kind}
}

func discoveryKind(kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: "discovery.k8s.io", Version: "v1", Kind: kind}
}

func networkingKind(kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: "networking.k8s.io", Version: "v1", Kind: kind}
}

// IncludeObject parses a Table request's includeObject parameter: empty is
// Metadata, as kube-apiserver defaults it.
func IncludeObject(v string) (metav1.IncludeObjectPolicy, error) {
	switch policy := metav1.IncludeObjectPolicy(v); policy {
	case "":
		return metav1.IncludeMetadata, nil
	case metav1.IncludeNone, metav1.IncludeMetadata, metav1.IncludeObject:
		return policy, nil
	}
	return "", fmt.Errorf("unrecognized includeObject value %q (want None, Metadata or Object)", v)
}
