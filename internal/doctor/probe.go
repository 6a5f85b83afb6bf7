package doctor

import (
	"encoding/binary"
	"fmt"
	"os"

	"github.com/minikit/minikit/internal/netns"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// probeKernel tries every Feature in a network namespace of its own: the
// calling thread is locked, unshares a fresh namespace and is thrown away
// afterwards (netns.LockedThread with an unclean thread), so the namespace,
// its links, its nftables table and its ipsets go with it, even if the probe
// fails half-way; nothing is created in, or named in, any namespace of the
// machine. Modules the kernel loads on demand for a probe (nft_numgen,
// vxlan, ...) stay loaded, as they would after the first lab.
func probeKernel() Probe {
	p := Probe{}
	netns.LockedThread(func() (clean bool) {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			p[FeatureNetNS] = err
			// unshare failed, so the thread is still where it was.
			return true
		}
		p[FeatureNetNS] = nil
		probeLinks(p)
		probeNFTables(p)
		probeIPSet(p)
		return false
	})
	return p
}

// The probe's own objects, inside its own namespace.
const (
	probeVeth   = "mkdoc-veth0"
	probeBridge = "mkdoc-br0"
	probeVXLAN  = "mkdoc-vx0"
	probeTable  = "minikit-doctor"
	probeSet    = "minikit-doctor"
)

func probeLinks(p Probe) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		err = fmt.Errorf("opening rtnetlink: %w", err)
		p[FeatureVeth], p[FeatureBridge], p[FeatureVXLAN] = err, err, err
		return
	}
	defer h.Close()
	p[FeatureVeth] = h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: probeVeth}, PeerName: probeVeth + "p"})
	p[FeatureBridge] = h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: probeBridge}})
	// flannel's VXLAN: VNI 1, UDP 8472.
	p[FeatureVXLAN] = h.LinkAdd(&netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: probeVXLAN}, VxlanId: 1, Port: 8472})
}

// probeNFTables creates a table and a nat chain, then one rule per
// expression kube-proxy's nftables mode depends on, each in a batch of its
// own so that the kernel's refusal names the expression it lacks.
func probeNFTables(p Probe) {
	c, err := nftables.New()
	if err != nil {
		p[FeatureNFTables] = err
		return
	}
	table := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: probeTable})
	chain := c.AddChain(&nftables.Chain{Name: "probe", Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	if p[FeatureNFTables] = c.Flush(); p[FeatureNFTables] != nil {
		return
	}
	u32 := func(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }
	rules := []struct {
		f     Feature
		exprs []expr.Any
	}{
		// numgen random mod 2 == 1
		{FeatureNumgen, []expr.Any{
			&expr.Numgen{Register: 1, Modulus: 2, Type: unix.NFT_NG_RANDOM},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: u32(1)},
		}},
		// dnat to 10.0.0.1
		{FeatureNAT, []expr.Any{
			&expr.Immediate{Register: 1, Data: []byte{10, 0, 0, 1}},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1},
		}},
		// ct state new
		{FeatureCt, []expr.Any{
			&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: u32(expr.CtStateBitNEW), Xor: u32(0)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: u32(0)},
		}},
		// fib daddr type local
		{FeatureFib, []expr.Any{
			&expr.Fib{Register: 1, FlagDADDR: true, ResultADDRTYPE: true},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: u32(unix.RTN_LOCAL)},
		}},
	}
	for _, r := range rules {
		c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: r.exprs})
		p[r.f] = c.Flush()
	}
	if p[FeatureCt] == nil {
		// nf_conntrack is in use now, so its sysctls are there in this
		// namespace if conntrack works at all.
		_, err := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_max")
		p[FeatureConntrack] = err
	}
}

// probeIPSet creates one set of each type the NetworkPolicy enforcer uses.
func probeIPSet(p Probe) {
	h, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
	if err != nil {
		p[FeatureIPSet] = fmt.Errorf("opening netfilter netlink: %w", err)
		return
	}
	defer h.Close()
	for i, typ := range []string{"hash:net", "hash:ip,port"} {
		if err := h.IpsetCreate(fmt.Sprintf("%s-%d", probeSet, i), typ, netlink.IpsetCreateOptions{}); err != nil {
			p[FeatureIPSet] = fmt.Errorf("creating an ipset of type %s: %w", typ, err)
			return
		}
	}
	p[FeatureIPSet] = nil
}
