package kubelet

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/minikit/minikit/internal/iptables"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// hostPorts: a container port with a hostPort is reachable at the node's
// address(es) on that port, as the CNI portmap plugin (and before it the
// kubelet's hostport manager) makes it: DNAT in the node's nat table from
// PREROUTING and OUTPUT for local destinations, restricted to hostIP when it
// is set, and masquerade for the two kinds of connection the pod could not
// answer otherwise: hairpin (the pod reaching its own hostPort) and localhost
// (127.0.0.1:hostPort on the node, which also needs route_localnet on cni0).
//
// The chains are MINIKIT-HOSTPORTS (jumped to from PREROUTING and OUTPUT),
// MINIKIT-HOSTPORTS-MASQ (from POSTROUTING) and one MINIKIT-HP-<hash> per
// mapping. Not KUBE-HOSTPORTS / KUBE-HP-* as the old kubelet named them: the
// service proxy owns every KUBE-* chain and its full syncs rewrite the nat
// table whole, keeping only chains that are not KUBE-*; MINIKIT-* chains are
// the node agent's and survive those syncs (with the jumps into them, which
// the proxy writes back). They are rendered whole and applied with one
// iptables-restore per change, and re-applied when the kernel no longer holds
// them (a flush by hand).
//
// Two pods may not hold one hostPort: the agent admits pods as the kubelet's
// admission does (the scheduler's NodePorts predicate), and rejects a pod whose
// hostPort, protocol and hostIP clash with a pod the node already runs.

const (
	chainHostPorts     = "MINIKIT-HOSTPORTS"
	chainHostPortsMasq = "MINIKIT-HOSTPORTS-MASQ"
	prefixHostPort     = "MINIKIT-HP-"
	// hostPortMasqMark is the packet mark bit that asks MINIKIT-HOSTPORTS-MASQ
	// to masquerade (the portmap plugin's default bit 13; kube-proxy uses
	// 0x4000 and 0x8000).
	hostPortMasqMark = "0x2000"

	jumpHostPortsComment = "minikit hostports"
	jumpMasqComment      = "minikit hostport masquerade"
)

// hostPortMapping is one containerPort.hostPort of a running pod.
type hostPortMapping struct {
	pod           string // namespace/name
	uid           types.UID
	protocol      corev1.Protocol
	hostIP        string // "" means every address of the node
	hostPort      int32
	podIP         string
	containerPort int32
}

func (m hostPortMapping) chain() string {
	sum := sha256.Sum256([]byte(string(m.uid) + "/" + string(m.protocol) + "/" + m.hostIP + "/" + strconv.Itoa(int(m.hostPort))))
	return prefixHostPort + base32.StdEncoding.EncodeToString(sum[:])[:16]
}

// localhost reports whether 127.0.0.1:hostPort reaches the mapping.
func (m hostPortMapping) localhost() bool {
	if m.hostIP == "" {
		return true
	}
	a, err := netip.ParseAddr(m.hostIP)
	return err == nil && a.Is4() && a.IsLoopback()
}

// podHostPorts lists the hostPorts of a pod's containers, with the hostIP
// 0.0.0.0 (and ::) read as "every address" and the protocol defaulted to TCP.
func podHostPorts(pod *corev1.Pod) []hostPortMapping {
	var out []hostPortMapping
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			for _, p := range c.Ports {
				if p.HostPort <= 0 {
					continue
				}
				proto := p.Protocol
				if proto == "" {
					proto = corev1.ProtocolTCP
				}
				hostIP := p.HostIP
				if hostIP == "0.0.0.0" || hostIP == "::" {
					hostIP = ""
				}
				out = append(out, hostPortMapping{pod: pod.Namespace + "/" + pod.Name, uid: pod.UID, protocol: proto,
					hostIP: hostIP, hostPort: p.HostPort, podIP: pod.Status.PodIP, containerPort: p.ContainerPort})
			}
		}
	}
	return out
}

// hostPortsConflict is the scheduler's HostPortInfo.CheckConflict: one
// protocol and port clash when either side binds every address or both bind
// the same one.
func hostPortsConflict(a, b hostPortMapping) bool {
	return a.protocol == b.protocol && a.hostPort == b.hostPort && (a.hostIP == "" || b.hostIP == "" || a.hostIP == b.hostIP)
}

// hostPortState is what the agent keeps for hostPorts.
type hostPortState struct {
	// admitted holds the hostPorts of the pods this agent admitted (under mu).
	admitted map[types.UID][]hostPortMapping
	// applied is the rule text last restored; "" before the first apply.
	applied string
	// udp holds the UDP mappings last applied, by chain, to tell which came
	// or went (their conntrack entries are deleted).
	udp  map[string]hostPortMapping
	kick chan struct{}
}

