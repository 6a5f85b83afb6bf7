package netpol

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/iptables/iptablestest"

	corev1 "k8s.io/api/core/v1"
)

// fakeSets is a stateful IPSets: sets must exist to take entries, and a
// set's type and family are fixed at creation (an inet set refuses IPv6
// entries and an inet6 set IPv4 ones, as the kernel does).
type fakeSets struct{ sets map[string]*Set }

func newFakeSets() *fakeSets { return &fakeSets{sets: map[string]*Set{}} }

func (f *fakeSets) List() (map[string]*Set, error) {
	out := map[string]*Set{}
	for n, s := range f.sets {
		c := *s
		c.Entries = append([]string(nil), s.Entries...)
		out[n] = &c
	}
	return out, nil
}

func (f *fakeSets) Create(name, typ, family string) error {
	if f.sets[name] != nil {
		return fmt.Errorf("set %s exists", name)
	}
	if family != "" && family != "inet6" {
		return fmt.Errorf("unknown family %q", family)
	}
	f.sets[name] = &Set{Name: name, Type: typ, Family: family}
	return nil
}

func (f *fakeSets) Add(name, typ, entry string) error {
	s := f.sets[name]
	if s == nil || s.Type != typ {
		return fmt.Errorf("no %s set %s", typ, name)
	}
	e, err := parseEntry(typ, entry)
	if err != nil {
		return err
	}
	if v6 := e.IP.To4() == nil; v6 != (s.Family == "inet6") {
		return fmt.Errorf("%s: family mismatch for set %s (family %q)", entry, name, s.Family)
	}
	s.Entries = append(s.Entries, entry)
	return nil
}

