package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/gateway"
	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// A Gateway with a TCP and a UDP listener: from the lab's client host, nc
// through the TCP listener reaches echo-basic's TCP echo server, and dig
// through the UDP listener reaches a CoreDNS pod (on the other node) that
// answers a name from its hosts block; both routes are Accepted, and the
// Gateway's Service has a UDP port.
func TestTCPAndUDPListenersFromTheClientHost(t *testing.T) {
	l := testenv.NewLab(t, 2)
	c := testenv.Client(t, l)
	ctx := context.Background()
	gw := gatewayClient(t, l)

	echo := echoBasicPod("tcp-echo", map[string]string{"app": "tcp-echo"}, corev1.EnvVar{Name: "TCP_ECHO_SERVER", Value: "1"})
	if _, err := c.CoreV1().Pods("default").Create(ctx, echo, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "dns"},
		Data: map[string]string{"Corefile": ".:53 {\n    hosts {\n        10.9.8.7 tea.example.com\n    }\n    log\n}\n"}}
	if _, err := c.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dns := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "dns", Labels: map[string]string{"app": "dns"}},
		Spec: corev1.PodSpec{NodeName: "node1", Containers: []corev1.Container{{Name: "coredns", Image: "registry.k8s.io/coredns/coredns:v1.12.2",
			Args:         []string{"-conf", "/etc/coredns/Corefile"},
			VolumeMounts: []corev1.VolumeMount{{Name: "conf", MountPath: "/etc/coredns"}}}},
			Volumes: []corev1.Volume{{Name: "conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "dns"}}}}}}}
	if _, err := c.CoreV1().Pods("default").Create(ctx, dns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, svc := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "tcp-echo"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "tcp-echo"},
			Ports: []corev1.ServicePort{{Name: "tcp", Port: 3000, TargetPort: intstr.FromInt32(3000)}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "dns"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "dns"},
			Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)}}}},
	} {
		if _, err := c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitPodReady(t, c, "default", "tcp-echo")
	testenv.WaitPodReady(t, c, "default", "dns")

	g := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "l4", Namespace: "default"},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: gateway.ClassName, Listeners: []gatewayv1.Listener{
			{Name: "tcp", Port: 9000, Protocol: gatewayv1.TCPProtocolType},
			{Name: "dns", Port: 5300, Protocol: gatewayv1.UDPProtocolType}}}}
	if _, err := gw.GatewayV1().Gateways("default").Create(ctx, g, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	parent := func(section string) gatewayv1.CommonRouteSpec {
		s := gatewayv1.SectionName(section)
		return gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "l4", SectionName: &s}}}
	}
	backend := func(name string, port gatewayv1.PortNumber) []gatewayv1.BackendRef {
		return []gatewayv1.BackendRef{{BackendObjectReference: gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(name), Port: &port}}}
	}
	tr := &gatewayv1.TCPRoute{ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "default"},
		Spec: gatewayv1.TCPRouteSpec{CommonRouteSpec: parent("tcp"), Rules: []gatewayv1.TCPRouteRule{{BackendRefs: backend("tcp-echo", 3000)}}}}
	if _, err := gw.GatewayV1().TCPRoutes("default").Create(ctx, tr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ur := &gatewayv1.UDPRoute{ObjectMeta: metav1.ObjectMeta{Name: "dns", Namespace: "default"},
		Spec: gatewayv1.UDPRouteSpec{CommonRouteSpec: parent("dns"), Rules: []gatewayv1.UDPRouteRule{{BackendRefs: backend("dns", 53)}}}}
	if _, err := gw.GatewayV1().UDPRoutes("default").Create(ctx, ur, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var addr string
	testutil.Eventually(t, 120*time.Second, "Gateway l4 Programmed with an address", func() error {
		g, err := gw.GatewayV1().Gateways("default").Get(ctx, "l4", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cnd := range g.Status.Conditions {
			if cnd.Type == "Programmed" && cnd.Status != metav1.ConditionTrue {
				return fmt.Errorf("Programmed %s %s: %s", cnd.Status, cnd.Reason, cnd.Message)
			}
		}
		if len(g.Status.Addresses) == 0 {
			return fmt.Errorf("no address")
		}
		addr = g.Status.Addresses[0].Value
		return nil
	})
	svc, err := c.CoreV1().Services("default").Get(ctx, gateway.ServiceName("l4"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ports []string
	for _, p := range svc.Spec.Ports {
		ports = append(ports, fmt.Sprintf("%s/%d", p.Protocol, p.Port))
	}
	if got := strings.Join(ports, " "); got != "UDP/5300 TCP/9000" {
		t.Errorf("Service %s ports %s, want UDP/5300 TCP/9000", svc.Name, got)
	}

	testutil.Eventually(t, 60*time.Second, "nc from the client reaches tcp-echo through the TCP listener", func() error {
		out, err := testenv.Run(l, lab.Client, "sh", "-c", "printf 'TEST\\n' | nc -N -w 3 "+addr+" 9000")
		if err != nil {
			return fmt.Errorf("nc: %v: %s", err, out)
		}
		greeting, payload, _ := strings.Cut(out, "\n")
		var reply struct{ Pod, Namespace string }
		if greeting != "Gateway API Test TCP Server" || json.Unmarshal([]byte(payload), &reply) != nil || reply.Pod != "tcp-echo" {
			return fmt.Errorf("reply %q", out)
		}
		return nil
	})
	testutil.Eventually(t, 60*time.Second, "dig from the client is answered through the UDP listener", func() error {
		out, err := testenv.Run(l, lab.Client, "dig", "@"+addr, "-p", "5300", "+short", "+time=2", "+tries=1", "tea.example.com", "A")
		if err != nil || out != "10.9.8.7" {
			return fmt.Errorf("dig: %q, %v", out, err)
		}
		return nil
	})

	testutil.Eventually(t, 30*time.Second, "TCPRoute echo and UDPRoute dns Accepted", func() error {
		tr, err := gw.GatewayV1().TCPRoutes("default").Get(ctx, "echo", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := acceptedAndResolved(tr.Status.Parents); err != nil {
			return fmt.Errorf("TCPRoute echo: %w", err)
		}
		ur, err := gw.GatewayV1().UDPRoutes("default").Get(ctx, "dns", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := acceptedAndResolved(ur.Status.Parents); err != nil {
			return fmt.Errorf("UDPRoute dns: %w", err)
		}
		return nil
	})
}
