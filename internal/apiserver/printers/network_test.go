package printers

//lint:file-ignore SA1019 core/v1 Endpoints is deprecated upstream, but minikit serves it.

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestServiceCells(t *testing.T) {
	web := []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}, {Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}}
	service := func(name string, spec corev1.ServiceSpec) *corev1.Service {
		if spec.ClusterIP != "" {
			spec.ClusterIPs = []string{spec.ClusterIP}
		}
		return &corev1.Service{ObjectMeta: objectMeta(name, 2*24*time.Hour), Spec: spec}
	}
	loadBalancer := func(name string, ingress []corev1.LoadBalancerIngress, externalIPs ...string) *corev1.Service {
		svc := service(name, corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.30", ExternalIPs: externalIPs,
			Ports:    []corev1.ServicePort{{Port: 80, NodePort: 31080, Protocol: corev1.ProtocolTCP}},
			Selector: map[string]string{"app": "web"},
		})
		svc.Status.LoadBalancer.Ingress = ingress
		return svc
	}

	cases := []rowCase{
		{"cluster ip",
			service("web", corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", Ports: web, Selector: map[string]string{"app": "web", "tier": "front"}}),
			[]interface{}{"web", "ClusterIP", "10.96.0.10", "<none>", "80/TCP,443/TCP", "2d", "app=web,tier=front"}},
		{"cluster ip with external ips",
			service("web", corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ExternalIPs: []string{"192.168.49.10", "192.168.49.11"}, Ports: web[:1]}),
			[]interface{}{"web", "ClusterIP", "10.96.0.10", "192.168.49.10,192.168.49.11", "80/TCP", "2d", "<none>"}},
		{"type and protocol default",
			service("dns", corev1.ServiceSpec{ClusterIP: "10.96.0.10", Ports: []corev1.ServicePort{{Port: 8080}, {Port: 53, Protocol: corev1.ProtocolUDP}}}),
			[]interface{}{"dns", "ClusterIP", "10.96.0.10", "<none>", "8080/TCP,53/UDP", "2d", "<none>"}},
		{"node port",
			service("web", corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.96.0.20",
				Ports: []corev1.ServicePort{{Port: 80, NodePort: 30080, Protocol: corev1.ProtocolTCP}, {Port: 53, NodePort: 30053, Protocol: corev1.ProtocolUDP}}}),
			[]interface{}{"web", "NodePort", "10.96.0.20", "<none>", "80:30080/TCP,53:30053/UDP", "2d", "<none>"}},
		{"load balancer pending",
			loadBalancer("lb", nil),
			[]interface{}{"lb", "LoadBalancer", "10.96.0.30", "<pending>", "80:31080/TCP", "2d", "app=web"}},
		{"load balancer with ip",
			loadBalancer("lb", []corev1.LoadBalancerIngress{{IP: "172.18.255.200"}}),
			[]interface{}{"lb", "LoadBalancer", "10.96.0.30", "172.18.255.200", "80:31080/TCP", "2d", "app=web"}},
		{"load balancer ips sorted and unique, hostnames, then external ips",
			loadBalancer("lb", []corev1.LoadBalancerIngress{{IP: "203.0.113.20"}, {Hostname: "lb.example.com"}, {IP: "203.0.113.10"}, {IP: "203.0.113.20"}}, "198.51.100.7"),
			[]interface{}{"lb", "LoadBalancer", "10.96.0.30", "203.0.113.10,203.0.113.20,lb.example.com,198.51.100.7", "80:31080/TCP", "2d", "app=web"}},
		{"load balancer pending with external ip",
			loadBalancer("lb", nil, "198.51.100.7"),
			[]interface{}{"lb", "LoadBalancer", "10.96.0.30", "198.51.100.7", "80:31080/TCP", "2d", "app=web"}},
		{"headless",
			service("db", corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "db"}}),
			[]interface{}{"db", "ClusterIP", "None", "<none>", "<none>", "2d", "app=db"}},
		{"external name",
			service("api", corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "api.example.com"}),
			[]interface{}{"api", "ExternalName", "<none>", "api.example.com", "<none>", "2d", "<none>"}},
		{"external name with port",
			service("api", corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "api.example.com", Ports: []corev1.ServicePort{{Port: 443, Protocol: corev1.ProtocolTCP}}}),
			[]interface{}{"api", "ExternalName", "<none>", "api.example.com", "443/TCP", "2d", "<none>"}},
		{"cluster ip without clusterIPs",
			&corev1.Service{ObjectMeta: objectMeta("old", time.Hour), Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.99"}},
			[]interface{}{"old", "ClusterIP", "10.96.0.99", "<none>", "<none>", "60m", "<none>"}},
		{"not yet allocated",
			&corev1.Service{ObjectMeta: objectMeta("new", time.Second), Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}},
			[]interface{}{"new", "ClusterIP", "<none>", "<none>", "<none>", "1s", "<none>"}},
	}
	checkRows(t, "services", cases)
}