func (f *fakeSets) Del(name, typ, entry string) error {
	s := f.sets[name]
	if s == nil {
		return fmt.Errorf("no set %s", name)
	}
	for i, e := range s.Entries {
		if e == entry {
			s.Entries = append(s.Entries[:i], s.Entries[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("%s not in %s", entry, name)
}

func (f *fakeSets) Destroy(name string) error {
	delete(f.sets, name)
	return nil
}

// noSCTP is iptables on a kernel without the sctp match.
type noSCTP struct{ *iptablestest.Fake }

func (n noSCTP) Restore(data []byte, noFlush bool) error {
	if bytes.Contains(data, []byte("-p sctp")) {
		return errors.New("iptables-restore: line 7 failed: Couldn't load match `sctp'")
	}
	return n.Fake.Restore(data, noFlush)
}

// A kernel that refuses SCTP rules: the enforcer leaves them out, logs it
// once, and enforces the rest.
func TestSCTPRefused(t *testing.T) {
	w := goldenWorld()
	sctp := corev1.ProtocolSCTP
	p := tcp(80)
	p.Protocol = &sctp
	w.pols = append(w.pols, ingress(policy("x", "mixed", sel("pod", "a")), nil, p, tcp(81)))
	var logs bytes.Buffer
	ipt := noSCTP{iptablestest.NewFake()}
	e := New(Config{NodeName: "n1", Logger: slog.New(slog.NewTextHandler(&logs, nil))}, ipt, newFakeSets(), w.listers())
	e.SetInitialized()
	for range 2 {
		if err := e.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Count(logs.String(), "refused SCTP"); got != 1 {
		t.Errorf("logged the SCTP refusal %d times, want once:\n%s", got, logs.String())
	}
	if !e.Stats().NoSCTP {
		t.Errorf("Stats().NoSCTP = false")
	}
	var tcp81 bool
	for _, r := range ipt.Rules("filter", policyChain("x", "mixed", "ingress")) {
		tcp81 = tcp81 || strings.Contains(r, "--dport 81")
	}
	if !tcp81 {
		t.Errorf("the TCP rule is missing: %q", ipt.Rules("filter", policyChain("x", "mixed", "ingress")))
	}
}

// Syncs with the stateful fakes: sets follow the pods, stale chains and
// sets go, and a sync with nothing changed writes nothing.
func TestSyncConverges(t *testing.T) {
	w := goldenWorld()
	w.pols = append(w.pols, ingress(policy("x", "web", sel("pod", "b")), []networkingPeer{podPeer(sel("pod", "a"), sel())}))
	ipt := iptablestest.NewFake()
	sets := newFakeSets()
	e := New(Config{NodeName: "n1"}, ipt, sets, w.listers())
	e.SetInitialized()
	if err := e.Sync(); err != nil {
		t.Fatal(err)
	}
	if len(sets.sets) != 1 {
		t.Fatalf("sets: %v", sets.sets)
	}
	for _, s := range sets.sets {
		if strings.Join(sorted(s.Entries), " ") != "10.244.1.2/32 10.244.2.2/32" {
			t.Errorf("peer set = %v", s.Entries)
		}
	}
	restores := len(ipt.Restores)
	// y/a's label changes: only the set changes, no restore.
	w.pods[2] = w.pods[2].DeepCopy()
	w.pods[2].Labels["pod"] = "z"
	if err := e.Sync(); err != nil {
		t.Fatal(err)
	}
	if len(ipt.Restores) != restores {
		t.Errorf("a label change restored %d times, want 0", len(ipt.Restores)-restores)
	}
	for _, s := range sets.sets {
		if strings.Join(s.Entries, " ") != "10.244.1.2/32" {
			t.Errorf("peer set after the label change = %v", s.Entries)
		}
	}
	// The policy goes: its chains and set go too, and x/b's pod chain.
	w.setPolicies()
	if err := e.Sync(); err != nil {
		t.Fatal(err)
	}
	chains, _ := ipt.ListChains("filter")
	for _, c := range chains {
		if Owned(c) && c != ChainHook {
			t.Errorf("stale chain %s left", c)
		}
	}
	if len(sets.sets) != 0 {
		t.Errorf("stale sets left: %v", sets.sets)
	}
	if fwd := ipt.Rules("filter", "FORWARD"); len(fwd) != 1 || fwd[0] != JumpRule() {
		t.Errorf("FORWARD = %q", fwd)
	}
}

// The two enforcers of a dual-stack node share the kernel's ipsets: each
// syncs, replaces and cleans up only its own family's sets.
func TestDualStackEnforcersShareSets(t *testing.T) {
	w := dualWorld()
	w.pols = append(w.pols, ingress(policy("x", "web", sel("pod", "b")), []networkingPeer{podPeer(sel("pod", "a"), sel())}))
	sets := newFakeSets()
	ipt4, ipt6 := iptablestest.NewFake(), iptablestest.NewFake()
	e4 := New(Config{NodeName: "n1"}, ipt4, sets, w.listers())
	e6 := New(Config{NodeName: "n1", Family: corev1.IPv6Protocol}, ipt6, sets, w.listers())
	e4.SetInitialized()
	e6.SetInitialized()
	entries := func() map[string]string {
		out := map[string]string{}
		for _, s := range sets.sets {
			out[s.Family] = strings.Join(sorted(s.Entries), " ")
		}
		return out
	}
	want := map[string]string{"": "10.244.1.2/32 10.244.2.2/32", "inet6": "fd00:10:244:1::2/128 fd00:10:244:2::2/128"}
	for i, e := range []*Enforcer{e4, e6, e4, e6} {
		e.forgetKernel() // list the kernel's sets, the other family's among them
		if err := e.Sync(); err != nil {
			t.Fatal(err)
		}
		if got := entries(); i > 0 && (len(sets.sets) != 2 || got[""] != want[""] || got["inet6"] != want["inet6"]) {
			t.Fatalf("sets after a sync: %v, want %v", got, want)
		}
	}
	// A set of the IPv6 enforcer's name but the wrong family is replaced.
	for name, s := range sets.sets {
		if s.Family == "inet6" {
			sets.sets[name] = &Set{Name: name, Type: s.Type}
		}
	}
	e6.forgetKernel()
	if err := e6.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := entries(); got["inet6"] != want["inet6"] {
		t.Errorf("the IPv6 set after replacing an inet one: %v", got)
	}
	if err := CleanupFamily(ipt6, sets, corev1.IPv6Protocol); err != nil {
		t.Fatal(err)
	}
	if got := entries(); len(sets.sets) != 1 || got[""] != want[""] {
		t.Errorf("after the IPv6 cleanup: %v, want the IPv4 set alone", got)
	}
	if chains, _ := ipt6.ListChains("filter"); slices.ContainsFunc(chains, Owned) {
		t.Errorf("IPv6 chains left: %v", chains)
	}
	if chains, _ := ipt4.ListChains("filter"); !slices.Contains(chains, ChainHook) {
		t.Errorf("the IPv6 cleanup removed IPv4 chains: %v", chains)
	}
}
