// Package iptables is the only code in minikit that runs iptables, iptables-save and
// iptables-restore. It acts on the network namespace of the calling process (a lab
// node runs its minikit inside the node's namespace) and touches only chains that
// minikit owns (KUBE-* and MINIKIT-*) plus the jump rules into them; it never
// flushes a built-in chain.
package iptables

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"

	goipt "github.com/coreos/go-iptables/iptables"
	"golang.org/x/sys/unix"
)

// Table names.
const (
	TableNAT    = "nat"
	TableFilter = "filter"
	TableMangle = "mangle"
)

// Position says where EnsureRule puts a missing rule.
type Position int

// Rule positions.
const (
	Append Position = iota
	Prepend
)

// Interface is what minikit's components need from iptables.
type Interface interface {
	// EnsureChain creates chain in table if missing.
	EnsureChain(table, chain string) error
	// EnsureRule adds the rule if an identical one is not there yet.
	EnsureRule(pos Position, table, chain string, args ...string) (existed bool, err error)
	// HasRule reports whether the rule is in the chain (iptables -C).
	HasRule(table, chain string, args ...string) (bool, error)
	// DeleteRule deletes the rule if present; a rule or chain already gone
	// (also one removed by someone else meanwhile) is not an error.
	DeleteRule(table, chain string, args ...string) error
	// ChainExists reports whether chain exists in table.
	ChainExists(table, chain string) (bool, error)
	// DeleteChain flushes and deletes one of minikit's chains, if present.
	DeleteChain(table, chain string) error
	// Restore feeds data to iptables-restore. With noFlush, only the chains named
	// in data are rewritten; without it, every table in data is replaced whole.
	Restore(data []byte, noFlush bool) error
	// Save returns iptables-save output for table.
	Save(table string) ([]byte, error)
	// HasRandomFully reports whether MASQUERADE --random-fully is supported.
	HasRandomFully() bool

	// Backend reports which kernel interface the iptables binaries drive.
	Backend() Backend
	// ListChains lists the chains of table, built-in chains included.
	ListChains(table string) ([]string, error)
	// ReplaceTables rewrites whole tables with one iptables-restore without
	// --noflush, keeping what the caller does not own. Under the process-wide
	// lock it reads, for each table, every built-in chain and every chain for
	// which keep(table, chain) is true, hands them to build, and restores
	// build's output. The caller must write the kept chains back (built-in
	// policies included); whatever the output leaves out is gone.
	ReplaceTables(tables []string, keep func(table, chain string) bool, build func(map[string]*TableState) ([]byte, error)) error
}

// Owned reports whether a chain name is one minikit may create, flush or delete.
func Owned(chain string) bool {
	return strings.HasPrefix(chain, "KUBE-") || strings.HasPrefix(chain, "MINIKIT-")
}

// xtablesMu serialises every iptables change this process makes, across all
// runners: iptables-restore and -C/-I pairs are not atomic together, and a
// whole-table restore (ReplaceTables) must not interleave with another
// component's write between reading the tables and restoring them. The node
// agent and the service proxy each hold their own runner in one process.
var xtablesMu sync.Mutex

type runner struct {
	ipt *goipt.IPTables
	mu  *sync.Mutex // = &xtablesMu
	// ipv6 selects ip6tables, ip6tables-restore and nf_tables family ip6;
	// the two families' tables are separate kernel objects.
	ipv6 bool

	backend Backend
	// cached is the last state ReplaceTables read or wrote, valid while the
	// nf_tables generation is still cachedGen (see ReplaceTables).
	cached    map[string]*TableState
	cachedGen uint32
}

// New returns the real implementation for IPv4, using iptables' own lock.
func New() (Interface, error) {
	ipt, err := goipt.NewWithProtocol(goipt.ProtocolIPv4)
	if err != nil {
		return nil, fmt.Errorf("finding iptables: %w", err)
	}
	return &runner{ipt: ipt, mu: &xtablesMu, backend: detectBackend()}, nil
}

// NewIPv6 is New for IPv6: ip6tables and ip6tables-restore, the tables of
// nf_tables family ip6. One process-wide lock covers both families.
func NewIPv6() (Interface, error) {
	ipt, err := goipt.NewWithProtocol(goipt.ProtocolIPv6)
	if err != nil {
		return nil, fmt.Errorf("finding ip6tables: %w", err)
	}
	return &runner{ipt: ipt, mu: &xtablesMu, ipv6: true, backend: detectBackend()}, nil
}

// bin is the name of an iptables binary of the runner's family: "iptables",
// "iptables-save" and "iptables-restore", or their ip6tables counterparts.
func (r *runner) bin(name string) string {
	if r.ipv6 {
		return "ip6" + strings.TrimPrefix(name, "ip")
	}
	return name
}

// nfFamily is the runner's nf_tables family (iptables-nft's tables live in
// family ip, ip6tables-nft's in family ip6).
func (r *runner) nfFamily() uint8 {
	if r.ipv6 {
		return unix.AF_INET6
	}
	return unix.AF_INET
}

