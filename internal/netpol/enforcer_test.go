package netpol

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/iptables/iptablestest"

	corev1 "k8s.io/api/core/v1"
)

// fakeSets is a stateful IPSets: sets must exist to take entries, and a
// set's type is fixed at creation.
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

func (f *fakeSets) Create(name, typ string) error {
	if f.sets[name] != nil {
		return fmt.Errorf("set %s exists", name)
	}
	f.sets[name] = &Set{Name: name, Type: typ}
	return nil
}

func (f *fakeSets) Add(name, typ, entry string) error {
	s := f.sets[name]
	if s == nil || s.Type != typ {
		return fmt.Errorf("no %s set %s", typ, name)
	}
	if _, err := parseEntry(typ, entry); err != nil {
		return err
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