func TestEndpointsCells(t *testing.T) {
	addrs := func(ips ...string) []corev1.EndpointAddress {
		var out []corev1.EndpointAddress
		for _, ip := range ips {
			out = append(out, corev1.EndpointAddress{IP: ip})
		}
		return out
	}
	endpoints := func(subsets ...corev1.EndpointSubset) *corev1.Endpoints {
		return &corev1.Endpoints{ObjectMeta: objectMeta("web", 90*time.Minute), Subsets: subsets}
	}
	port := func(ports ...int32) []corev1.EndpointPort {
		var out []corev1.EndpointPort
		for _, p := range ports {
			out = append(out, corev1.EndpointPort{Port: p, Protocol: corev1.ProtocolTCP})
		}
		return out
	}

	cases := []rowCase{
		{"no subsets",
			endpoints(),
			[]interface{}{"web", "<none>", "90m"}},
		{"two pods",
			endpoints(corev1.EndpointSubset{Addresses: addrs("10.244.1.2", "10.244.1.3"), Ports: port(9376)}),
			[]interface{}{"web", "10.244.1.2:9376,10.244.1.3:9376", "90m"}},
		{"three shown, rest counted",
			endpoints(corev1.EndpointSubset{Addresses: addrs("10.244.1.2", "10.244.1.3", "10.244.2.2", "10.244.2.3"), Ports: port(9376)}),
			[]interface{}{"web", "10.244.1.2:9376,10.244.1.3:9376,10.244.2.2:9376 + 1 more...", "90m"}},
		{"every port of every address",
			endpoints(corev1.EndpointSubset{Addresses: addrs("10.244.1.2", "10.244.1.3"), Ports: port(80, 443)}),
			[]interface{}{"web", "10.244.1.2:80,10.244.1.3:80,10.244.1.2:443 + 1 more...", "90m"}},
		{"several subsets",
			endpoints(
				corev1.EndpointSubset{Addresses: addrs("10.244.1.2"), Ports: port(80)},
				corev1.EndpointSubset{Addresses: addrs("10.244.2.2"), Ports: port(8080)},
			),
			[]interface{}{"web", "10.244.1.2:80,10.244.2.2:8080", "90m"}},
		{"headless without ports",
			endpoints(corev1.EndpointSubset{Addresses: addrs("10.244.1.2", "10.244.1.3")}),
			[]interface{}{"web", "10.244.1.2,10.244.1.3", "90m"}},
		{"ipv6",
			endpoints(corev1.EndpointSubset{Addresses: addrs("fd00:10:244:1::2"), Ports: port(80)}),
			[]interface{}{"web", "[fd00:10:244:1::2]:80", "90m"}},
		{"only not-ready addresses",
			endpoints(corev1.EndpointSubset{NotReadyAddresses: addrs("10.244.1.2"), Ports: port(80)}),
			[]interface{}{"web", "", "90m"}},
	}
	checkRows(t, "endpoints", cases)
}

