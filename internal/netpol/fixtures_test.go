package netpol

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// world is a stateful fake of the three listers.
type world struct {
	mu   sync.Mutex
	pols []*networkingv1.NetworkPolicy
	pods []*corev1.Pod
	nss  []*corev1.Namespace
}

type polLister struct{ w *world }
type podLister struct{ w *world }
type nsLister struct{ w *world }

func (l polLister) List(s labels.Selector) ([]*networkingv1.NetworkPolicy, error) {
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	return append([]*networkingv1.NetworkPolicy(nil), l.w.pols...), nil
}
func (l podLister) List(s labels.Selector) ([]*corev1.Pod, error) {
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	return append([]*corev1.Pod(nil), l.w.pods...), nil
}
func (l nsLister) List(s labels.Selector) ([]*corev1.Namespace, error) {
	l.w.mu.Lock()
	defer l.w.mu.Unlock()
	return append([]*corev1.Namespace(nil), l.w.nss...), nil
}

func (w *world) listers() Listers { return Listers{polLister{w}, podLister{w}, nsLister{w}} }

func (w *world) setPolicies(p ...*networkingv1.NetworkPolicy) {
	w.mu.Lock()
	w.pols = p
	w.mu.Unlock()
}

func ns(name string, lbl ...string) *corev1.Namespace {
	l := kv(lbl)
	l["kubernetes.io/metadata.name"] = name
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
}

func kv(s []string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(s); i += 2 {
		m[s[i]] = s[i+1]
	}
	return m
}

// pod is a running pod on node with ip, labels and named container ports
// ("http=8080/TCP").
func pod(namespace, name, node, ip string, lbl []string, ports ...corev1.ContainerPort) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: kv(lbl)},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Ports: ports}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip},
	}
}

// dual gives p an IPv6 address beside its IPv4 one: status.podIPs lists
// both, IPv4 first, as on a dual-stack node.
func dual(p *corev1.Pod, ip6 string) *corev1.Pod {
	p.Status.PodIPs = []corev1.PodIP{{IP: p.Status.PodIP}, {IP: ip6}}
	return p
}

func cport(name string, n int32, proto corev1.Protocol) corev1.ContainerPort {
	return corev1.ContainerPort{Name: name, ContainerPort: n, Protocol: proto}
}

func sel(lbl ...string) *metav1.LabelSelector { return &metav1.LabelSelector{MatchLabels: kv(lbl)} }

func policy(namespace, name string, podSel *metav1.LabelSelector, types ...networkingv1.PolicyType) *networkingv1.NetworkPolicy {
	p := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: types}}
	if podSel != nil {
		p.Spec.PodSelector = *podSel
	}
	return p
}

func ingress(p *networkingv1.NetworkPolicy, from []networkingv1.NetworkPolicyPeer, ports ...networkingv1.NetworkPolicyPort) *networkingv1.NetworkPolicy {
	p.Spec.Ingress = append(p.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: from, Ports: ports})
	return p
}

func egress(p *networkingv1.NetworkPolicy, to []networkingv1.NetworkPolicyPeer, ports ...networkingv1.NetworkPolicyPort) *networkingv1.NetworkPolicy {
	p.Spec.Egress = append(p.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: to, Ports: ports})
	return p
}

func tcp(n int) networkingv1.NetworkPolicyPort {
	v := intstr.FromInt32(int32(n))
	return networkingv1.NetworkPolicyPort{Port: &v}
}

func named(name string, proto corev1.Protocol) networkingv1.NetworkPolicyPort {
	v := intstr.FromString(name)
	return networkingv1.NetworkPolicyPort{Port: &v, Protocol: &proto}
}

func portRange(from, to int32) networkingv1.NetworkPolicyPort {
	v := intstr.FromInt32(from)
	return networkingv1.NetworkPolicyPort{Port: &v, EndPort: &to}
}

func udp(n int) networkingv1.NetworkPolicyPort {
	p := tcp(n)
	u := corev1.ProtocolUDP
	p.Protocol = &u
	return p
}

func podPeer(podSel, nsSel *metav1.LabelSelector) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{PodSelector: podSel, NamespaceSelector: nsSel}
}

func blockPeer(cidr string, except ...string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}
}

const (
	tIn  = networkingv1.PolicyTypeIngress
	tOut = networkingv1.PolicyTypeEgress
)

type networkingPeer = networkingv1.NetworkPolicyPeer

func policies(ps []any) []*networkingv1.NetworkPolicy {
	var out []*networkingv1.NetworkPolicy
	for _, p := range ps {
		out = append(out, p.(*networkingv1.NetworkPolicy))
	}
	return out
}
