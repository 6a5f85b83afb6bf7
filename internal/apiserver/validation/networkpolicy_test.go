package validation

import (
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// bookPolicy is the example of the Kubernetes documentation (and of the book
// minikit follows): ipBlock with except, namespaceSelector, podSelector,
// port 6379 in, port 5978 out.
func bookPolicy(mutate ...func(*networkingv1.NetworkPolicy)) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "test-network-policy", Namespace: "default"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": "db"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{
					{IPBlock: &networkingv1.IPBlock{CIDR: "172.17.0.0/16", Except: []string{"172.17.1.0/24"}}},
					{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"project": "myproject"}}},
					{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "frontend"}}},
				},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptr(intstr.FromInt32(6379))}},
			}},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/24"}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptr(intstr.FromInt32(5978))}},
			}},
		},
	}
	for _, m := range mutate {
		m(np)
	}
	return np
}

// fieldErr is an error's type and path, as a table names it.
type fieldErr struct {
	typ  field.ErrorType
	path string
}

func (f fieldErr) String() string { return fmt.Sprintf("%s %s", f.path, f.typ) }

func fieldErrs(errs field.ErrorList) []fieldErr {
	var out []fieldErr
	for _, e := range errs {
		out = append(out, fieldErr{e.Type, e.Field})
	}
	return out
}

