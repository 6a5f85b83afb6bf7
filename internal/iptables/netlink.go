package iptables

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// nf_tables over netlink, read-only: the ruleset generation and chain names.
// These two questions have cheap kernel answers, while the iptables binaries
// answer them only by dumping every rule.
const (
	nfnlSubsysNFTables = 10
	nftMsgNewChain     = 3
	nftMsgGetChain     = 4
	nftMsgNewGen       = 15
	nftMsgGetGen       = 16

	nftaChainTable = 1
	nftaChainName  = 3
	nftaGenID      = 1
)

// nftGeneration returns the nf_tables ruleset generation of the calling
// thread's network namespace; every committed change increments it.
func nftGeneration() (uint32, error) {
	req := nl.NewNetlinkRequest(nfnlSubsysNFTables<<8|nftMsgGetGen, 0)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.AF_UNSPEC, Version: nl.NFNETLINK_V0})
	msgs, err := req.Execute(unix.NETLINK_NETFILTER, nfnlSubsysNFTables<<8|nftMsgNewGen)
	if err != nil {
		return 0, fmt.Errorf("reading the nf_tables generation: %w", err)
	}
	for _, m := range msgs {
		attrs, err := nfAttrs(m)
		if err != nil {
			return 0, err
		}
		for _, a := range attrs {
			if a.Attr.Type&nl.NLA_TYPE_MASK == nftaGenID && len(a.Value) >= 4 {
				return binary.BigEndian.Uint32(a.Value), nil
			}
		}
	}
	return 0, errors.New("reading the nf_tables generation: no answer")
}

// nftChain is one chain of family ip as nf_tables reports it.
type nftChain struct {
	Table, Name string
	// Policy is the verdict of a base (built-in) chain, -1 for a user chain.
	Policy int
}

// nftChainDump lists every chain of family (unix.AF_INET: nf_tables family
// ip, all iptables-nft tables; AF_INET6: ip6, ip6tables-nft's) in one
// netlink dump.
func nftChainDump(family uint8) ([]nftChain, error) {
	req := nl.NewNetlinkRequest(nfnlSubsysNFTables<<8|nftMsgGetChain, unix.NLM_F_DUMP)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: family, Version: nl.NFNETLINK_V0})
	msgs, err := req.Execute(unix.NETLINK_NETFILTER, nfnlSubsysNFTables<<8|nftMsgNewChain)
	if err != nil {
		return nil, fmt.Errorf("listing nf_tables chains: %w", err)
	}
	var chains []nftChain
	for _, m := range msgs {
		attrs, err := nfAttrs(m)
		if err != nil {
			return nil, err
		}
		c := nftChain{Policy: -1}
		for _, a := range attrs {
			switch a.Attr.Type & nl.NLA_TYPE_MASK {
			case nftaChainTable:
				c.Table = cString(a.Value)
			case nftaChainName:
				c.Name = cString(a.Value)
			case nftaChainPolicy:
				if len(a.Value) >= 4 {
					c.Policy = int(binary.BigEndian.Uint32(a.Value))
				}
			}
		}
		if c.Name != "" {
			chains = append(chains, c)
		}
	}
	return chains, nil
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// nftChainExists asks nf_tables for one chain of an iptables-nft table (family
// ip, or ip6 for ip6tables-nft's) by name: one small request, not a dump of
// every chain.
func nftChainExists(family uint8, table, chain string) (bool, error) {
	req := nl.NewNetlinkRequest(nfnlSubsysNFTables<<8|nftMsgGetChain, unix.NLM_F_ACK)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: family, Version: nl.NFNETLINK_V0})
	req.AddData(nl.NewRtAttr(nftaChainTable, nl.ZeroTerminated(table)))
	req.AddData(nl.NewRtAttr(nftaChainName, nl.ZeroTerminated(chain)))
	_, err := req.Execute(unix.NETLINK_NETFILTER, nfnlSubsysNFTables<<8|nftMsgNewChain)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOENT):
		return false, nil
	}
	return false, fmt.Errorf("looking up nf_tables chain %s/%s: %w", table, chain, err)
}

const (
	nftMsgNewRule   = 6
	nftMsgGetRule   = 7
	nftaChainPolicy = 5
	nftaRuleTable   = 1
	nfAccept        = 1
)

// nftTablesEmpty reports whether the iptables-nft tables hold nothing at all
// but built-in chains with policy ACCEPT and no rule: what a fresh namespace
// (a lab node's first start) has, and what needs no iptables-save to be kept.
// Absent tables count as empty. chains is an nftChainDump; only the rules are
// asked for here.
func nftTablesEmpty(family uint8, tables []string, chains []nftChain) (bool, error) {
	want := map[string]bool{}
	for _, t := range tables {
		want[t] = true
	}
	for _, c := range chains {
		if want[c.Table] && (!IsBuiltin(c.Table, c.Name) || (c.Policy != -1 && c.Policy != nfAccept)) {
			return false, nil
		}
	}
	req := nl.NewNetlinkRequest(nfnlSubsysNFTables<<8|nftMsgGetRule, unix.NLM_F_DUMP)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: family, Version: nl.NFNETLINK_V0})
	msgs, err := req.Execute(unix.NETLINK_NETFILTER, nfnlSubsysNFTables<<8|nftMsgNewRule)
	if err != nil {
		return false, fmt.Errorf("listing nf_tables rules: %w", err)
	}
	for _, m := range msgs {
		attrs, err := nfAttrs(m)
		if err != nil {
			return false, err
		}
		for _, a := range attrs {
			if a.Attr.Type&nl.NLA_TYPE_MASK == nftaRuleTable && want[cString(a.Value)] {
				return false, nil
			}
		}
	}
	return true, nil
}

// nfAttrs parses the attributes of one nfnetlink message.
func nfAttrs(m []byte) ([]syscall.NetlinkRouteAttr, error) {
	if len(m) < nl.SizeofNfgenmsg {
		return nil, nil
	}
	return nl.ParseRouteAttr(m[nl.SizeofNfgenmsg:])
}
