package nft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Eliding no-op rewrites. A full sync flushes every service chain and adds
// its rules again; the kernel's cost for that is quadratic in the number of
// chains with anonymous sets (each bind of an anonymous set walks the whole
// transaction, see kernel nf_tables_api.c __nft_set_trans_bind), and for
// 10,000 services it is tens of seconds whoever sends the batch. The Netlink
// backend remembers what it committed to each chain, and when a transaction
// flushes a chain and adds back exactly what it holds, it leaves that chain
// out of the batch: the table after the commit is the same.
//
// The memory is trusted only when nothing else committed to nftables in
// this namespace since our last commit: nf_tables keeps a generation
// counter bumped by every commit; we read it before and after each batch
// (exactly one more means the commit was ours alone) and again before the
// next. Anything else (another process's commit, an error) forgets
// everything, and the next transaction is sent in full.

type ruleKey struct{ rule, comment string }

// chainMemory is what this backend knows about chain contents.
type chainMemory struct {
	valid bool
	gen   uint32
	rules map[string][]ruleKey // chain -> rules; absent = unknown
}

// simulate applies tx's chain and rule operations to mem (entries known
// before, or made known by a flush).
func simulateChains(mem map[string][]ruleKey, tx *Transaction) {
	for i := range tx.Ops {
		o := &tx.Ops[i]
		switch {
		case o.Table != nil && o.Kind == OpDelete:
			clear(mem)
		case o.Table != nil && o.Kind == OpFlush:
			for c := range mem {
				mem[c] = nil
			}
		case o.Chain != nil && o.Kind == OpFlush:
			mem[o.Chain.Name] = []ruleKey{}
		case o.Chain != nil && o.Kind == OpDelete:
			delete(mem, o.Chain.Name)
		case o.Rule != nil && o.Kind == OpAdd:
			if r, ok := mem[o.Rule.Chain]; ok {
				mem[o.Rule.Chain] = append(r, ruleKey{o.Rule.Rule, o.Rule.Comment})
			}
		}
	}
}

// elide returns the indexes of tx's operations to send: all of them, minus
// those of chains that are flushed and refilled with what they hold.
func (m *chainMemory) elide(tx *Transaction) []int {
	final := make(map[string][]ruleKey)
	flushed := map[string]bool{}
	deleted := map[string]bool{}
	for i := range tx.Ops {
		o := &tx.Ops[i]
		if o.Chain != nil && o.Kind == OpFlush {
			flushed[o.Chain.Name] = true
		}
		if o.Chain != nil && o.Kind == OpDelete || o.Table != nil && o.Kind != OpAdd {
			name := ""
			if o.Chain != nil {
				name = o.Chain.Name
			}
			deleted[name] = true
		}
	}
	for c := range flushed {
		if r, ok := m.rules[c]; ok && !deleted[c] && !deleted[""] {
			final[c] = slices.Clone(r)
		}
	}
	simulateChains(final, tx)
	// A chain or set the transaction deletes may be deletable only because
	// a flush removed the rules using it; such chains are always sent.
	var gone []string
	for i := range tx.Ops {
		o := &tx.Ops[i]
		if o.Kind == OpDelete {
			switch {
			case o.Chain != nil:
				gone = append(gone, o.Chain.Name)
			case o.Set != nil || o.Map != nil:
				gone = append(gone, setName(o))
			}
		}
	}
	uses := func(rules []ruleKey) bool {
		for _, r := range rules {
			for _, g := range gone {
				if strings.Contains(r.rule, g) {
					return true
				}
			}
		}
		return false
	}
	skip := map[string]bool{}
	for c, r := range final {
		// Only a chain whose rules are known: one the memory has no entry
		// for is not known to be empty.
		before, known := m.rules[c]
		if known && flushed[c] && slices.Equal(r, before) && !uses(r) {
			skip[c] = true
		}
	}
	keep := make([]int, 0, len(tx.Ops))
	for i := range tx.Ops {
		o := &tx.Ops[i]
		switch {
		case o.Chain != nil && skip[o.Chain.Name] && (o.Kind == OpFlush || o.Kind == OpAdd && o.Chain.Hook == ""):
			continue
		case o.Rule != nil && skip[o.Rule.Chain]:
			continue
		}
		keep = append(keep, i)
	}
	return keep
}

// generation reads nf_tables' commit generation of this namespace.
func (n *Netlink) generation() (uint32, error) {
	b := &batch{seq: n.seq}
	m := b.begin(nftMsg|unix.NFT_MSG_GETGEN, 0, unix.AF_UNSPEC)
	b.end(m)
	n.seq = b.seq
	attrs, err := n.request(b)
	if err != nil {
		return 0, fmt.Errorf("reading nf_tables generation: %w", err)
	}
	if v, ok := attrs[unix.NFTA_GEN_ID]; ok && len(v) >= 4 {
		return binary.BigEndian.Uint32(v), nil
	}
	return 0, fmt.Errorf("nf_tables generation reply without an id")
}

// setTypeFromKernel reads a set's key and data types (NFT_MSG_GETSET).
func (n *Netlink) setTypeFromKernel(name string) (*setType, error) {
	b := &batch{seq: n.seq}
	m := b.begin(nftMsg|unix.NFT_MSG_GETSET, 0, n.family.nfproto())
	b.str(unix.NFTA_SET_TABLE, n.table)
	b.str(unix.NFTA_SET_NAME, name)
	b.end(m)
	n.seq = b.seq
	attrs, err := n.request(b)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) {
			err = fmt.Errorf("%w: %w", err, ErrNotFound)
		}
		return nil, fmt.Errorf("reading set %q: %w", name, err)
	}
	u32 := func(t uint16) uint32 {
		if v := attrs[t]; len(v) >= 4 {
			return binary.BigEndian.Uint32(v)
		}
		return 0
	}
	flags := u32(unix.NFTA_SET_FLAGS)
	st := &setType{key: splitMagic(u32(unix.NFTA_SET_KEY_TYPE)), isMap: flags&unix.NFT_SET_MAP != 0, interval: flags&unix.NFT_SET_INTERVAL != 0}
	if st.isMap && u32(unix.NFTA_SET_DATA_TYPE) != unix.NFT_DATA_VERDICT {
		st.data = splitMagic(u32(unix.NFTA_SET_DATA_TYPE))
	}
	return st, nil
}

// request sends one non-dump request and returns its reply's attributes.
func (n *Netlink) request(b *batch) (map[uint16][]byte, error) {
	if err := unix.Sendto(n.fd, b.b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, err
	}
	buf := make([]byte, 4096)
	for {
		// The kernel answers inside sendmsg; the reply is already queued.
		nr, _, err := unix.Recvfrom(n.fd, buf, unix.MSG_DONTWAIT)
		if err != nil {
			return nil, err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:nr])
		if err != nil {
			return nil, err
		}
		for _, msg := range msgs {
			if msg.Header.Seq != b.seq {
				continue
			}
			if msg.Header.Type == unix.NLMSG_ERROR {
				return nil, syscall.Errno(-int32(binary.NativeEndian.Uint32(msg.Data)))
			}
			out := map[uint16][]byte{}
			attrs := msg.Data[4:]
			for len(attrs) >= 4 {
				l := int(binary.NativeEndian.Uint16(attrs))
				t := binary.NativeEndian.Uint16(attrs[2:]) &^ unix.NLA_F_NESTED
				if l < 4 || l > len(attrs) {
					break
				}
				out[t] = attrs[4:l]
				attrs = attrs[min((l+3)&^3, len(attrs)):]
			}
			return out, nil
		}
	}
}