func TestValidateNetworkPolicy(t *testing.T) {
	port := func(p intstr.IntOrString, end *int32, proto ...corev1.Protocol) networkingv1.NetworkPolicyPort {
		np := networkingv1.NetworkPolicyPort{Port: &p, EndPort: end}
		if len(proto) > 0 {
			np.Protocol = &proto[0]
		}
		return np
	}
	ingressPorts := func(ports ...networkingv1.NetworkPolicyPort) func(*networkingv1.NetworkPolicy) {
		return func(np *networkingv1.NetworkPolicy) { np.Spec.Ingress[0].Ports = ports }
	}
	ingressPeer := func(peer networkingv1.NetworkPolicyPeer) func(*networkingv1.NetworkPolicy) {
		return func(np *networkingv1.NetworkPolicy) { np.Spec.Ingress[0].From = []networkingv1.NetworkPolicyPeer{peer} }
	}
	ipBlock := func(cidr string, except ...string) networkingv1.NetworkPolicyPeer {
		return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}
	}
	labels := func(kv ...string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{kv[0]: kv[1]}}
	}
	types := func(ts ...networkingv1.PolicyType) func(*networkingv1.NetworkPolicy) {
		return func(np *networkingv1.NetworkPolicy) { np.Spec.PolicyTypes = ts }
	}
	const (
		invalid   = field.ErrorTypeInvalid
		required  = field.ErrorTypeRequired
		forbidden = field.ErrorTypeForbidden
		notSupp   = field.ErrorTypeNotSupported
	)
	p0 := "spec.ingress[0].ports[0]"
	from0 := "spec.ingress[0].from[0]"

	tests := []struct {
		name string
		np   *networkingv1.NetworkPolicy
		want []fieldErr
	}{
		{"the book's policy", bookPolicy(), nil},
		{"default deny all ingress", &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "default-deny", Namespace: "default"}}, nil},
		{"allow all egress", bookPolicy(func(np *networkingv1.NetworkPolicy) {
			np.Spec.Ingress, np.Spec.Egress = nil, []networkingv1.NetworkPolicyEgressRule{{}}
		}), nil},
		{"named port", bookPolicy(ingressPorts(port(intstr.FromString("redis"), nil))), nil},
		{"port range", bookPolicy(ingressPorts(port(intstr.FromInt32(32000), ptr(int32(32768))))), nil},
		{"port range of one", bookPolicy(ingressPorts(port(intstr.FromInt32(53), ptr(int32(53)), corev1.ProtocolUDP))), nil},
		{"SCTP", bookPolicy(ingressPorts(port(intstr.FromInt32(9000), nil, corev1.ProtocolSCTP))), nil},
		{"all ports of a protocol", bookPolicy(ingressPorts(networkingv1.NetworkPolicyPort{Protocol: ptr(corev1.ProtocolUDP)})), nil},
		{"namespace and pod selector together", bookPolicy(ingressPeer(networkingv1.NetworkPolicyPeer{
			NamespaceSelector: labels("team", "a"), PodSelector: labels("role", "client")})), nil},
		{"IPv6 ipBlock", bookPolicy(ingressPeer(ipBlock("fd00::/64", "fd00::/96"))), nil},
		{"policyTypes repeated (upstream checks only count and values)", bookPolicy(types("Ingress", "Ingress")), nil},

		{"port 0", bookPolicy(ingressPorts(port(intstr.FromInt32(0), nil))), []fieldErr{{invalid, p0 + ".port"}}},
		{"port too high", bookPolicy(ingressPorts(port(intstr.FromInt32(65536), nil))), []fieldErr{{invalid, p0 + ".port"}}},
		{"named port too long", bookPolicy(ingressPorts(port(intstr.FromString("redis-primary-port"), nil))), []fieldErr{{invalid, p0 + ".port"}}},
		{"named port with two dashes", bookPolicy(ingressPorts(port(intstr.FromString("re--dis"), nil))), []fieldErr{{invalid, p0 + ".port"}}},
		{"endPort below port", bookPolicy(ingressPorts(port(intstr.FromInt32(8080), ptr(int32(80))))), []fieldErr{{invalid, p0 + ".endPort"}}},
		{"endPort out of range", bookPolicy(ingressPorts(port(intstr.FromInt32(8080), ptr(int32(70000))))), []fieldErr{{invalid, p0 + ".endPort"}}},
		{"endPort with named port", bookPolicy(ingressPorts(port(intstr.FromString("http"), ptr(int32(80))))), []fieldErr{{invalid, p0 + ".endPort"}}},
		{"endPort without port", bookPolicy(ingressPorts(networkingv1.NetworkPolicyPort{EndPort: ptr(int32(80))})), []fieldErr{{invalid, p0 + ".endPort"}}},
		{"protocol ICMP", bookPolicy(ingressPorts(port(intstr.FromInt32(80), nil, "ICMP"))), []fieldErr{{notSupp, p0 + ".protocol"}}},
		{"second port of an egress rule", bookPolicy(func(np *networkingv1.NetworkPolicy) {
			np.Spec.Egress[0].Ports = append(np.Spec.Egress[0].Ports, port(intstr.FromInt32(-1), nil))
		}), []fieldErr{{invalid, "spec.egress[0].ports[1].port"}}},
		{"ipBlock without cidr", bookPolicy(ingressPeer(ipBlock(""))), []fieldErr{{required, from0 + ".ipBlock.cidr"}}},
		{"ipBlock cidr not a CIDR", bookPolicy(ingressPeer(ipBlock("172.17.0.0"))), []fieldErr{{invalid, from0 + ".ipBlock.cidr"}}},
		{"ipBlock cidr with host bits set", bookPolicy(ingressPeer(ipBlock("172.17.0.1/16", "172.17.1.0/24"))), []fieldErr{{invalid, from0 + ".ipBlock.cidr"}}},
		{"ipBlock cidr with leading zeros", bookPolicy(ingressPeer(ipBlock("172.017.0.0/16"))), []fieldErr{{invalid, from0 + ".ipBlock.cidr"}}},
		{"ipBlock except not a CIDR", bookPolicy(ingressPeer(ipBlock("172.17.0.0/16", "nope"))), []fieldErr{{invalid, from0 + ".ipBlock.except[0]"}}},
		{"ipBlock except outside", bookPolicy(ingressPeer(ipBlock("172.17.0.0/16", "172.17.1.0/24", "10.0.0.0/24"))),
			[]fieldErr{{invalid, from0 + ".ipBlock.except[1]"}}},
		{"ipBlock except equal", bookPolicy(ingressPeer(ipBlock("172.17.0.0/16", "172.17.0.0/16"))), []fieldErr{{invalid, from0 + ".ipBlock.except[0]"}}},
		{"ipBlock except wider", bookPolicy(ingressPeer(ipBlock("172.17.0.0/16", "172.16.0.0/12"))), []fieldErr{{invalid, from0 + ".ipBlock.except[0]"}}},
		{"ipBlock except of the other family", bookPolicy(ingressPeer(ipBlock("172.17.0.0/16", "fd00::/64"))), []fieldErr{{invalid, from0 + ".ipBlock.except[0]"}}},
		{"ipBlock with podSelector", bookPolicy(ingressPeer(networkingv1.NetworkPolicyPeer{
			IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8"}, PodSelector: labels("role", "client")})), []fieldErr{{forbidden, from0}}},
		{"ipBlock with namespaceSelector and a bad cidr", bookPolicy(ingressPeer(networkingv1.NetworkPolicyPeer{
			IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/33"}, NamespaceSelector: labels("team", "a")})),
			[]fieldErr{{invalid, from0 + ".ipBlock.cidr"}, {forbidden, from0}}},
		{"empty peer", bookPolicy(ingressPeer(networkingv1.NetworkPolicyPeer{})), []fieldErr{{required, from0}}},
		{"empty egress peer", bookPolicy(func(np *networkingv1.NetworkPolicy) {
			np.Spec.Egress[0].To = append(np.Spec.Egress[0].To, networkingv1.NetworkPolicyPeer{})
		}),
			[]fieldErr{{required, "spec.egress[0].to[1]"}}},
		{"podSelector label value invalid", bookPolicy(func(np *networkingv1.NetworkPolicy) { np.Spec.PodSelector = *labels("role", "db!") }),
			[]fieldErr{{invalid, "spec.podSelector.matchLabels"}}},
		{"podSelector key invalid", bookPolicy(func(np *networkingv1.NetworkPolicy) { np.Spec.PodSelector = *labels("-role", "db") }),
			[]fieldErr{{invalid, "spec.podSelector.matchLabels"}}},
		{"podSelector bad operator", bookPolicy(func(np *networkingv1.NetworkPolicy) {
			np.Spec.PodSelector = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "role", Operator: "Is", Values: []string{"db"}}}}
		}), []fieldErr{{invalid, "spec.podSelector.matchExpressions[0].operator"}}},
		{"peer podSelector Exists with values", bookPolicy(ingressPeer(networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "role", Operator: metav1.LabelSelectorOpExists, Values: []string{"x"}}}}})),
			[]fieldErr{{forbidden, from0 + ".podSelector.matchExpressions[0].values"}}},
		{"peer namespaceSelector value invalid", bookPolicy(ingressPeer(networkingv1.NetworkPolicyPeer{NamespaceSelector: labels("team", "a b")})),
			[]fieldErr{{invalid, from0 + ".namespaceSelector.matchLabels"}}},
		{"policyTypes lowercase", bookPolicy(types("ingress")), []fieldErr{{notSupp, "spec.policyTypes[0]"}}},
		{"policyTypes three", bookPolicy(types("Ingress", "Egress", "Egress")), []fieldErr{{invalid, "spec.policyTypes"}}},
		{"name with uppercase", bookPolicy(func(np *networkingv1.NetworkPolicy) { np.Name = "Test" }), []fieldErr{{invalid, "metadata.name"}}},
		{"no namespace", bookPolicy(func(np *networkingv1.NetworkPolicy) { np.Namespace = "" }), []fieldErr{{required, "metadata.namespace"}}},
		{"several errors in order", bookPolicy(func(np *networkingv1.NetworkPolicy) {
			np.Spec.Ingress[0].Ports = []networkingv1.NetworkPolicyPort{port(intstr.FromInt32(0), nil, "tcp")}
			np.Spec.Egress[0].To[0].IPBlock.Except = []string{"10.0.1.0/24"}
			np.Spec.PolicyTypes = []networkingv1.PolicyType{"Both"}
		}), []fieldErr{{notSupp, p0 + ".protocol"}, {invalid, p0 + ".port"}, {invalid, "spec.egress[0].to[0].ipBlock.except[0]"}, {notSupp, "spec.policyTypes[0]"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := fieldErrs(Validate(tc.np, nil, DefaultConfig()))
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("errors = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestValidateNetworkPolicyUpdate: what was stored stays acceptable (an
// invalid label value in the podSelector, a CIDR strict validation now
// refuses), but a new bad value is still rejected.
func TestValidateNetworkPolicyUpdate(t *testing.T) {
	legacyCIDR := func(np *networkingv1.NetworkPolicy) { np.Spec.Ingress[0].From[0].IPBlock.CIDR = "172.017.0.0/16" }
	legacyLabel := func(np *networkingv1.NetworkPolicy) {
		np.Spec.PodSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"db!"}}}
	}
	stored := func(mutate ...func(*networkingv1.NetworkPolicy)) *networkingv1.NetworkPolicy {
		np := bookPolicy(mutate...)
		np.UID, np.ResourceVersion, np.Generation = "3b0b3c9e-6d8e-4c1e-9a3f-0f6a1d2b7c11", "7", 1
		return np
	}
	tests := []struct {
		name     string
		old, obj *networkingv1.NetworkPolicy
		want     []fieldErr
	}{
		{"ports changed", stored(), stored(func(np *networkingv1.NetworkPolicy) {
			np.Spec.Ingress[0].Ports[0].Port = ptr(intstr.FromString("redis"))
		}), nil},
		{"legacy CIDR kept", stored(legacyCIDR), stored(legacyCIDR, func(np *networkingv1.NetworkPolicy) { np.Labels = map[string]string{"a": "b"} }), nil},
		{"legacy CIDR moved to another rule", stored(legacyCIDR), stored(func(np *networkingv1.NetworkPolicy) {
			np.Spec.Egress[0].To[0].IPBlock.CIDR = "172.017.0.0/16"
		}), nil},
		{"new legacy CIDR", stored(), stored(legacyCIDR), []fieldErr{{field.ErrorTypeInvalid, "spec.ingress[0].from[0].ipBlock.cidr"}}},
		{"legacy label value kept", stored(legacyLabel), stored(legacyLabel), nil},
		{"new invalid label value", stored(), stored(legacyLabel), []fieldErr{{field.ErrorTypeInvalid, "spec.podSelector.matchExpressions[0].values[0]"}}},
		{"the allowance covers the peers too, as upstream", stored(legacyLabel), stored(legacyLabel, func(np *networkingv1.NetworkPolicy) {
			np.Spec.Ingress[0].From[2].PodSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"x!"}}}
		}), nil},
		{"renamed", stored(), stored(func(np *networkingv1.NetworkPolicy) { np.Name = "other" }), []fieldErr{{field.ErrorTypeInvalid, "metadata.name"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := fieldErrs(Validate(tc.obj, tc.old, DefaultConfig()))
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("errors = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDefaultNetworkPolicy(t *testing.T) {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	ingress, egress := networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress
	spec := func(s networkingv1.NetworkPolicySpec) *networkingv1.NetworkPolicy {
		return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}, Spec: s}
	}
	p80 := ptr(intstr.FromInt32(80))
	tests := []struct {
		name string
		in   *networkingv1.NetworkPolicy
		want networkingv1.NetworkPolicySpec
	}{
		{"empty is an ingress policy", spec(networkingv1.NetworkPolicySpec{}),
			networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{ingress}}},
		{"egress rules add Egress", spec(networkingv1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{}}}),
			networkingv1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{}}, PolicyTypes: []networkingv1.PolicyType{ingress, egress}}},
		{"an empty egress list adds nothing", spec(networkingv1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{}}),
			networkingv1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{}, PolicyTypes: []networkingv1.PolicyType{ingress}}},
		{"given policyTypes are kept", spec(networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{egress}, Ingress: []networkingv1.NetworkPolicyIngressRule{{}}}),
			networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{egress}, Ingress: []networkingv1.NetworkPolicyIngressRule{{}}}},
		{"ports default to TCP in both directions", spec(networkingv1.NetworkPolicySpec{
			Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: p80}, {Protocol: &udp}}}},
			Egress:  []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{}}}},
		}), networkingv1.NetworkPolicySpec{
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: p80, Protocol: &tcp}, {Protocol: &udp}}}},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp}}}},
			PolicyTypes: []networkingv1.PolicyType{ingress, egress},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			np := tc.in.DeepCopy()
			Default(np, DefaultConfig())
			if !reflect.DeepEqual(np.Spec, tc.want) {
				t.Errorf("spec = %+v, want %+v", np.Spec, tc.want)
			}
		})
	}
}

