package cni

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
)

// ErrExhausted is returned by Allocate when every usable address is taken.
var ErrExhausted = errors.New("no free address")

// IPAM hands out pod addresses from one node's pod CIDR and persists the
// assignment in a JSON file, so a restarted agent keeps every pod's address.
// The network address, the gateway (.1) and the broadcast address are never
// handed out. Allocation is round-robin from the last address handed out, so
// a released address is not immediately reused (stale conntrack entries and
// ARP caches pointing at a dead pod age out first).
//
// Every change is written to the file (temp file, fsync, rename, fsync of
// the directory) before the call returns, and rolled back in memory if that
// fails: after a crash the file holds either the old or the new state, never
// a torn one, and an address is never handed out unless it is on disk.
//
// IPAM is safe for concurrent use; mu guards all fields. One IPAM per file:
// two processes sharing a file would overwrite each other.
type IPAM struct {
	path string
	cidr netip.Prefix

	mu     sync.Mutex
	owners map[string]netip.Addr
	byAddr map[netip.Addr]string
	last   netip.Addr
}

// ipamFile is the on-disk format.
type ipamFile struct {
	CIDR   netip.Prefix          `json:"cidr"`
	Last   netip.Addr            `json:"last,omitzero"`
	Owners map[string]netip.Addr `json:"owners"`
}

// NewIPAM opens (or starts) the allocator persisted at path for cidr. A file
// written for a different CIDR is an error rather than silently discarded:
// the caller decides whether the old assignments may be dropped.
func NewIPAM(path string, cidr netip.Prefix) (*IPAM, error) {
	if !validPodCIDR(cidr) {
		return nil, fmt.Errorf("opening IPAM %s: pod CIDR %s is not an IPv4 prefix of at most /30 or an IPv6 one of at most /%d", path, cidr, maxIPv6PodBits)
	}
	m := &IPAM{
		path:   path,
		cidr:   cidr.Masked(),
		owners: map[string]netip.Addr{},
		byAddr: map[netip.Addr]string{},
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return nil, fmt.Errorf("opening IPAM %s: %w", path, err)
	}
	var f ipamFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("opening IPAM %s: %w", path, err)
	}
	if f.CIDR.Masked() != m.cidr {
		return nil, fmt.Errorf("opening IPAM %s: file is for %s, not %s", path, f.CIDR, cidr)
	}
	for owner, ip := range f.Owners {
		if !usableHost(m.cidr, ip) {
			return nil, fmt.Errorf("opening IPAM %s: owner %q has unusable address %s", path, owner, ip)
		}
		if other, dup := m.byAddr[ip]; dup {
			return nil, fmt.Errorf("opening IPAM %s: address %s held by both %q and %q", path, ip, owner, other)
		}
		m.owners[owner] = ip
		m.byAddr[ip] = owner
	}
	if m.cidr.Contains(f.Last) {
		m.last = f.Last
	}
	return m, nil
}

// CIDR returns the prefix addresses are allocated from.
func (m *IPAM) CIDR() netip.Prefix { return m.cidr }

// Allocate returns owner's address, allocating the next free one after the
// last allocated if owner has none. It fails with ErrExhausted when the
// CIDR is full.
func (m *IPAM) Allocate(owner string) (netip.Addr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ip, ok := m.owners[owner]; ok {
		return ip, nil
	}
	first := m.cidr.Addr().Next().Next() // skip network and gateway
	bcast := lastAddr(m.cidr)
	ip := m.last
	if !usableHost(m.cidr, ip) {
		ip = first.Prev()
	}
	// Visit every usable address once, starting after the last allocated.
	usable := ipv6PoolSize - 2
	if m.cidr.Addr().Is4() {
		usable = 1<<(32-m.cidr.Bits()) - 3
	}
	found := false
	for range usable {
		if ip = ip.Next(); ip == bcast {
			ip = first
		}
		if _, used := m.byAddr[ip]; !used {
			found = true
			break
		}
	}
	if !found {
		return netip.Addr{}, fmt.Errorf("allocating address for %q in %s: %w", owner, m.cidr, ErrExhausted)
	}
	prevLast := m.last
	m.owners[owner], m.byAddr[ip], m.last = ip, owner, ip
	if err := m.save(); err != nil {
		delete(m.owners, owner)
		delete(m.byAddr, ip)
		m.last = prevLast
		return netip.Addr{}, fmt.Errorf("allocating address for %q: %w", owner, err)
	}
	return ip, nil
}

// Reserve records ip as owner's address, for adopting pods that already
// exist after a restart. If owner held another address it is released. It
// fails if ip is not a usable pod address or belongs to someone else.
func (m *IPAM) Reserve(owner string, ip netip.Addr) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !usableHost(m.cidr, ip) {
		return fmt.Errorf("reserving %s for %q: not a usable address in %s", ip, owner, m.cidr)
	}
	if other, used := m.byAddr[ip]; used {
		if other == owner {
			return nil
		}
		return fmt.Errorf("reserving %s for %q: already held by %q", ip, owner, other)
	}
	prev, had := m.owners[owner]
	if had {
		delete(m.byAddr, prev)
	}
	m.owners[owner], m.byAddr[ip] = ip, owner
	if err := m.save(); err != nil {
		delete(m.byAddr, ip)
		if had {
			m.owners[owner], m.byAddr[prev] = prev, owner
		} else {
			delete(m.owners, owner)
		}
		return fmt.Errorf("reserving %s for %q: %w", ip, owner, err)
	}
	return nil
}

// Release frees owner's address; releasing an owner without one is a no-op.
func (m *IPAM) Release(owner string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	ip, ok := m.owners[owner]
	if !ok {
		return nil
	}
	delete(m.owners, owner)
	delete(m.byAddr, ip)
	if err := m.save(); err != nil {
		m.owners[owner], m.byAddr[ip] = ip, owner
		return fmt.Errorf("releasing %s of %q: %w", ip, owner, err)
	}
	return nil
}

// Owners returns a copy of the current assignments.
func (m *IPAM) Owners() map[string]netip.Addr {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.owners)
}

// save writes the state atomically. Called with mu held.
func (m *IPAM) save() error {
	data, err := json.MarshalIndent(ipamFile{CIDR: m.cidr, Last: m.last, Owners: m.owners}, "", "  ")
	if err != nil {
		return err
	}
	return writeFileDurably(m.path, append(data, '\n'))
}

// writeFileDurably replaces path's content through a synced temporary file, a
// rename and a sync of the directory: a crash leaves the old content or the
// new, never a mix, and a completed write survives power loss.
func writeFileDurably(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// The rename is durable only once the directory entry is.
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
