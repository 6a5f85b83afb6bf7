package printers

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var namespaceColumns = []metav1.TableColumnDefinition{
	nameColumn,
	column("Status", "The status of the namespace"),
	ageColumn,
}

func namespaceCells(ns *corev1.Namespace, now time.Time) []interface{} {
	return []interface{}{ns.Name, string(ns.Status.Phase), age(ns.CreationTimestamp, now)}
}

var nodeColumns = []metav1.TableColumnDefinition{
	nameColumn,
	column("Status", "The status of the node"),
	column("Roles", "The roles of the node"),
	ageColumn,
	column("Version", corev1.NodeSystemInfo{}.SwaggerDoc()["kubeletVersion"]),
	wideColumn("Internal-IP", corev1.NodeStatus{}.SwaggerDoc()["addresses"]),
	wideColumn("External-IP", corev1.NodeStatus{}.SwaggerDoc()["addresses"]),
	wideColumn("OS-Image", corev1.NodeSystemInfo{}.SwaggerDoc()["osImage"]),
	wideColumn("Kernel-Version", corev1.NodeSystemInfo{}.SwaggerDoc()["kernelVersion"]),
	wideColumn("Container-Runtime", corev1.NodeSystemInfo{}.SwaggerDoc()["containerRuntimeVersion"]),
}

const (
	nodeRoleLabelPrefix = "node-role.kubernetes.io/" // node-role.kubernetes.io/<role>=""
	nodeRoleLabel       = "kubernetes.io/role"       // kubernetes.io/role=<role>
)

func nodeCells(node *corev1.Node, now time.Time) []interface{} {
	status := "Unknown" // no Ready condition reported yet
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			status = "NotReady"
			if c.Status == corev1.ConditionTrue {
				status = "Ready"
			}
		}
	}
	if node.Spec.Unschedulable {
		status += ",SchedulingDisabled"
	}

	info := node.Status.NodeInfo
	return []interface{}{
		node.Name,
		status,
		orNone(strings.Join(nodeRoles(node), ",")),
		age(node.CreationTimestamp, now),
		info.KubeletVersion,
		nodeAddress(node, corev1.NodeInternalIP),
		nodeAddress(node, corev1.NodeExternalIP),
		orUnknown(info.OSImage),
		orUnknown(info.KernelVersion),
		orUnknown(info.ContainerRuntimeVersion),
	}
}

// nodeRoles returns the node's roles, sorted, from both role label styles.
func nodeRoles(node *corev1.Node) []string {
	var roles []string
	for k, v := range node.Labels {
		switch {
		case strings.HasPrefix(k, nodeRoleLabelPrefix):
			if role := strings.TrimPrefix(k, nodeRoleLabelPrefix); role != "" {
				roles = append(roles, role)
			}
		case k == nodeRoleLabel && v != "":
			roles = append(roles, v)
		}
	}
	return sortedUnique(roles)
}

// nodeAddress is the node's first address of type t, or <none>.
func nodeAddress(node *corev1.Node, t corev1.NodeAddressType) string {
	for _, a := range node.Status.Addresses {
		if a.Type == t {
			return a.Address
		}
	}
	return "<none>"
}

func orUnknown(s string) string {
	if s == "" {
		return "<unknown>"
	}
	return s
}

var deploymentColumns = []metav1.TableColumnDefinition{
	nameColumn,
	column("Ready", "Number of the pod with ready state"),
	column("Up-to-date", appsv1.DeploymentStatus{}.SwaggerDoc()["updatedReplicas"]),
	column("Available", appsv1.DeploymentStatus{}.SwaggerDoc()["availableReplicas"]),
	ageColumn,
	wideColumn("Containers", "Names of each container in the template."),
	wideColumn("Images", "Images referenced by each container in the template."),
	wideColumn("Selector", appsv1.DeploymentSpec{}.SwaggerDoc()["selector"]),
}

func deploymentCells(d *appsv1.Deployment, now time.Time) []interface{} {
	desired := int32(1) // the API default for an unset spec.replicas
	if d.Spec.Replicas != nil {
		desired = *d.Spec.Replicas
	}
	selector := "<invalid>"
	if s, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err == nil {
		selector = s.String()
	}
	names, images := containerCells(d.Spec.Template.Spec.Containers)
	return []interface{}{
		d.Name,
		fmt.Sprintf("%d/%d", d.Status.ReadyReplicas, desired),
		int64(d.Status.UpdatedReplicas),
		int64(d.Status.AvailableReplicas),
		age(d.CreationTimestamp, now),
		names,
		images,
		selector,
	}
}

