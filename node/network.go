package node

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/minikit/minikit/iptables"

	corev1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// masqChain holds the rules that masquerade pod traffic leaving the cluster network
// to the node's address, as flannel does for host-gw.
const masqChain = "MINIKIT-POSTROUTING"

// syncNetwork converges what the node needs beyond its pods: host-gw routes to
// every other node's pod CIDR via that node's InternalIP, and the masquerade of
// pod traffic to non-cluster addresses.
func (a *Agent) syncNetwork(nodes corelisters.NodeLister) {
	if nodes != nil {
		want := map[netip.Prefix]netip.Addr{}
		all, err := nodes.List(everything())
		if err != nil {
			a.log.Error("listing nodes for routes", "err", err)
			return
		}
		for _, n := range all {
			if n.Name == a.cfg.NodeName || n.Spec.PodCIDR == "" {
				continue
			}
			cidr, err1 := netip.ParsePrefix(n.Spec.PodCIDR)
			ip, err2 := netip.ParseAddr(internalIP(n))
			if err1 != nil || err2 != nil {
				continue
			}
			want[cidr.Masked()] = ip
		}
		changed, err := a.net.SyncRoutes(want)
		for _, c := range changed {
			a.log.Info("host-gw route", "change", c)
		}
		if err != nil {
			a.log.Error("syncing routes to other nodes", "err", err)
		}
	}
	if a.ipt != nil {
		if err := a.syncMasquerade(); err != nil {
			a.log.Error("syncing pod masquerade rules", "err", err)
		}
	}
}

func internalIP(n *corev1.Node) string {
	for _, addr := range n.Status.Addresses {
		if addr.Type == corev1.NodeInternalIP {
			return addr.Address
		}
	}
	return ""
}

func (a *Agent) syncMasquerade() error {
	cidr := a.cfg.ClusterCIDR.String()
	masq := "-j MASQUERADE"
	if a.ipt.HasRandomFully() {
		masq += " --random-fully"
	}
	rules := []string{
		fmt.Sprintf("-A %s -s %s -d %s -m comment --comment \"pod to pod: no NAT\" -j RETURN", masqChain, cidr, cidr),
		fmt.Sprintf("-A %s -s %s ! -d 224.0.0.0/4 -m comment --comment \"pods to outside the cluster: masquerade\" %s", masqChain, cidr, masq),
	}
	if a.masqApplied && a.masqChainIntact(rules) {
		return a.ensureMasqJump()
	}
	data := "*nat\n:" + masqChain + " - [0:0]\n" + strings.Join(rules, "\n") + "\nCOMMIT\n"
	if err := a.ipt.Restore([]byte(data), true); err != nil {
		return err
	}
	if a.masqApplied {
		a.log.Info("repaired pod masquerade rules", "chain", masqChain)
	}
	a.masqApplied = true
	return a.ensureMasqJump()
}

// masqChainIntact checks the kernel still holds our rules (someone may have
// flushed the nat table by hand).
func (a *Agent) masqChainIntact(rules []string) bool {
	out, err := a.ipt.Save(iptables.TableNAT)
	if err != nil {
		return false
	}
	s := string(out)
	n := strings.Count(s, "-A "+masqChain+" ")
	return n == len(rules) && strings.Contains(s, ":"+masqChain+" ")
}

func (a *Agent) ensureMasqJump() error {
	existed, err := a.ipt.EnsureRule(iptables.Append, iptables.TableNAT, "POSTROUTING",
		"-m", "comment", "--comment", "minikit pod masquerade", "-j", masqChain)
	if err == nil && !existed && a.masqJumped {
		a.log.Info("repaired jump to pod masquerade rules", "chain", masqChain)
	}
	a.masqJumped = true
	return err
}
