package controllers

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/retry"
)

// Node IPAM gives every node without spec.podCIDR the lowest free range of
// NodeCIDRMaskSize bits from the cluster pod CIDR, like Kubernetes' range
// allocator. Which ranges are taken is derived from the Node objects alone,
// so a restarted controller never hands out a range twice; nodes are
// served in name order, so the same cluster gets the same ranges. Ranges
// outside the cluster CIDR, set by hand, are left alone. A dual-stack
// cluster (a secondary pod CIDR) gives each node one range of each, the
// primary's first, as the range allocator does per family.

const ipamKey = "nodes" // the whole node set is one unit of work

type nodeIPAM struct {
	c    *Controllers
	loop *loop

	mu sync.Mutex
	// pending holds ranges we assigned that the cache does not show yet.
	pending map[string][]netip.Prefix
	// warned holds nodes told once that no range is left.
	warned map[string]bool
}

func newNodeIPAM(c *Controllers) *nodeIPAM {
	m := &nodeIPAM{c: c, pending: map[string][]netip.Prefix{}, warned: map[string]bool{}}
	m.loop = c.newLoop("nodeipam", 1, m.sync)
	c.factory.Core().V1().Nodes().Informer().AddEventHandler(handlers(
		func(any) { m.loop.add(ipamKey) },
		func(old, cur any) {
			o, n := old.(*corev1.Node), cur.(*corev1.Node)
			if n.Spec.PodCIDR == "" || o.Spec.PodCIDR != n.Spec.PodCIDR || !slices.Equal(o.Spec.PodCIDRs, n.Spec.PodCIDRs) {
				m.loop.add(ipamKey)
			}
		},
		func(any) { m.loop.add(ipamKey) },
	))
	return m
}

// podRange is one cluster pod CIDR and the size of its node ranges.
type podRange struct {
	cidr netip.Prefix
	mask int
}

func (m *nodeIPAM) ranges() []podRange {
	out := []podRange{{m.c.opts.PodCIDR, m.c.opts.NodeCIDRMaskSize}}
	if p := m.c.opts.SecondaryPodCIDR; p.IsValid() {
		out = append(out, podRange{p, m.c.opts.SecondaryNodeCIDRMaskSize})
	}
	return out
}

func (m *nodeIPAM) check() error {
	rs := m.ranges()
	for _, r := range rs {
		if r.mask < r.cidr.Bits() || r.mask > r.cidr.Addr().BitLen() {
			return fmt.Errorf("node CIDR mask size /%d does not fit in pod CIDR %s", r.mask, r.cidr)
		}
	}
	if len(rs) == 2 && rs[0].cidr.Addr().Is4() == rs[1].cidr.Addr().Is4() {
		return fmt.Errorf("pod CIDRs %s and %s must be of different IP families", rs[0].cidr, rs[1].cidr)
	}
	return nil
}

func nodeCIDRs(n *corev1.Node) []string {
	if len(n.Spec.PodCIDRs) > 0 {
		return n.Spec.PodCIDRs
	}
	if n.Spec.PodCIDR != "" {
		return []string{n.Spec.PodCIDR}
	}
	return nil
}

func (m *nodeIPAM) sync(ctx context.Context, _ string) error {
	nodes, err := m.c.nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	slices.SortFunc(nodes, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	ranges := m.ranges()
	inCluster := func(p netip.Prefix) bool {
		return slices.ContainsFunc(ranges, func(r podRange) bool { return r.cidr.Overlaps(p) })
	}
	used := map[netip.Prefix]string{}
	byName := map[string]*corev1.Node{}
	for _, n := range nodes {
		byName[n.Name] = n
		for _, s := range nodeCIDRs(n) {
			p, err := netip.ParsePrefix(s)
			if err != nil || !inCluster(p) {
				continue
			}
			p = p.Masked()
			if other, dup := used[p]; dup {
				m.loop.log.Warn("nodes share a pod CIDR", "cidr", p, "nodes", []string{other, n.Name})
			}
			used[p] = n.Name
		}
	}
	m.mu.Lock()
	for name, ps := range m.pending {
		if n := byName[name]; n == nil || len(nodeCIDRs(n)) > 0 {
			delete(m.pending, name)
			continue
		}
		for _, p := range ps {
			used[p] = name
		}
	}
	m.mu.Unlock()

	var errs []error
	for _, n := range nodes {
		if len(nodeCIDRs(n)) > 0 || n.DeletionTimestamp != nil {
			continue
		}
		m.mu.Lock()
		_, waiting := m.pending[n.Name]
		m.mu.Unlock()
		if waiting {
			continue
		}
		var ps []netip.Prefix
		for _, r := range ranges {
			p, ok := freeSubnet(r.cidr, r.mask, used)
			if !ok {
				// Nothing frees a range but a node going, which queues a sync:
				// report once, do not retry.
				if !m.warned[n.Name] {
					m.warned[n.Name] = true
					m.loop.log.Error("no pod CIDR left for node", "node", n.Name, "podCIDR", r.cidr, "maskSize", r.mask)
					m.c.recordEvent(ctx, "node-ipam-controller", n, "Node", "v1", corev1.EventTypeWarning, "CIDRNotAvailable",
						fmt.Sprintf("Node %s status is now: CIDRNotAvailable", n.Name))
				}
				ps = nil
				break
			}
			ps = append(ps, p)
		}
		if ps == nil {
			continue
		}
		for _, p := range ps {
			used[p] = n.Name
		}
		m.mu.Lock()
		m.pending[n.Name] = ps
		m.mu.Unlock()
		if err := m.assign(ctx, n.Name, ps); err != nil {
			m.mu.Lock()
			delete(m.pending, n.Name)
			m.mu.Unlock()
			for _, p := range ps {
				delete(used, p)
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// assign writes ps (one range per family, the primary first) into the
// node's spec, unless the node got a range meanwhile.
func (m *nodeIPAM) assign(ctx context.Context, name string, ps []netip.Prefix) error {
	cidrs := make([]string, len(ps))
	for i, p := range ps {
		cidrs[i] = p.String()
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := m.c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(nodeCIDRs(n)) > 0 {
			return nil
		}
		n.Spec.PodCIDR = cidrs[0]
		n.Spec.PodCIDRs = cidrs
		_, err = m.c.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("assigning pod CIDRs %v to node %q: %w", cidrs, name, err)
	}
	m.loop.log.Info("assigned pod CIDR", "node", name, "cidrs", cidrs)
	return nil
}

// freeSubnet is the lowest /mask range in cluster that overlaps nothing in used.
func freeSubnet(cluster netip.Prefix, mask int, used map[netip.Prefix]string) (netip.Prefix, bool) {
	bits := mask - cluster.Bits()
	limit := new(big.Int).Lsh(big.NewInt(1), uint(bits))
	for i := int64(0); big.NewInt(i).Cmp(limit) < 0; i++ {
		p := nthSubnet(cluster, mask, i)
		taken := false
		for u := range used {
			if u.Overlaps(p) {
				taken = true
				break
			}
		}
		if !taken {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// nthSubnet is the i-th /mask range of cluster.
func nthSubnet(cluster netip.Prefix, mask int, i int64) netip.Prefix {
	addr := cluster.Addr()
	raw := addr.AsSlice()
	v := new(big.Int).SetBytes(raw)
	v.Add(v, new(big.Int).Lsh(big.NewInt(i), uint(addr.BitLen()-mask)))
	out := make([]byte, len(raw))
	v.FillBytes(out)
	a, _ := netip.AddrFromSlice(out)
	return netip.PrefixFrom(a, mask)
}