// containerCells lists container names and images, comma separated.
func containerCells(containers []corev1.Container) (names, images string) {
	n := make([]string, len(containers))
	im := make([]string, len(containers))
	for i, c := range containers {
		n[i], im[i] = c.Name, c.Image
	}
	return strings.Join(n, ","), strings.Join(im, ",")
}

var secretColumns = []metav1.TableColumnDefinition{
	nameColumn,
	column("Type", corev1.Secret{}.SwaggerDoc()["type"]),
	column("Data", corev1.Secret{}.SwaggerDoc()["data"]),
	ageColumn,
}

func secretCells(s *corev1.Secret, now time.Time) []interface{} {
	// kube-apiserver merges stringData into data on write; count the keys of
	// both in case the object was stored as submitted.
	keys := make([]string, 0, len(s.Data)+len(s.StringData))
	for k := range s.Data {
		keys = append(keys, k)
	}
	for k := range s.StringData {
		keys = append(keys, k)
	}
	return []interface{}{s.Name, string(s.Type), int64(len(sortedUnique(keys))), age(s.CreationTimestamp, now)}
}

var configMapColumns = []metav1.TableColumnDefinition{
	nameColumn,
	column("Data", corev1.ConfigMap{}.SwaggerDoc()["data"]),
	ageColumn,
}

func configMapCells(cm *corev1.ConfigMap, now time.Time) []interface{} {
	return []interface{}{cm.Name, int64(len(cm.Data) + len(cm.BinaryData)), age(cm.CreationTimestamp, now)}
}

var eventColumns = []metav1.TableColumnDefinition{
	column("Last Seen", corev1.Event{}.SwaggerDoc()["lastTimestamp"]),
	column("Type", corev1.Event{}.SwaggerDoc()["type"]),
	column("Reason", corev1.Event{}.SwaggerDoc()["reason"]),
	column("Object", corev1.Event{}.SwaggerDoc()["involvedObject"]),
	wideColumn("Subobject", corev1.ObjectReference{}.SwaggerDoc()["fieldPath"]),
	wideColumn("Source", corev1.Event{}.SwaggerDoc()["source"]),
	column("Message", corev1.Event{}.SwaggerDoc()["message"]),
	wideColumn("First Seen", corev1.Event{}.SwaggerDoc()["firstTimestamp"]),
	wideColumn("Count", corev1.Event{}.SwaggerDoc()["count"]),
	{Name: "Name", Type: "string", Format: "name", Priority: 1, Description: objectMetaDoc["name"]},
}

// eventCells reads both event styles: core/v1 (first/last timestamp, count)
// and events.k8s.io (eventTime, series), which reaches core/v1 readers with
// only those set.
func eventCells(e *corev1.Event, now time.Time) []interface{} {
	first := age(e.FirstTimestamp, now)
	if e.FirstTimestamp.IsZero() {
		first = microAge(e.EventTime, now)
	}
	last := age(e.LastTimestamp, now)
	if e.LastTimestamp.IsZero() {
		last = first
	}
	count := e.Count
	if e.Series != nil {
		last = microAge(e.Series.LastObservedTime, now)
		count = e.Series.Count
	} else if count == 0 {
		count = 1 // a singleton event of the new API has no count
	}

	object := strings.ToLower(e.InvolvedObject.Kind)
	if e.InvolvedObject.Name != "" {
		object += "/" + e.InvolvedObject.Name
	}
	return []interface{}{
		last,
		e.Type,
		e.Reason,
		object,
		e.InvolvedObject.FieldPath,
		eventSource(e),
		strings.TrimSpace(e.Message),
		first,
		int64(count),
		e.Name,
	}
}

// eventSource is "component, host", falling back to the reporting
// controller and instance that newer clients fill in instead.
func eventSource(e *corev1.Event) string {
	component := cmp.Or(e.Source.Component, e.ReportingController)
	host := cmp.Or(e.Source.Host, e.ReportingInstance)
	if host == "" {
		return component
	}
	return component + ", " + host
}