// Admission rejection as the kubelet reports it (lifecycle.PredicateFailureError
// of the scheduler's NodePorts plugin, through Kubelet.rejectPod).
const (
	rejectReasonNodePorts  = "NodePorts"
	rejectMessageNodePorts = "Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports"
)

// admitHostPorts admits pod unless one of its hostPorts clashes with a pod the
// node runs: one this agent admitted, or one that shows it ran here (a start
// time) before the agent started. force admits without checking (a pod the
// node already runs, adopted after a restart).
func (a *Agent) admitHostPorts(pod *corev1.Pod, force bool) bool {
	want := podHostPorts(pod)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hostPorts.admitted == nil {
		a.hostPorts.admitted = map[types.UID][]hostPortMapping{}
	}
	if len(want) == 0 {
		return true
	}
	if !force {
		running := map[types.UID][]hostPortMapping{}
		for uid, ms := range a.hostPorts.admitted {
			running[uid] = ms
		}
		if pods, err := a.pods.List(everything()); err == nil {
			for _, p := range pods {
				if _, ok := running[p.UID]; !ok && p.Status.StartTime != nil && !podFinished(p) {
					running[p.UID] = podHostPorts(p)
				}
			}
		}
		for uid, ms := range running {
			if uid == pod.UID {
				continue
			}
			for _, m := range ms {
				for _, w := range want {
					if hostPortsConflict(m, w) {
						a.log.Warn("rejecting pod: its hostPort is taken", "pod", pod.Namespace+"/"+pod.Name,
							"hostPort", w.hostPort, "protocol", w.protocol, "hostIP", w.hostIP, "holder", m.pod)
						return false
					}
				}
			}
		}
	}
	a.hostPorts.admitted[pod.UID] = want
	return true
}

// forgetHostPorts releases a pod's hostPorts once its sandbox is gone.
func (a *Agent) forgetHostPorts(uid types.UID) {
	a.mu.Lock()
	_, had := a.hostPorts.admitted[uid]
	delete(a.hostPorts.admitted, uid)
	a.mu.Unlock()
	if had {
		a.kickHostPorts()
	}
}

func (a *Agent) kickHostPorts() {
	if a.hostPorts.kick == nil {
		return
	}
	select {
	case a.hostPorts.kick <- struct{}{}:
	default:
	}
}