func TestNetworkPolicyWarnings(t *testing.T) {
	peer := func(cidr string, except ...string) []networkingv1.NetworkPolicyPeer {
		return []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}, {IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}}
	}
	tests := []struct {
		name string
		np   *networkingv1.NetworkPolicy
		want []string
	}{
		{"canonical", bookPolicy(), nil},
		{"IPv6 not in RFC 5952 form", bookPolicy(func(np *networkingv1.NetworkPolicy) {
			np.Spec.Ingress[0].From = peer("FD00:0::/64", "fd00::/96", "fd00:0:0:0:1::/80")
		}), []string{
			`spec.ingress[0].from[1].ipBlock.cidr: IPv6 CIDR value "FD00:0::/64" should be in RFC 5952 canonical format ("fd00::/64")`,
			`spec.ingress[0].from[1].ipBlock.except[1]: IPv6 CIDR value "fd00:0:0:0:1::/80" should be in RFC 5952 canonical format ("fd00::1:0:0:0/80")`,
		}},
		{"stored legacy values in egress", bookPolicy(func(np *networkingv1.NetworkPolicy) {
			np.Spec.Egress[0].To = peer("10.0.0.1/24", "010.0.0.128/25")
		}), []string{
			`spec.egress[0].to[1].ipBlock.cidr: CIDR value "10.0.0.1/24" is ambiguous in this context (should be "10.0.0.0/24" or "10.0.0.1/32"?)`,
			`spec.egress[0].to[1].ipBlock.except[0]: non-standard CIDR value "010.0.0.128/25" is invalid: use "10.0.0.128/25"`,
		}},
		{"unparsable is left to validation", bookPolicy(func(np *networkingv1.NetworkPolicy) { np.Spec.Egress[0].To = peer("nope") }), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Warnings(tc.np); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("warnings = %q, want %q", got, tc.want)
			}
		})
	}
}
