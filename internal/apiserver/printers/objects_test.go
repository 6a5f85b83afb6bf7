package printers

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNamespaceCells(t *testing.T) {
	namespace := func(name string, phase corev1.NamespacePhase) *corev1.Namespace {
		return &corev1.Namespace{
			ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: ago(400 * 24 * time.Hour)},
			Status:     corev1.NamespaceStatus{Phase: phase},
		}
	}
	checkRows(t, "namespaces", []rowCase{
		{"active", namespace("default", corev1.NamespaceActive), []interface{}{"default", "Active", "400d"}},
		{"terminating", namespace("old", corev1.NamespaceTerminating), []interface{}{"old", "Terminating", "400d"}},
	})
}

func TestNodeCells(t *testing.T) {
	info := corev1.NodeSystemInfo{
		KubeletVersion: "v1.33.1", OSImage: "Debian GNU/Linux 12 (bookworm)",
		KernelVersion: "6.1.0-31-amd64", ContainerRuntimeVersion: "containerd://1.7.24",
	}
	node := func(name string, labels map[string]string, unschedulable bool, conditions ...corev1.NodeCondition) *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, CreationTimestamp: ago(3*time.Hour + 10*time.Minute)},
			Spec:       corev1.NodeSpec{Unschedulable: unschedulable},
			Status: corev1.NodeStatus{
				Conditions: conditions,
				Addresses: []corev1.NodeAddress{
					{Type: corev1.NodeHostName, Address: name},
					{Type: corev1.NodeInternalIP, Address: "192.168.49.2"},
					{Type: corev1.NodeInternalIP, Address: "fd00::2"},
				},
				NodeInfo: info,
			},
		}
	}
	ready := func(s corev1.ConditionStatus) corev1.NodeCondition {
		return corev1.NodeCondition{Type: corev1.NodeReady, Status: s}
	}
	pressure := corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue}
	wide := []interface{}{"192.168.49.2", "<none>", "Debian GNU/Linux 12 (bookworm)", "6.1.0-31-amd64", "containerd://1.7.24"}
	row := func(name, status, roles string) []interface{} {
		return append([]interface{}{name, status, roles, "3h10m", "v1.33.1"}, wide...)
	}

	cases := []rowCase{
		{"ready control plane",
			node("cp", map[string]string{"node-role.kubernetes.io/control-plane": ""}, false, pressure, ready(corev1.ConditionTrue)),
			row("cp", "Ready", "control-plane")},
		{"not ready",
			node("w1", nil, false, ready(corev1.ConditionFalse)),
			row("w1", "NotReady", "<none>")},
		{"ready unknown reads not ready",
			node("w2", nil, false, ready(corev1.ConditionUnknown)),
			row("w2", "NotReady", "<none>")},
		{"cordoned, roles from both label styles",
			node("w3", map[string]string{
				"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/": "",
				"kubernetes.io/role": "ingress", "node-role.kubernetes.io/ingress": "",
			}, true, ready(corev1.ConditionTrue)),
			row("w3", "Ready,SchedulingDisabled", "ingress,worker")},
		{"no ready condition",
			node("w4", nil, true),
			row("w4", "Unknown,SchedulingDisabled", "<none>")},
		{"nothing reported",
			&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w5"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeExternalIP, Address: "203.0.113.5"}}}},
			[]interface{}{"w5", "Unknown", "<none>", "<unknown>", "", "<none>", "203.0.113.5", "<unknown>", "<unknown>", "<unknown>"}},
	}
	checkRows(t, "nodes", cases)
}

func TestDeploymentCells(t *testing.T) {
	deployment := func(name string, replicas *int32, selector *metav1.LabelSelector, containers ...corev1.Container) *appsv1.Deployment {
		return &appsv1.Deployment{
			ObjectMeta: objectMeta(name, 45*time.Second),
			Spec: appsv1.DeploymentSpec{
				Replicas: replicas, Selector: selector,
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: containers}},
			},
		}
	}
	web := deployment("web", ptr(int32(3)), &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		corev1.Container{Name: "nginx", Image: "nginx:1.27"})
	web.Status = appsv1.DeploymentStatus{Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 2, AvailableReplicas: 2}

	cases := []rowCase{
		{"rolling out",
			web,
			[]interface{}{"web", "2/3", int64(3), int64(2), "45s", "nginx", "nginx:1.27", "app=web"}},
		{"replicas default, two containers, set-based selector",
			deployment("api", nil,
				&metav1.LabelSelector{
					MatchLabels:      map[string]string{"app": "api"},
					MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"backend"}}},
				},
				corev1.Container{Name: "api", Image: "ghcr.io/minikit/api:v1"}, corev1.Container{Name: "proxy", Image: "envoyproxy/envoy:v1.32"}),
			[]interface{}{"api", "0/1", int64(0), int64(0), "45s", "api,proxy", "ghcr.io/minikit/api:v1,envoyproxy/envoy:v1.32", "app=api,tier in (backend)"}},
		{"scaled to zero",
			deployment("idle", ptr(int32(0)), &metav1.LabelSelector{}),
			[]interface{}{"idle", "0/0", int64(0), int64(0), "45s", "", "", ""}},
		{"invalid selector",
			deployment("bad", ptr(int32(1)), &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}}}),
			[]interface{}{"bad", "0/1", int64(0), int64(0), "45s", "", "", "<invalid>"}},
	}
	checkRows(t, "deployments", cases)
}