func TestEndpointSliceCells(t *testing.T) {
	slice := func(ports []discoveryv1.EndpointPort, addrs ...[]string) *discoveryv1.EndpointSlice {
		es := &discoveryv1.EndpointSlice{ObjectMeta: objectMeta("web-abc12", 4*time.Minute), AddressType: discoveryv1.AddressTypeIPv4, Ports: ports}
		for _, a := range addrs {
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: a})
		}
		return es
	}
	port := func(p int32) discoveryv1.EndpointPort { return discoveryv1.EndpointPort{Port: ptr(p)} }

	cases := []rowCase{
		{"two endpoints",
			slice([]discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(80)), Protocol: ptr(corev1.ProtocolTCP)}}, []string{"10.244.1.2"}, []string{"10.244.1.3"}),
			[]interface{}{"web-abc12", "IPv4", "80", "10.244.1.2,10.244.1.3", "4m"}},
		{"empty",
			slice(nil),
			[]interface{}{"web-abc12", "IPv4", "<unset>", "<unset>", "4m"}},
		{"ports by name or any",
			slice([]discoveryv1.EndpointPort{{Name: ptr("http")}, {}}, []string{"10.244.1.2"}),
			[]interface{}{"web-abc12", "IPv4", "http,*", "10.244.1.2", "4m"}},
		{"three shown, rest counted",
			slice([]discoveryv1.EndpointPort{port(80), port(443), port(8080), port(8443), port(9090)},
				[]string{"10.244.1.2"}, []string{"10.244.1.3"}, []string{"10.244.1.4", "10.244.1.5"}),
			[]interface{}{"web-abc12", "IPv4", "80,443,8080 + 2 more...", "10.244.1.2,10.244.1.3,10.244.1.4 + 1 more...", "4m"}},
	}
	checkRows(t, "endpointslices", cases)
}

func TestIngressCells(t *testing.T) {
	rules := func(hosts ...string) []networkingv1.IngressRule {
		var out []networkingv1.IngressRule
		for _, h := range hosts {
			out = append(out, networkingv1.IngressRule{Host: h})
		}
		return out
	}
	ingress := func(spec networkingv1.IngressSpec, lb ...networkingv1.IngressLoadBalancerIngress) *networkingv1.Ingress {
		ing := &networkingv1.Ingress{ObjectMeta: objectMeta("web", 5*time.Hour+30*time.Minute), Spec: spec}
		ing.Status.LoadBalancer.Ingress = lb
		return ing
	}

	cases := []rowCase{
		{"no class, no host, no address",
			ingress(networkingv1.IngressSpec{Rules: rules("")}),
			[]interface{}{"web", "<none>", "*", "", "80", "5h30m"}},
		{"class, hosts, tls, address",
			ingress(networkingv1.IngressSpec{
				IngressClassName: ptr("minikit"),
				Rules:            rules("a.example.com", "b.example.com"),
				TLS:              []networkingv1.IngressTLS{{Hosts: []string{"a.example.com"}, SecretName: "a-tls"}},
			}, networkingv1.IngressLoadBalancerIngress{IP: "192.168.49.2"}),
			[]interface{}{"web", "minikit", "a.example.com,b.example.com", "192.168.49.2", "80, 443", "5h30m"}},
		{"hostless rules are skipped",
			ingress(networkingv1.IngressSpec{Rules: rules("", "a.example.com")}),
			[]interface{}{"web", "<none>", "a.example.com", "", "80", "5h30m"}},
		{"three hosts shown, more rules counted",
			ingress(networkingv1.IngressSpec{Rules: rules("a.example.com", "b.example.com", "", "c.example.com", "d.example.com")}),
			[]interface{}{"web", "<none>", "a.example.com,b.example.com,c.example.com + 2 more...", "", "80", "5h30m"}},
		{"addresses sorted and unique, hostnames too",
			ingress(networkingv1.IngressSpec{},
				networkingv1.IngressLoadBalancerIngress{IP: "192.168.49.3"},
				networkingv1.IngressLoadBalancerIngress{Hostname: "lb.example.com"},
				networkingv1.IngressLoadBalancerIngress{IP: "192.168.49.2"},
				networkingv1.IngressLoadBalancerIngress{IP: "192.168.49.3"}),
			[]interface{}{"web", "<none>", "*", "192.168.49.2,192.168.49.3,lb.example.com", "80", "5h30m"}},
	}
	checkRows(t, "ingresses", cases)
}

