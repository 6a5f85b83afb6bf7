package kubeproxy

import (
	"strconv"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/iptables/iptablestest"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// shape is one service shape with its endpoints, as the golden tests and the
// tracer tests use them.
type shape struct {
	name   string
	svc    *corev1.Service
	slices []*discovery.EndpointSlice
}

func shapes() []shape {
	remote := []ep{{ip: "10.244.2.5", node: testOther}, {ip: "10.244.2.6", node: testOther}}
	mixed := []ep{{ip: "10.244.1.5", node: testNode}, {ip: "10.244.2.5", node: testOther}, {ip: "10.244.2.6", node: testOther}}
	return []shape{
		{"clusterip", makeService("default", "hostnames", "10.96.0.20", withPorts(corev1.ServicePort{Name: "default", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(9376)})),
			[]*discovery.EndpointSlice{makeSlice("default", "hostnames", []discovery.EndpointPort{slicePort("default", corev1.ProtocolTCP, 9376)},
				ep{ip: "10.244.1.5", node: testNode}, ep{ip: "10.244.2.5", node: testOther}, ep{ip: "10.244.2.6", node: testOther}, ep{ip: "10.244.2.9", node: testOther, notReady: true})}},
		{"nodeport", makeService("ns3", "svc3", "10.96.0.30", withNodePort(30003)),
			[]*discovery.EndpointSlice{makeSlice("ns3", "svc3", p80, mixed...)}},
		{"nodeport-local", makeService("ns3", "svc3", "10.96.0.30", withNodePort(30003), withLocal(0)),
			[]*discovery.EndpointSlice{makeSlice("ns3", "svc3", p80, mixed...)}},
		{"nodeport-local-none-here", makeService("ns3", "svc3", "10.96.0.30", withNodePort(30003), withLocal(0)),
			[]*discovery.EndpointSlice{makeSlice("ns3", "svc3", p80, remote...)}},
		{"externalip", makeService("ns4", "svc4", "10.96.0.40", withExternalIPs("192.168.56.150")),
			[]*discovery.EndpointSlice{makeSlice("ns4", "svc4", p80, mixed...)}},
		{"loadbalancer-sourceranges-affinity", makeService("ns5", "svc5", "10.96.0.50", withLB("192.168.56.240"), withNodePort(30005),
			withSourceRanges("203.0.113.0/25", "192.168.56.0/24"), withAffinity(10800)),
			[]*discovery.EndpointSlice{makeSlice("ns5", "svc5", p80, mixed...)}},
		{"loadbalancer-local-hcnp", makeService("ns2", "svc2", "10.96.0.60", withLB("192.168.56.241"), withNodePort(30002), withExternalIPs("192.168.56.151"), withLocal(30000)),
			[]*discovery.EndpointSlice{makeSlice("ns2", "svc2", p80, mixed...)}},
		{"loadbalancer-local-none-here", makeService("ns2", "svc2", "10.96.0.60", withLB("192.168.56.241"), withNodePort(30002), withLocal(30000)),
			[]*discovery.EndpointSlice{makeSlice("ns2", "svc2", p80, remote...)}},
		{"internal-local", makeService("ns7", "svc7", "10.96.0.70", withInternalLocal()),
			[]*discovery.EndpointSlice{makeSlice("ns7", "svc7", p80, mixed...)}},
		{"internal-local-none-here", makeService("ns7", "svc7", "10.96.0.70", withInternalLocal()),
			[]*discovery.EndpointSlice{makeSlice("ns7", "svc7", p80, remote...)}},
		{"no-endpoints", makeService("ns6", "svc6", "10.96.0.80", withNodePort(30006), withExternalIPs("192.168.56.152")), nil},
		{"udp-multiport", makeService("kube-system", "kube-dns", "10.96.0.10", withPorts(
			corev1.ServicePort{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53},
			corev1.ServicePort{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53})),
			[]*discovery.EndpointSlice{makeSlice("kube-system", "kube-dns",
				[]discovery.EndpointPort{slicePort("dns", corev1.ProtocolUDP, 53), slicePort("dns-tcp", corev1.ProtocolTCP, 53)},
				ep{ip: "10.244.1.2", node: testNode})}},
		{"terminating-fallback", makeService("ns8", "svc8", "10.96.0.90"),
			[]*discovery.EndpointSlice{makeSlice("ns8", "svc8", p80, ep{ip: "10.244.1.7", node: testNode, notReady: true, terminating: true})}},
		{"unnamed-port", makeService("ns9", "svc9", "10.96.0.99", withPorts(corev1.ServicePort{Protocol: corev1.ProtocolTCP, Port: 8080})),
			[]*discovery.EndpointSlice{makeSlice("ns9", "svc9", []discovery.EndpointPort{slicePort("", corev1.ProtocolTCP, 8080)}, ep{ip: "10.244.1.8", node: testNode})}},
	}
}

func loadShape(p *Proxier, s shape) {
	p.OnServiceUpdate(s.svc)
	for _, sl := range s.slices {
		p.OnEndpointSliceUpdate(sl)
	}
}

// TestGoldenRules pins the rules each service shape produces, as
// iptables-save shows them on a node (node1, 192.168.56.10, pods 10.244.0.0/16).
func TestGoldenRules(t *testing.T) {
	for _, s := range shapes() {
		t.Run(s.name, func(t *testing.T) {
			ipt := iptablestest.NewFake()
			p, _ := testProxier(t, ipt)
			loadShape(p, s)
			mustSync(t, p)
			golden(t, s.name, saved(t, ipt))
		})
	}
}

// Headless and ExternalName services, and services handled by another proxy,
// get no rules at all.
func TestNoRulesForHeadlessAndExternalName(t *testing.T) {
	ipt := iptablestest.NewFake()
	p, _ := testProxier(t, ipt)
	mustSync(t, p)
	empty := saved(t, ipt)

	headless := makeService("ns", "headless", "None")
	extName := makeService("ns", "ext", "")
	extName.Spec.Type = corev1.ServiceTypeExternalName
	extName.Spec.ExternalName = "example.com"
	other := makeService("ns", "other", "10.96.0.77")
	other.Labels = map[string]string{"service.kubernetes.io/service-proxy-name": "someone-else"}
	// service.kubernetes.io/headless keeps a service from the proxy whatever
	// its value, as kube-proxy's DoesNotExist label selector does.
	labelled := makeService("ns", "labelled", "10.96.0.78")
	labelled.Labels = map[string]string{corev1.IsHeadlessService: ""}
	for _, svc := range []*corev1.Service{headless, extName, other, labelled} {
		p.OnServiceUpdate(svc)
		p.OnEndpointSliceUpdate(makeSlice("ns", svc.Name, p80, ep{ip: "10.244.1.5", node: testNode}))
	}
	mustSync(t, p)
	if got := saved(t, ipt); got != empty {
		t.Errorf("rules appeared:\n%s", lineDiff(empty, got))
	}

	// A proxied service that gains the label loses its rules.
	web := makeService("ns", "web", "10.96.0.79")
	p.OnServiceUpdate(web)
	p.OnEndpointSliceUpdate(makeSlice("ns", "web", p80, ep{ip: "10.244.1.6", node: testNode}))
	mustSync(t, p)
	if got := saved(t, ipt); got == empty {
		t.Fatal("no rules for an unlabelled service")
	}
	web = web.DeepCopy()
	web.Labels = map[string]string{corev1.IsHeadlessService: "true"}
	p.OnServiceUpdate(web)
	mustSync(t, p)
	if got := saved(t, ipt); got != empty {
		t.Errorf("rules left after the service was labelled headless:\n%s", lineDiff(empty, got))
	}
}

// Above 1,000 endpoints kube-proxy drops the per-endpoint comments.
func TestLargeClusterModeDropsEndpointComments(t *testing.T) {
	ipt := iptablestest.NewFake()
	p, _ := testProxier(t, ipt)
	var eps []ep
	for i := 0; i < 1001; i++ {
		eps = append(eps, ep{ip: "10.244." + itoa(1+i/250) + "." + itoa(2+i%250), node: testOther})
	}
	p.OnServiceUpdate(makeService("ns", "big", "10.96.1.1"))
	p.OnEndpointSliceUpdate(makeSlice("ns", "big", p80, eps...))
	mustSync(t, p)
	svc := prefixSVC + portProtoHash("ns/big:p80", "tcp")
	rules := ipt.Rules("nat", svc)
	if len(rules) != 1002 {
		t.Fatalf("%s has %d rules, want 1002", svc, len(rules))
	}
	if strings.Contains(rules[1], "->") {
		t.Errorf("per-endpoint comment kept in large-cluster mode: %s", rules[1])
	}
	if !strings.Contains(rules[0], `"ns/big:p80 cluster IP"`) {
		t.Errorf("service comment dropped: %s", rules[0])
	}
}

func itoa(i int) string { return strconvItoa(i) }

var strconvItoa = strconv.Itoa