// desiredHostPorts is every hostPort mapping of the node's running pods that
// have their own network namespace (a hostNetwork pod's hostPort is its own
// port on the node: nothing to map). Pods rejected at admission are Failed.
// Should two running pods still clash (a restart raced an admission), the
// older pod keeps the port.
func (a *Agent) desiredHostPorts() ([]hostPortMapping, error) {
	pods, err := a.pods.List(everything())
	if err != nil {
		return nil, err
	}
	slices.SortFunc(pods, func(x, y *corev1.Pod) int {
		if c := x.CreationTimestamp.Compare(y.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(string(x.UID), string(y.UID))
	})
	var out []hostPortMapping
	for _, p := range pods {
		if p.Spec.HostNetwork || p.Status.PodIP == "" || podFinished(p) {
			continue
		}
		for _, m := range podHostPorts(p) {
			// The pod network's primary family only (IPv4, or IPv6 on an
			// IPv6-only node): the rules go to that family's iptables.
			if ip, err := netip.ParseAddr(m.podIP); err != nil || ip.Is6() != a.podCIDR.Addr().Is6() {
				continue
			}
			if ip, err := netip.ParseAddr(m.hostIP); m.hostIP != "" && (err != nil || ip.Is6() != a.podCIDR.Addr().Is6()) {
				continue
			}
			if slices.ContainsFunc(out, func(o hostPortMapping) bool { return hostPortsConflict(o, m) }) {
				continue
			}
			out = append(out, m)
		}
	}
	return out, nil
}

// renderHostPorts is the iptables-restore input for the mappings (nat table,
// --noflush): the top chains, one chain per mapping, and -X for the stale
// per-mapping chains the kernel still has.
func renderHostPorts(ms []hostPortMapping, stale []string) string {
	var b strings.Builder
	b.WriteString("*nat\n")
	fmt.Fprintf(&b, ":%s - [0:0]\n:%s - [0:0]\n", chainHostPorts, chainHostPortsMasq)
	for _, m := range ms {
		fmt.Fprintf(&b, ":%s - [0:0]\n", m.chain())
	}
	for _, c := range stale {
		fmt.Fprintf(&b, ":%s - [0:0]\n", c)
	}
	fmt.Fprintf(&b, "-A %s -m mark ! --mark %s/%s -j RETURN\n", chainHostPortsMasq, hostPortMasqMark, hostPortMasqMark)
	fmt.Fprintf(&b, "-A %s -j MARK --xor-mark %s\n", chainHostPortsMasq, hostPortMasqMark)
	fmt.Fprintf(&b, "-A %s -m comment --comment \"hostport hairpin and localhost traffic\" -j MASQUERADE\n", chainHostPortsMasq)
	for _, m := range ms {
		proto := strings.ToLower(string(m.protocol))
		comment := fmt.Sprintf("%s hostPort %d/%s", m.pod, m.hostPort, proto)
		dst := ""
		if m.hostIP != "" {
			dst = " -d " + hostPrefix(m.hostIP)
		}
		fmt.Fprintf(&b, "-A %s -m comment --comment \"%s\" -p %s%s --dport %d -j %s\n", chainHostPorts, comment, proto, dst, m.hostPort, m.chain())
		fmt.Fprintf(&b, "-A %s -m comment --comment \"%s: hairpin\" -s %s -j MARK --or-mark %s\n", m.chain(), comment, hostPrefix(m.podIP), hostPortMasqMark)
		if m.localhost() {
			fmt.Fprintf(&b, "-A %s -m comment --comment \"%s: localhost\" -s 127.0.0.0/8 -j MARK --or-mark %s\n", m.chain(), comment, hostPortMasqMark)
		}
		fmt.Fprintf(&b, "-A %s -m comment --comment \"%s\" -p %s -j DNAT --to-destination %s\n", m.chain(), comment, proto,
			netip.AddrPortFrom(netip.MustParseAddr(m.podIP), uint16(m.containerPort)))
	}
	for _, c := range stale {
		fmt.Fprintf(&b, "-X %s\n", c)
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// hostPrefix is one address as a prefix of its family's length (/32, /128).
func hostPrefix(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	return netip.PrefixFrom(a, a.BitLen()).String()
}

// hostPortKernel is what the node's nat table holds of the hostPort chains.
type hostPortKernel struct {
	topChains           bool
	hpChains            []string
	topRules, masqRules int
	hpRules             int
	jumps               map[string]bool // built-in chain -> our jump is there
}

func readHostPortKernel(save string) hostPortKernel {
	k := hostPortKernel{jumps: map[string]bool{}}
	top, masq := false, false
	for _, l := range strings.Split(save, "\n") {
		switch {
		case strings.HasPrefix(l, ":"+chainHostPorts+" "):
			top = true
		case strings.HasPrefix(l, ":"+chainHostPortsMasq+" "):
			masq = true
		case strings.HasPrefix(l, ":"+prefixHostPort):
			k.hpChains = append(k.hpChains, strings.Fields(l[1:])[0])
		case strings.HasPrefix(l, "-A "+chainHostPorts+" "):
			k.topRules++
		case strings.HasPrefix(l, "-A "+chainHostPortsMasq+" "):
			k.masqRules++
		case strings.HasPrefix(l, "-A "+prefixHostPort):
			k.hpRules++
		case strings.HasPrefix(l, "-A PREROUTING ") && strings.HasSuffix(l, "-j "+chainHostPorts):
			k.jumps["PREROUTING"] = true
		case strings.HasPrefix(l, "-A OUTPUT ") && strings.HasSuffix(l, "-j "+chainHostPorts):
			k.jumps["OUTPUT"] = true
		case strings.HasPrefix(l, "-A POSTROUTING ") && strings.HasSuffix(l, "-j "+chainHostPortsMasq):
			k.jumps["POSTROUTING"] = true
		}
	}
	k.topChains = top && masq
	return k
}

// intact reports whether the kernel holds exactly the rules of ms (by count:
// iptables-save rewrites rules in its own words).
func (k hostPortKernel) intact(ms []hostPortMapping) bool {
	want := make([]string, 0, len(ms))
	rules := 0
	for _, m := range ms {
		want = append(want, m.chain())
		rules += 2
		if m.localhost() {
			rules++
		}
	}
	have := slices.Clone(k.hpChains)
	slices.Sort(want)
	slices.Sort(have)
	return k.topChains && slices.Equal(want, have) && k.topRules == len(ms) && k.masqRules == 3 && k.hpRules == rules &&
		k.jumps["PREROUTING"] && k.jumps["OUTPUT"] && k.jumps["POSTROUTING"]
}

// syncHostPorts converges the node's hostPort rules to the running pods.
func (a *Agent) syncHostPorts() error {
	if a.ipt == nil {
		return nil
	}
	ms, err := a.desiredHostPorts()
	if err != nil {
		return err
	}
	save, err := a.ipt.Save(iptables.TableNAT)
	if err != nil {
		return fmt.Errorf("reading the nat table: %w", err)
	}
	k := readHostPortKernel(string(save))
	if len(ms) == 0 && !k.topChains && len(k.hpChains) == 0 {
		// Never had a hostPort: nothing of ours to write.
		return nil
	}
	if slices.ContainsFunc(ms, hostPortMapping.localhost) && a.net != nil {
		if err := a.net.EnsureBridgeRouteLocalnet(); err != nil {
			return err
		}
	}
	var stale []string
	for _, c := range k.hpChains {
		if !slices.ContainsFunc(ms, func(m hostPortMapping) bool { return m.chain() == c }) {
			stale = append(stale, c)
		}
	}
	data := renderHostPorts(ms, stale)
	if data == a.hostPorts.applied && k.intact(ms) {
		return nil
	}
	if err := a.ipt.Restore([]byte(data), true); err != nil {
		return fmt.Errorf("applying hostPort rules: %w", err)
	}
	if a.hostPorts.applied != "" && data == a.hostPorts.applied {
		a.log.Info("repaired hostPort rules", "chain", chainHostPorts)
	}
	a.hostPorts.applied = data
	a.log.Debug("synced hostPort rules", "mappings", len(ms), "staleChains", len(stale))
	a.flushUDPConntrack(ms)
	for _, j := range []struct{ chain, comment, target string }{
		{"PREROUTING", jumpHostPortsComment, chainHostPorts},
		{"OUTPUT", jumpHostPortsComment, chainHostPorts},
	} {
		if k.jumps[j.chain] {
			continue
		}
		if _, err := a.ipt.EnsureRule(iptables.Append, iptables.TableNAT, j.chain,
			"-m", "comment", "--comment", j.comment, "-m", "addrtype", "--dst-type", "LOCAL", "-j", j.target); err != nil {
			return err
		}
	}
	if !k.jumps["POSTROUTING"] {
		if _, err := a.ipt.EnsureRule(iptables.Append, iptables.TableNAT, "POSTROUTING",
			"-m", "comment", "--comment", jumpMasqComment, "-j", chainHostPortsMasq); err != nil {
			return err
		}
	}
	return nil
}

// flushUDPConntrack deletes the conntrack entries of the UDP hostPorts that
// came or went since the last apply.
func (a *Agent) flushUDPConntrack(ms []hostPortMapping) {
	now := map[string]hostPortMapping{}
	for _, m := range ms {
		if m.protocol == corev1.ProtocolUDP {
			now[m.chain()] = m
		}
	}
	changed := map[string]hostPortMapping{}
	for c, m := range now {
		if _, ok := a.hostPorts.udp[c]; !ok {
			changed[c] = m
		}
	}
	for c, m := range a.hostPorts.udp {
		if _, ok := now[c]; !ok {
			changed[c] = m
		}
	}
	a.hostPorts.udp = now
	if a.net == nil {
		return
	}
	for _, m := range changed {
		dst, _ := netip.ParseAddr(m.hostIP) // "" (every address) is the zero Addr: any destination
		if err := a.net.DeleteUDPConntrack(dst, uint16(m.hostPort)); err != nil {
			a.log.Warn("deleting conntrack entries of a UDP hostPort", "hostPort", m.hostPort, "pod", m.pod, "err", err)
		}
	}
}

// removeHostPorts deletes the hostPort chains and the jumps into them (minikit down).
func removeHostPorts(ipt iptables.Interface) error {
	ipt.DeleteRule(iptables.TableNAT, "PREROUTING", "-m", "comment", "--comment", jumpHostPortsComment, "-m", "addrtype", "--dst-type", "LOCAL", "-j", chainHostPorts)
	ipt.DeleteRule(iptables.TableNAT, "OUTPUT", "-m", "comment", "--comment", jumpHostPortsComment, "-m", "addrtype", "--dst-type", "LOCAL", "-j", chainHostPorts)
	ipt.DeleteRule(iptables.TableNAT, "POSTROUTING", "-m", "comment", "--comment", jumpMasqComment, "-j", chainHostPortsMasq)
	save, err := ipt.Save(iptables.TableNAT)
	if err != nil {
		return err
	}
	k := readHostPortKernel(string(save))
	var firstErr error
	for _, c := range append([]string{chainHostPorts, chainHostPortsMasq}, k.hpChains...) {
		if err := ipt.DeleteChain(iptables.TableNAT, c); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

func (a *Agent) syncHostPortsLogged() {
	if err := a.syncHostPorts(); err != nil {
		a.log.Error("syncing hostPort rules", "err", err)
	}
}