func TestIngressClassCells(t *testing.T) {
	class := func(params *networkingv1.IngressClassParametersReference) *networkingv1.IngressClass {
		return &networkingv1.IngressClass{
			ObjectMeta: metav1.ObjectMeta{Name: "minikit", CreationTimestamp: ago(9 * 24 * time.Hour)},
			Spec:       networkingv1.IngressClassSpec{Controller: "minikit.dev/ingress", Parameters: params},
		}
	}
	cases := []rowCase{
		{"no parameters",
			class(nil),
			[]interface{}{"minikit", "minikit.dev/ingress", "<none>", "9d"}},
		{"parameters in a group",
			class(&networkingv1.IngressClassParametersReference{APIGroup: ptr("k8s.example.com"), Kind: "IngressParameters", Name: "external-lb"}),
			[]interface{}{"minikit", "minikit.dev/ingress", "IngressParameters.k8s.example.com/external-lb", "9d"}},
		{"core parameters",
			class(&networkingv1.IngressClassParametersReference{Kind: "ConfigMap", Name: "ingress-config", Scope: ptr("Namespace"), Namespace: ptr("kube-system")}),
			[]interface{}{"minikit", "minikit.dev/ingress", "ConfigMap/ingress-config", "9d"}},
	}
	checkRows(t, "ingressclasses", cases)
}

func TestServiceCIDRCells(t *testing.T) {
	cases := []rowCase{
		{"dual stack",
			&networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", CreationTimestamp: ago(9 * 24 * time.Hour)},
				Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.96.0.0/12", "fd00:10:96::/112"}}},
			[]interface{}{"kubernetes", "10.96.0.0/12,fd00:10:96::/112", "9d"}},
	}
	checkRows(t, "servicecidrs", cases)
}

func TestIPAddressCells(t *testing.T) {
	ip := func(ref *networkingv1.ParentReference) *networkingv1.IPAddress {
		return &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: "10.96.0.10", CreationTimestamp: ago(time.Hour)},
			Spec: networkingv1.IPAddressSpec{ParentRef: ref}}
	}
	cases := []rowCase{
		{"a service's", ip(&networkingv1.ParentReference{Resource: "services", Namespace: "kube-system", Name: "kube-dns"}),
			[]interface{}{"10.96.0.10", "services/kube-system/kube-dns"}},
		{"a cluster-scoped object in a group", ip(&networkingv1.ParentReference{Group: "example.com", Resource: "Gateways", Name: "gw"}),
			[]interface{}{"10.96.0.10", "gateways.example.com/gw"}},
		{"no parent", ip(nil), []interface{}{"10.96.0.10", "<none>"}},
	}
	checkRows(t, "ipaddresses", cases)
}

func TestNetworkPolicyCells(t *testing.T) {
	policy := func(sel metav1.LabelSelector) *networkingv1.NetworkPolicy {
		return &networkingv1.NetworkPolicy{ObjectMeta: objectMeta("db", 3*time.Hour), Spec: networkingv1.NetworkPolicySpec{PodSelector: sel}}
	}
	cases := []rowCase{
		{"every pod", policy(metav1.LabelSelector{}), []interface{}{"db", "<none>", "3h"}},
		{"match labels", policy(metav1.LabelSelector{MatchLabels: map[string]string{"role": "db", "app": "redis"}}),
			[]interface{}{"db", "app=redis,role=db", "3h"}},
		{"match expressions", policy(metav1.LabelSelector{MatchLabels: map[string]string{"role": "db"}, MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"cache", "db"}},
			{Key: "legacy", Operator: metav1.LabelSelectorOpDoesNotExist},
		}}), []interface{}{"db", "!legacy,role=db,tier in (cache,db)", "3h"}},
	}
	checkRows(t, "networkpolicies", cases)
}
