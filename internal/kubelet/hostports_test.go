package kubelet

import (
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/iptables"
	"github.com/minikit/minikit/internal/iptables/iptablestest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

func hostPortPod(name, uid, podIP, hostIP string, proto corev1.Protocol, hostPort, containerPort int32) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "hp", UID: types.UID(uid)},
		Spec: corev1.PodSpec{NodeName: "node1", Containers: []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{
			{ContainerPort: containerPort, HostPort: hostPort, HostIP: hostIP, Protocol: proto}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: podIP},
	}
}

func hostPortAgent(t *testing.T, pods ...*corev1.Pod) (*Agent, *iptablestest.Fake, cache.Indexer) {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, p := range pods {
		idx.Add(p)
	}
	ipt := iptablestest.NewFake()
	a := &Agent{cfg: Config{NodeName: "node1", NodeIP: netip.MustParseAddr("192.168.0.2")}, log: slog.New(slog.DiscardHandler),
		ipt: ipt, pods: corelisters.NewPodLister(idx)}
	return a, ipt, idx
}

// The hostport spec's three pods: one port, told apart by hostIP and protocol.
func TestHostPortRules(t *testing.T) {
	p1 := hostPortPod("pod1", "u1", "10.244.1.5", "127.0.0.1", corev1.ProtocolTCP, 54323, 8080)
	p2 := hostPortPod("pod2", "u2", "10.244.1.6", "192.168.0.2", corev1.ProtocolTCP, 54323, 8080)
	p3 := hostPortPod("pod3", "u3", "10.244.1.7", "192.168.0.2", corev1.ProtocolUDP, 54323, 8080)
	a, ipt, idx := hostPortAgent(t, p1, p2, p3)
	if err := a.syncHostPorts(); err != nil {
		t.Fatal(err)
	}
	c1, c2, c3 := podHostPorts(p1)[0].chain(), podHostPorts(p2)[0].chain(), podHostPorts(p3)[0].chain()
	want := map[string][]string{
		chainHostPorts: {
			`-m comment --comment "hp/pod1 hostPort 54323/tcp" -p tcp -d 127.0.0.1/32 --dport 54323 -j ` + c1,
			`-m comment --comment "hp/pod2 hostPort 54323/tcp" -p tcp -d 192.168.0.2/32 --dport 54323 -j ` + c2,
			`-m comment --comment "hp/pod3 hostPort 54323/udp" -p udp -d 192.168.0.2/32 --dport 54323 -j ` + c3,
		},
		c1: {
			`-m comment --comment "hp/pod1 hostPort 54323/tcp: hairpin" -s 10.244.1.5/32 -j MARK --or-mark 0x2000`,
			`-m comment --comment "hp/pod1 hostPort 54323/tcp: localhost" -s 127.0.0.0/8 -j MARK --or-mark 0x2000`,
			`-m comment --comment "hp/pod1 hostPort 54323/tcp" -p tcp -j DNAT --to-destination 10.244.1.5:8080`,
		},
		c3: {
			`-m comment --comment "hp/pod3 hostPort 54323/udp: hairpin" -s 10.244.1.7/32 -j MARK --or-mark 0x2000`,
			`-m comment --comment "hp/pod3 hostPort 54323/udp" -p udp -j DNAT --to-destination 10.244.1.7:8080`,
		},
		chainHostPortsMasq: {
			`-m mark ! --mark 0x2000/0x2000 -j RETURN`,
			`-j MARK --xor-mark 0x2000`,
			`-m comment --comment "hostport hairpin and localhost traffic" -j MASQUERADE`,
		},
		"PREROUTING":  {`-m comment --comment "minikit hostports" -m addrtype --dst-type LOCAL -j MINIKIT-HOSTPORTS`},
		"OUTPUT":      {`-m comment --comment "minikit hostports" -m addrtype --dst-type LOCAL -j MINIKIT-HOSTPORTS`},
		"POSTROUTING": {`-m comment --comment "minikit hostport masquerade" -j MINIKIT-HOSTPORTS-MASQ`},
	}
	check := func(when string) {
		t.Helper()
		for chain, rules := range want {
			var full []string
			for _, r := range rules {
				full = append(full, "-A "+chain+" "+r)
			}
			if got := ipt.Rules(iptables.TableNAT, chain); strings.Join(got, "\n") != strings.Join(full, "\n") {
				t.Errorf("%s: chain %s:\n%s\nwant\n%s", when, chain, strings.Join(got, "\n"), strings.Join(full, "\n"))
			}
		}
	}
	check("first sync")

	// Unchanged: no restore.
	n := len(ipt.Restores)
	if err := a.syncHostPorts(); err != nil {
		t.Fatal(err)
	}
	if len(ipt.Restores) != n {
		t.Errorf("a sync with nothing changed restored %d times", len(ipt.Restores)-n)
	}

	// Flushed by hand: repaired, jumps included.
	ipt.FlushTable(iptables.TableNAT)
	if err := a.syncHostPorts(); err != nil {
		t.Fatal(err)
	}
	check("after a flush")

	// pod2 goes: its chain goes with it.
	idx.Delete(p2)
	if err := a.syncHostPorts(); err != nil {
		t.Fatal(err)
	}
	save, _ := ipt.Save(iptables.TableNAT)
	if strings.Contains(string(save), c2) || strings.Contains(string(save), "pod2") {
		t.Errorf("pod2's rules outlived it:\n%s", save)
	}
	if got := len(ipt.Rules(iptables.TableNAT, chainHostPorts)); got != 2 {
		t.Errorf("%s has %d rules after pod2 went, want 2", chainHostPorts, got)
	}

	// minikit down removes everything.
	if err := removeHostPorts(ipt); err != nil {
		t.Fatal(err)
	}
	save, _ = ipt.Save(iptables.TableNAT)
	if strings.Contains(string(save), "MINIKIT-H") {
		t.Errorf("removeHostPorts left:\n%s", save)
	}
}

