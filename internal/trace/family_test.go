package trace

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// In a dual-stack cluster TO decides the family: svc/NAME and node names
// mean the primary (IPv4) address unless --ip-family ipv6 asks for the
// other, an IPv6 address is IPv6 by itself, and FROM sends from its
// address of that family or the trace says it has none.
func TestResolveFamily(t *testing.T) {
	ctx := context.Background()
	node := func(name, v4, v6 string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: v4}, {Type: corev1.NodeInternalIP, Address: v6}}}}
	}
	svc := func(name string, nodePort int32, ips ...string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.ServiceSpec{ClusterIP: ips[0], ClusterIPs: ips, Type: corev1.ServiceTypeNodePort,
				Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: nodePort}}}}
	}
	pod := func(name string, ips ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{NodeName: "node1"},
			Status: corev1.PodStatus{PodIP: ips[0]}}
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		return p
	}
	c := fake.NewClientset(svc("ds", 30007, "10.96.0.20", "fd00:10:96::20"), svc("only4", 30008, "10.96.0.21"),
		pod("both", "10.244.0.5", "fd00:10:244::5"), pod("v4", "10.244.0.6"))
	r := &run{c: c, o: Config{Namespace: "default", Lab: "nolab"},
		nodes: []corev1.Node{node("node1", "192.168.56.10", "fd00:56::10"), node("node2", "192.168.56.11", "fd00:56::11")}}

	for _, tc := range []struct {
		to      string
		fam     family
		set     bool
		want    string
		kind    string
		wantErr string
	}{
		{to: "svc/ds", want: "10.96.0.20:80", kind: "cluster IP"},
		{to: "svc/ds", fam: ipv6, set: true, want: "[fd00:10:96::20]:80", kind: "cluster IP"},
		{to: "[fd00:10:96::20]:80", want: "[fd00:10:96::20]:80", kind: "cluster IP"},
		{to: "node2:30007", fam: ipv6, set: true, want: "[fd00:56::11]:30007", kind: "NodePort"},
		{to: "node2:30007", want: "192.168.56.11:30007", kind: "NodePort"},
		{to: "svc/only4", fam: ipv6, set: true, wantErr: "service default/only4 has no IPv6 cluster IP (clusterIPs 10.96.0.21)"},
	} {
		r.fam = tc.fam
		got, _, err := r.resolveTo(ctx, tc.to, tc.set)
		switch {
		case tc.wantErr != "":
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("TO %s (%s): %v, want %q", tc.to, tc.fam, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("TO %s (%s): %v", tc.to, tc.fam, err)
		case got.Addr.String() != tc.want || got.Kind != tc.kind:
			t.Errorf("TO %s (%s): %s (%s), want %s (%s)", tc.to, tc.fam, got.Addr, got.Kind, tc.want, tc.kind)
		}
	}

	r.fam = ipv6
	if src, err := r.resolveFrom(ctx, "pod/both"); err != nil || src.IP.String() != "fd00:10:244::5" {
		t.Errorf("FROM pod/both over IPv6: %v %v", src.IP, err)
	}
	if _, err := r.resolveFrom(ctx, "pod/v4"); err == nil || !strings.Contains(err.Error(), "pod default/v4 has no IPv6 address (podIPs 10.244.0.6)") {
		t.Errorf("FROM an IPv4-only pod over IPv6: %v", err)
	}
	r.fam = ipv4
	if src, err := r.resolveFrom(ctx, "pod/both"); err != nil || src.IP.String() != "10.244.0.5" {
		t.Errorf("FROM pod/both over IPv4: %v %v", src.IP, err)
	}
}