func (r *runner) EnsureChain(table, chain string) error {
	if !Owned(chain) {
		return fmt.Errorf("refusing to create chain %q: not a minikit chain", chain)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	exists, err := r.chainExists(table, chain)
	if err != nil {
		return fmt.Errorf("checking chain %s/%s: %w", table, chain, err)
	}
	if exists {
		return nil
	}
	if err := r.ipt.NewChain(table, chain); err != nil {
		return fmt.Errorf("creating chain %s/%s: %w", table, chain, err)
	}
	return nil
}

func (r *runner) EnsureRule(pos Position, table, chain string, args ...string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok, err := r.ipt.Exists(table, chain, args...)
	if err != nil {
		return false, fmt.Errorf("checking rule in %s/%s: %w", table, chain, err)
	}
	if ok {
		return true, nil
	}
	if pos == Prepend {
		err = r.ipt.Insert(table, chain, 1, args...)
	} else {
		err = r.ipt.Append(table, chain, args...)
	}
	if err != nil {
		return false, fmt.Errorf("adding rule to %s/%s: %w", table, chain, err)
	}
	return false, nil
}

func (r *runner) HasRule(table, chain string, args ...string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ipt.Exists(table, chain, args...)
}

func (r *runner) DeleteRule(table, chain string, args ...string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ok, err := r.chainExists(table, chain); err != nil || !ok {
		return err
	}
	err := r.ipt.DeleteIfExists(table, chain, args...)
	if err != nil && r.ruleGone(table, chain, args) {
		// Removed by someone else between the check and the delete
		// (iptables -D then says "Bad rule"): gone is what was wanted.
		return nil
	}
	return err
}

// ruleGone reports whether a rule (or its chain) is certainly not there.
func (r *runner) ruleGone(table, chain string, args []string) bool {
	if ok, err := r.chainExists(table, chain); err == nil && !ok {
		return true
	}
	ok, err := r.ipt.Exists(table, chain, args...)
	return err == nil && !ok
}

func (r *runner) ChainExists(table, chain string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.chainExists(table, chain)
}

// chainExists asks nf_tables over netlink, without an exec (EnsureChain runs
// before every full sync), and the iptables binary where that cannot answer
// (the legacy backend).
func (r *runner) chainExists(table, chain string) (bool, error) {
	if r.backend == NFTables {
		if ok, err := nftChainExists(r.nfFamily(), table, chain); err == nil {
			return ok, nil
		}
	}
	return r.ipt.ChainExists(table, chain)
}

func (r *runner) DeleteChain(table, chain string) error {
	if !Owned(chain) {
		return fmt.Errorf("refusing to delete chain %q: not a minikit chain", chain)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ok, err := r.chainExists(table, chain)
	if err != nil || !ok {
		return err
	}
	err = r.ipt.ClearAndDeleteChain(table, chain)
	if err != nil {
		if ok, cerr := r.chainExists(table, chain); cerr == nil && !ok {
			return nil // deleted meanwhile by someone else
		}
	}
	return err
}

func (r *runner) Restore(data []byte, noFlush bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	gen, cacheOK := r.cacheValid()
	err := r.restore(data, noFlush)
	if err == nil && cacheOK && noFlush && !touchesCached(data, r.cached) {
		// Our own write left the chains ReplaceTables cached alone: keep the
		// cache valid across the generation this restore created.
		if after, err := nftGeneration(); err == nil && after != gen {
			r.cachedGen = after
			return nil
		}
	}
	r.cached = nil
	return err
}

func (r *runner) restore(data []byte, noFlush bool) error {
	args := []string{"-w", "5"}
	if noFlush {
		args = append(args, "--noflush")
	}
	cmd := exec.Command(r.bin("iptables-restore"), args...)
	cmd.Stdin = bytes.NewReader(data)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v: %s", r.bin("iptables-restore"), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (r *runner) Save(table string) ([]byte, error) {
	out, err := exec.Command(r.bin("iptables-save"), "-t", table).Output()
	if err != nil {
		return nil, fmt.Errorf("%s -t %s: %w", r.bin("iptables-save"), table, err)
	}
	return out, nil
}

func (r *runner) HasRandomFully() bool { return r.ipt.HasRandomFully() }

// SaveCounters is `iptables-save -c -t table` (rules with their packet and
// byte counters) read inside the network namespace mounted at netnsPath, or in
// the caller's own namespace when netnsPath is empty. It only reads: minikit
// trace uses it to see the rules actually in a node's kernel. nsenter runs the
// binary in that network namespace only, so it is the machine's own iptables.
func SaveCounters(netnsPath, table string) ([]byte, error) {
	return saveCounters("iptables-save", netnsPath, table)
}

// SaveCountersIPv6 is SaveCounters for IPv6: `ip6tables-save -c -t table`,
// the rules of a dual-stack node's IPv6 proxier and network policy.
func SaveCountersIPv6(netnsPath, table string) ([]byte, error) {
	return saveCounters("ip6tables-save", netnsPath, table)
}

func saveCounters(bin, netnsPath, table string) ([]byte, error) {
	argv := []string{bin, "-c", "-t", table}
	if netnsPath != "" {
		argv = append([]string{"nsenter", "--net=" + netnsPath, "--"}, argv...)
	}
	out, err := exec.Command(argv[0], argv[1:]...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, fmt.Errorf("%s -c -t %s: %w", bin, table, err)
	}
	return out, nil
}