// A node that never ran a hostPort pod gets no hostPort chains, and
// hostNetwork, finished or not yet addressed pods get no DNAT.
func TestHostPortRulesSkipped(t *testing.T) {
	hn := hostPortPod("hn", "u1", "192.168.0.2", "", corev1.ProtocolTCP, 8080, 8080)
	hn.Spec.HostNetwork = true
	done := hostPortPod("done", "u2", "10.244.1.6", "", corev1.ProtocolTCP, 8081, 8081)
	done.Status.Phase = corev1.PodSucceeded
	pending := hostPortPod("pending", "u3", "", "", corev1.ProtocolTCP, 8082, 8082)
	a, ipt, _ := hostPortAgent(t, hn, done, pending)
	if err := a.syncHostPorts(); err != nil {
		t.Fatal(err)
	}
	if len(ipt.Restores) != 0 {
		t.Errorf("restored without hostPort pods:\n%s", ipt.Restores[0].Data)
	}
}

// Admission follows the scheduler's NodePorts conflict rules.
func TestAdmitHostPorts(t *testing.T) {
	running := hostPortPod("running", "u1", "10.244.1.5", "127.0.0.1", corev1.ProtocolTCP, 54323, 8080)
	running.Status.StartTime = &metav1.Time{}
	a, _, _ := hostPortAgent(t, running)
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		admit bool
	}{
		{"other hostIP", hostPortPod("p2", "u2", "", "192.168.0.2", corev1.ProtocolTCP, 54323, 8080), true},
		{"other protocol", hostPortPod("p3", "u3", "", "192.168.0.2", corev1.ProtocolUDP, 54323, 8080), true},
		{"same hostIP as an admitted pod", hostPortPod("p4", "u4", "", "192.168.0.2", corev1.ProtocolTCP, 54323, 80), false},
		{"every address", hostPortPod("p5", "u5", "", "", corev1.ProtocolUDP, 54323, 80), false},
		{"same hostIP as a pod that ran before the agent", hostPortPod("p6", "u6", "", "127.0.0.1", corev1.ProtocolTCP, 54323, 80), false},
		{"other port", hostPortPod("p7", "u7", "", "", corev1.ProtocolTCP, 54324, 80), true},
	} {
		if got := a.admitHostPorts(tc.pod, false); got != tc.admit {
			t.Errorf("%s: admitted %v, want %v", tc.name, got, tc.admit)
		}
	}
	if !a.admitHostPorts(hostPortPod("p8", "u8", "", "", corev1.ProtocolTCP, 54324, 80), true) {
		t.Error("a forced admission was refused")
	}
	a.forgetHostPorts("u7")
	a.forgetHostPorts("u8")
	if !a.admitHostPorts(hostPortPod("p9", "u9", "", "", corev1.ProtocolTCP, 54324, 80), false) {
		t.Error("a port freed by its pods was refused")
	}
}
