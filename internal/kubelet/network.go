package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/minikit/minikit/internal/cni"
	"github.com/minikit/minikit/internal/iptables"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// masqChain holds the rules that masquerade pod traffic leaving the cluster network
// to the node's address, as flannel does for host-gw.
const masqChain = "MINIKIT-POSTROUTING"

// syncNetwork converges what the node needs beyond its pods: the routes to
// every other node's pod CIDR — host-gw's via that node's InternalIP, or
// vxlan's through flannel.1 with its neighbour and FDB entries — the flannel
// annotations on its own Node, and the masquerade of pod traffic to
// non-cluster addresses. It runs on every Node change, whenever one of its
// routes, the VXLAN device or an entry on it is deleted (WatchPodNetwork), and
// every resync, so entries deleted by hand come back at once.
func (a *Agent) syncNetwork(nodes corelisters.NodeLister) {
	if nodes != nil {
		all, err := nodes.List(everything())
		if err != nil {
			a.log.Error("listing nodes for routes", "err", err)
			return
		}
		if a.cfg.PodNetwork == PodNetworkVXLAN {
			a.syncVXLAN(all)
		} else {
			a.syncHostGW(all)
		}
		a.publishNetwork(all)
	}
	if a.ipt != nil {
		if err := a.syncMasquerade(); err != nil {
			a.log.Error("syncing pod masquerade rules", "err", err)
		}
	}
}

func (a *Agent) syncHostGW(all []*corev1.Node) {
	if removed, err := a.net.DeleteVXLAN(); err != nil {
		a.log.Error("removing the VXLAN device of the vxlan pod network", "err", err)
	} else if removed {
		a.log.Info("removed the VXLAN device: this node's pod network is host-gw", "device", cni.VXLANDevice)
	}
	connected, err := a.net.ConnectedPrefixes()
	if err != nil {
		a.log.Error("listing the node's connected subnets", "err", err)
		connected = nil
	}
	want, notAdjacent := hostGWRoutes(a.cfg.NodeName, all, connected)
	if msg := strings.Join(notAdjacent, ", "); msg != a.lastNetProblem {
		a.lastNetProblem = msg
		if msg != "" {
			a.log.Error("host-gw cannot route to nodes that are not on one L2 segment with this node: "+
				"they are on no subnet of this node; use --pod-network vxlan", "nodes", msg, "connected", fmt.Sprint(connected))
		}
	}
	changed, err := a.net.SyncRoutes(want)
	for _, c := range changed {
		a.log.Info("host-gw route", "change", c)
	}
	if err != nil {
		a.log.Error("syncing routes to other nodes", "err", err)
	}
}

func (a *Agent) syncVXLAN(all []*corev1.Node) {
	mac, created, err := a.net.EnsureVXLAN(a.cfg.NodeIP)
	if err != nil {
		a.log.Error("ensuring the VXLAN device", "err", err)
		return
	}
	if created && a.vtepMAC != nil {
		a.log.Info("repaired the VXLAN device", "device", cni.VXLANDevice, "mac", mac)
	}
	a.vtepMAC = mac
	peers, skipped := vxlanPeers(a.cfg.NodeName, all)
	if msg := strings.Join(skipped, "; "); msg != a.lastNetProblem {
		a.lastNetProblem = msg
		if msg != "" {
			a.log.Warn("nodes not reachable through the VXLAN overlay", "nodes", msg)
		}
	}
	changed, err := a.net.SyncVXLANPeers(peers)
	for _, c := range changed {
		a.log.Info("vxlan", "change", c)
	}
	if err != nil {
		a.log.Error("syncing VXLAN routes, neighbours and FDB entries", "err", err)
	}
}

// publishNetwork writes this node's flannel annotations when its Node object
// (as the lister last saw it) lacks them or holds other values.
func (a *Agent) publishNetwork(all []*corev1.Node) {
	want := a.networkAnnotations()
	patch := map[string]any{}
	for _, n := range all {
		if n.Name != a.cfg.NodeName {
			continue
		}
		for k, v := range want {
			if n.Annotations[k] != v {
				patch[k] = v
			}
		}
	}
	if len(patch) == 0 {
		return
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": patch}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := a.client.CoreV1().Nodes().Patch(ctx, a.cfg.NodeName, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
		a.log.Error("publishing the node's pod network annotations", "err", err)
		return
	}
	a.log.Info("published pod network annotations", "backend", a.cfg.PodNetwork, "data", want[AnnotationBackendData], "v6data", want[AnnotationBackendV6Data])
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
	multicast := "224.0.0.0/4"
	if a.cfg.ClusterCIDR.Addr().Is6() {
		multicast = "ff00::/8"
	}
	rules := []string{
		fmt.Sprintf("-A %s -s %s -d %s -m comment --comment \"pod to pod: no NAT\" -j RETURN", masqChain, cidr, cidr),
		fmt.Sprintf("-A %s -s %s ! -d %s -m comment --comment \"pods to outside the cluster: masquerade\" %s", masqChain, cidr, multicast, masq),
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