func TestSecretCells(t *testing.T) {
	cases := []rowCase{
		{"opaque",
			&corev1.Secret{ObjectMeta: objectMeta("db", time.Hour), Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"user": nil, "password": nil}},
			[]interface{}{"db", "Opaque", int64(2), "60m"}},
		{"tls",
			&corev1.Secret{ObjectMeta: objectMeta("web-tls", time.Hour), Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": nil, "tls.key": nil}},
			[]interface{}{"web-tls", "kubernetes.io/tls", int64(2), "60m"}},
		{"string data counted once",
			&corev1.Secret{ObjectMeta: objectMeta("mixed", time.Hour), Type: corev1.SecretTypeOpaque,
				Data: map[string][]byte{"user": nil}, StringData: map[string]string{"user": "admin", "token": "t"}},
			[]interface{}{"mixed", "Opaque", int64(2), "60m"}},
		{"empty",
			&corev1.Secret{ObjectMeta: objectMeta("empty", time.Hour)},
			[]interface{}{"empty", "", int64(0), "60m"}},
	}
	checkRows(t, "secrets", cases)
}

func TestConfigMapCells(t *testing.T) {
	cases := []rowCase{
		{"data and binary data",
			&corev1.ConfigMap{ObjectMeta: objectMeta("coredns", 7*time.Hour), Data: map[string]string{"Corefile": ".:53 {}", "extra": ""}, BinaryData: map[string][]byte{"logo.png": nil}},
			[]interface{}{"coredns", int64(3), "7h"}},
		{"empty",
			&corev1.ConfigMap{ObjectMeta: objectMeta("empty", 7*time.Hour)},
			[]interface{}{"empty", int64(0), "7h"}},
	}
	checkRows(t, "configmaps", cases)
}

func TestEventCells(t *testing.T) {
	classic := &corev1.Event{
		ObjectMeta: objectMeta("web-0.17e3b2c4d5f6a7b8", 10*time.Minute),
		InvolvedObject: corev1.ObjectReference{
			Kind: "Pod", Namespace: "default", Name: "web-0", FieldPath: "spec.containers{app}",
		},
		Reason:         "BackOff",
		Message:        " Back-off restarting failed container app in pod web-0_default\n",
		Source:         corev1.EventSource{Component: "kubelet", Host: "node-1"},
		FirstTimestamp: ago(10 * time.Minute),
		LastTimestamp:  ago(2 * time.Minute),
		Count:          5,
		Type:           corev1.EventTypeWarning,
	}
	newStyle := &corev1.Event{
		ObjectMeta:          objectMeta("web-0.17e3b2c4d5f6a7c0", 30*time.Second),
		InvolvedObject:      corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web-0"},
		Reason:              "Scheduled",
		Message:             "Successfully assigned default/web-0 to node-1",
		EventTime:           metav1.NewMicroTime(now.Add(-30 * time.Second)),
		ReportingController: "default-scheduler",
		ReportingInstance:   "",
		Type:                corev1.EventTypeNormal,
	}
	series := &corev1.Event{
		ObjectMeta:          objectMeta("lb.17e3b2c4d5f6a7d0", time.Hour),
		InvolvedObject:      corev1.ObjectReference{Kind: "Service", Namespace: "default", Name: "lb"},
		Reason:              "EnsuringLoadBalancer",
		Message:             "Ensuring load balancer",
		EventTime:           metav1.NewMicroTime(now.Add(-time.Hour)),
		Series:              &corev1.EventSeries{Count: 3, LastObservedTime: metav1.NewMicroTime(now.Add(-5 * time.Second))},
		Source:              corev1.EventSource{Component: "service-controller"},
		ReportingController: "minikit.dev/lb",
		ReportingInstance:   "lb-controller-0",
		Type:                corev1.EventTypeNormal,
	}
	nameless := &corev1.Event{
		ObjectMeta:     objectMeta("cluster.17e3b2c4d5f6a7e0", time.Minute),
		InvolvedObject: corev1.ObjectReference{Kind: "Node"},
		Reason:         "RegisteredNode",
		FirstTimestamp: ago(time.Minute),
		Count:          1,
		Type:           corev1.EventTypeNormal,
	}

	cases := []rowCase{
		{"core event",
			classic,
			[]interface{}{"2m", "Warning", "BackOff", "pod/web-0", "spec.containers{app}", "kubelet, node-1",
				"Back-off restarting failed container app in pod web-0_default", "10m", int64(5), "web-0.17e3b2c4d5f6a7b8"}},
		{"events.k8s.io singleton",
			newStyle,
			[]interface{}{"30s", "Normal", "Scheduled", "pod/web-0", "", "default-scheduler",
				"Successfully assigned default/web-0 to node-1", "30s", int64(1), "web-0.17e3b2c4d5f6a7c0"}},
		{"events.k8s.io series",
			series,
			[]interface{}{"5s", "Normal", "EnsuringLoadBalancer", "service/lb", "", "service-controller, lb-controller-0",
				"Ensuring load balancer", "60m", int64(3), "lb.17e3b2c4d5f6a7d0"}},
		{"object without name",
			nameless,
			[]interface{}{"60s", "Normal", "RegisteredNode", "node", "", "", "", "60s", int64(1), "cluster.17e3b2c4d5f6a7e0"}},
		{"no timestamps",
			&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "bare"}},
			[]interface{}{"<unknown>", "", "", "", "", "", "", "<unknown>", int64(1), "bare"}},
	}
	checkRows(t, "events", cases)
}
