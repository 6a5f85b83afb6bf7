package netpol

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/minikit/minikit/internal/iptables"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// PolicyLister lists NetworkPolicies (a client-go lister satisfies it).
type PolicyLister interface {
	List(selector labels.Selector) ([]*networkingv1.NetworkPolicy, error)
}

// PodLister lists Pods.
type PodLister interface {
	List(selector labels.Selector) ([]*corev1.Pod, error)
}

// NamespaceLister lists Namespaces.
type NamespaceLister interface {
	List(selector labels.Selector) ([]*corev1.Namespace, error)
}

// Listers are the enforcer's view of the API.
type Listers struct {
	Policies   PolicyLister
	Pods       PodLister
	Namespaces NamespaceLister
}

// DriftMessage is logged at WARN when the kernel lost what a sync wrote.
const DriftMessage = "network policy rules changed outside minikit; restoring them"

// Config configures an Enforcer.
type Config struct {
	NodeName string
	Logger   *slog.Logger
	// MinSyncPeriod is the least time between two syncs (events arriving
	// meanwhile collapse into one sync). Default 100ms.
	MinSyncPeriod time.Duration
	// SyncPeriod is how often the monitor checks the kernel. Default 5s.
	SyncPeriod time.Duration
	// FullSyncPeriod is how often a sync runs without any event. Default 1m.
	FullSyncPeriod time.Duration
	// Family is the IP family enforced (Input.Family): IPv4 ("" too) with an
	// iptables runner, IPv6 with an ip6tables one. The enforcer touches only
	// the ipsets of its family (KUBE-NP-* or KUBE-NP6-*), so the two
	// enforcers of a dual-stack node share the kernel's sets.
	Family corev1.IPFamily
}

// Enforcer keeps one node's network policy rules in line with the API.
type Enforcer struct {
	cfg     Config
	log     *slog.Logger
	ipt     iptables.Interface
	sets    IPSets
	listers Listers
	trigger chan struct{}

	mu          sync.Mutex
	initialized bool
	noSCTP      bool
	fix         *jumpFix       // set by the monitor: repair the FORWARD jump
	written     map[string]int // chain -> rule count of the last sync
	// kernelSets is what the sets held after the last successful sync, nil
	// when unknown (start, a failed sync, drift, the periodic sync): then
	// the sync lists the kernel's sets first. Listing costs a netlink dump
	// of every entry (vishvananda/netlink parses each attribute list on its
	// own goroutine: about a second at 1,000 pods and 200 policies), so
	// event-driven syncs diff against this record instead.
	kernelSets map[string]*Set
	// lastChains is each chain's rules as the last successful sync wrote
	// them, nil when unknown: a sync then writes every chain (a full sync),
	// else only the chains whose rules changed. A pod label change usually
	// changes set entries only, and no chain at all.
	lastChains map[string]string
	lastErr    error
	syncs      int
}

// New returns an enforcer; it writes nothing before SetInitialized.
func New(cfg Config, ipt iptables.Interface, sets IPSets, l Listers) *Enforcer {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MinSyncPeriod == 0 {
		cfg.MinSyncPeriod = 100 * time.Millisecond
	}
	if cfg.SyncPeriod == 0 {
		cfg.SyncPeriod = 5 * time.Second
	}
	if cfg.FullSyncPeriod == 0 {
		cfg.FullSyncPeriod = time.Minute
	}
	log := cfg.Logger.With("component", "netpol")
	if cfg.Family == corev1.IPv6Protocol {
		log = log.With("family", "IPv6")
	}
	return &Enforcer{cfg: cfg, log: log, ipt: ipt, sets: sets,
		listers: l, trigger: make(chan struct{}, 1)}
}

// OnChange asks for a sync; informer handlers call it for every event.
func (e *Enforcer) OnChange() {
	select {
	case e.trigger <- struct{}{}:
	default:
	}
}

// SetInitialized says the informers have synced: a sync before that would
// isolate pods against peers not yet seen.
func (e *Enforcer) SetInitialized() {
	e.mu.Lock()
	e.initialized = true
	e.mu.Unlock()
	e.OnChange()
}

// Run syncs on events (debounced) and periodically, and runs the drift
// monitor, until ctx ends. Rules stay in the kernel when it returns: a
// restarted enforcer takes them over; Cleanup removes them.
func (e *Enforcer) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.monitor(ctx)
	}()
	var last time.Time
	retry := time.Duration(0)
	for {
		wait := e.cfg.FullSyncPeriod
		if retry > 0 {
			wait = retry
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-e.trigger:
		case <-time.After(wait):
			e.forgetKernel() // the periodic sync is a full one
		}
		if d := e.cfg.MinSyncPeriod - time.Since(last); d > 0 {
			select {
			case <-ctx.Done():
				wg.Wait()
				return
			case <-time.After(d):
			}
		}
		select { // requests up to now are served by this sync
		case <-e.trigger:
		default:
		}
		last = time.Now()
		e.mu.Lock()
		ready := e.initialized
		e.mu.Unlock()
		if !ready {
			continue
		}
		if err := e.Sync(); err != nil {
			e.log.Error("syncing network policy rules", "err", err)
			retry = time.Second
		} else {
			retry = 0
		}
	}
}

// Sync computes the desired state and applies it: sets, one restore, then
// unused sets are destroyed.
func (e *Enforcer) Sync() error {
	start := time.Now()
	pols, err := e.listers.Policies.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing network policies: %w", err)
	}
	pods, err := e.listers.Pods.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	nss, err := e.listers.Namespaces.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing namespaces: %w", err)
	}
	e.mu.Lock()
	noSCTP, fix, known, prev := e.noSCTP, e.fix, e.kernelSets, e.lastChains
	if fix == nil && e.written != nil {
		// The last sync left the jump in place and the monitor watches it.
		fix = &jumpFix{}
	}
	e.mu.Unlock()
	in := Input{NodeName: e.cfg.NodeName, Policies: pols, Pods: pods, Namespaces: nss, NoSCTP: noSCTP, Family: e.cfg.Family}
	st := Compute(in)
	for _, p := range st.Problems {
		e.log.Warn("network policy left out", "problem", p)
	}
	err = e.apply(st, fix, known, prev)
	if err != nil && !noSCTP && hasSCTP(st) {
		// The kernel may lack SCTP support: leave SCTP rules out from now on.
		in.NoSCTP = true
		st2 := Compute(in)
		if err2 := e.apply(st2, fix, nil, nil); err2 == nil {
			e.log.Warn("the kernel refused SCTP rules; SCTP ports of network policies are not enforced", "rules", st2.SCTPRules, "err", err)
			e.mu.Lock()
			e.noSCTP = true
			e.mu.Unlock()
			st, err = st2, nil
		}
	}
	e.mu.Lock()
	e.lastErr = err
	if err != nil {
		e.fix = nil // the monitor looks again; the kernel may have changed meanwhile
		e.kernelSets, e.lastChains = nil, nil
	} else {
		e.lastChains = make(map[string]string, len(st.Chains))
		for _, c := range st.Chains {
			e.lastChains[c.Name] = strings.Join(c.Rules, "\n")
		}
		e.kernelSets = map[string]*Set{}
		for i := range st.Sets {
			e.kernelSets[st.Sets[i].Name] = &st.Sets[i]
		}
		e.syncs++
		e.fix = nil
		e.written = map[string]int{}
		for _, c := range st.Chains {
			e.written[c.Name] = len(c.Rules)
		}
	}
	e.mu.Unlock()
	if err != nil {
		return err
	}
	rules := 0
	for _, c := range st.Chains {
		rules += len(c.Rules)
	}
	e.log.Debug("synced network policy rules", "policies", len(pols), "chains", len(st.Chains),
		"rules", rules, "sets", len(st.Sets), "took", time.Since(start))
	return nil
}

func hasSCTP(st *State) bool {
	for _, c := range st.Chains {
		for _, r := range c.Rules {
			if strings.Contains(r, " -p sctp ") {
				return true
			}
		}
	}
	return false
}

// forgetKernel makes the next sync a full one: sets read back from the
// kernel, every chain rewritten.
func (e *Enforcer) forgetKernel() {
	e.mu.Lock()
	e.kernelSets, e.lastChains = nil, nil
	e.mu.Unlock()
}

// apply writes st into the kernel; have is what the sets hold (nil: list
// them), prev the chains as last written (nil: write them all).
func (e *Enforcer) apply(st *State, fix *jumpFix, have map[string]*Set, prev map[string]string) error {
	if have == nil {
		var err error
		if have, err = listFamily(e.sets, familyOf(e.cfg.Family)); err != nil {
			return err
		}
	}
	if err := syncSets(e.sets, st.Sets, have); err != nil {
		return err
	}
	existing, err := e.ipt.ListChains(iptables.TableFilter)
	if err != nil {
		return fmt.Errorf("listing filter chains: %w", err)
	}
	want := map[string]bool{}
	for _, c := range st.Chains {
		want[c.Name] = true
	}
	var stale []string
	hookExists := false
	for _, n := range existing {
		if n == ChainHook {
			hookExists = true
		}
		if Owned(n) && !want[n] {
			stale = append(stale, n)
		}
	}
	f := jumpFix{}
	if !hookExists {
		f.insert = true // no jump can point at a missing chain
	} else if fix != nil {
		f = *fix
	} else if ok, err := e.ipt.HasRule(iptables.TableFilter, "FORWARD", jumpArgs...); err != nil {
		return fmt.Errorf("checking the FORWARD jump: %w", err)
	} else {
		f.insert = !ok
	}
	write := st
	if prev != nil {
		write = &State{}
		for _, c := range st.Chains {
			if old, ok := prev[c.Name]; !ok || old != strings.Join(c.Rules, "\n") {
				write.Chains = append(write.Chains, c)
			}
		}
	}
	if len(write.Chains) > 0 || len(stale) > 0 || f != (jumpFix{}) {
		if err := e.ipt.Restore(restoreInput(write, stale, f), true); err != nil {
			return fmt.Errorf("restoring network policy chains: %w", err)
		}
	}
	var errs []error
	for name := range have {
		if !slices.ContainsFunc(st.Sets, func(s Set) bool { return s.Name == name }) {
			if err := e.sets.Destroy(name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// syncSets makes the kernel's sets hold what want says, adding and deleting
// single entries (an unchanged set costs nothing).
func syncSets(s IPSets, want []Set, have map[string]*Set) error {
	for _, w := range want {
		h := have[w.Name]
		if h != nil && (h.Type != w.Type || h.Family != w.Family) {
			// Not one we made (our names fix the type and family): replace it.
			if err := s.Destroy(w.Name); err != nil {
				return err
			}
			h = nil
		}
		if h == nil {
			if err := s.Create(w.Name, w.Type, w.Family); err != nil {
				return err
			}
			h = &Set{Name: w.Name, Type: w.Type, Family: w.Family}
		}
		cur := make(map[string]bool, len(h.Entries))
		for _, en := range h.Entries {
			cur[en] = true
		}
		for _, en := range w.Entries {
			if cur[en] {
				delete(cur, en)
				continue
			}
			if err := s.Add(w.Name, w.Type, en); err != nil {
				return err
			}
		}
		for en := range cur {
			if err := s.Del(w.Name, w.Type, en); err != nil {
				return err
			}
		}
	}
	return nil
}

// monitor checks every SyncPeriod that the kernel still holds what the last
// sync wrote, and resyncs when not.
func (e *Enforcer) monitor(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(e.cfg.SyncPeriod):
		}
		e.Check()
	}
}

// Check compares the kernel with the last sync; on a difference it logs
// DriftMessage (WARN) and asks for a sync that repairs it. It reports
// whether the kernel was intact.
func (e *Enforcer) Check() bool {
	e.mu.Lock()
	written, ready := e.written, e.initialized && e.written != nil && e.fix == nil
	e.mu.Unlock()
	if !ready {
		return true
	}
	save, err := e.ipt.Save(iptables.TableFilter)
	if err != nil {
		e.log.Error("reading the filter table", "err", err)
		return true
	}
	k := parseFilter(save)
	var what []string
	if k.jumps != 1 || k.jumpAt != 0 {
		what = append(what, fmt.Sprintf("FORWARD jump: %d copies, first at rule %d", k.jumps, k.jumpAt+1))
	}
	for name, n := range written {
		got, ok := k.chains[name]
		if !ok {
			what = append(what, "chain "+name+" deleted")
		} else if got != n {
			what = append(what, fmt.Sprintf("chain %s has %d rules, not %d", name, got, n))
		}
	}
	if len(what) == 0 {
		return true
	}
	slices.Sort(what)
	if len(what) > 5 {
		what = append(what[:5], fmt.Sprintf("and %d more", len(what)-5))
	}
	e.log.Warn(DriftMessage, "changes", strings.Join(what, "; "))
	e.mu.Lock()
	e.fix = &jumpFix{delete: k.jumps, insert: true}
	e.kernelSets, e.lastChains = nil, nil
	e.mu.Unlock()
	e.OnChange()
	return false
}

// kernelFilter is what Check reads from iptables-save -t filter.
type kernelFilter struct {
	jumps  int // FORWARD rules jumping to the hook chain
	jumpAt int // index of the first one among FORWARD's rules, -1 if none
	chains map[string]int
}

func parseFilter(save []byte) kernelFilter {
	k := kernelFilter{jumpAt: -1, chains: map[string]int{}}
	forward := 0
	for _, l := range strings.Split(string(save), "\n") {
		switch {
		case strings.HasPrefix(l, ":"):
			if f := strings.Fields(l[1:]); len(f) > 0 && Owned(f[0]) {
				k.chains[f[0]] += 0
			}
		case strings.HasPrefix(l, "-A FORWARD "):
			if strings.HasSuffix(l, " -j "+ChainHook) {
				k.jumps++
				if k.jumpAt < 0 {
					k.jumpAt = forward
				}
			}
			forward++
		case strings.HasPrefix(l, "-A "):
			f := strings.Fields(l)
			if len(f) > 1 && Owned(f[1]) {
				k.chains[f[1]]++
			}
		}
	}
	return k
}

// Stats is what the enforcer reports about itself.
type Stats struct {
	Syncs     int
	LastError string
	NoSCTP    bool
}

// Stats returns the enforcer's statistics.
func (e *Enforcer) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := Stats{Syncs: e.syncs, NoSCTP: e.noSCTP}
	if e.lastErr != nil {
		s.LastError = e.lastErr.Error()
	}
	return s
}

// listFamily lists the sets of one family's enforcer.
func listFamily(sets IPSets, f family) (map[string]*Set, error) {
	have, err := sets.List()
	if err != nil {
		return nil, err
	}
	for name := range have {
		if !strings.HasPrefix(name, f.setPrefix()) {
			delete(have, name)
		}
	}
	return have, nil
}

// Cleanup removes everything the IPv4 enforcer put into the kernel: the
// FORWARD jump (every copy), its chains and its ipsets. It works from the
// kernel alone (also after a crash) and is idempotent; minikit down calls it.
func Cleanup(ipt iptables.Interface, sets IPSets) error {
	return CleanupFamily(ipt, sets, corev1.IPv4Protocol)
}

// CleanupFamily is Cleanup for the enforcer of one family, with that
// family's runner (ip6tables for IPv6). It destroys that family's ipsets
// only: the other family's may still be in use by its rules.
func CleanupFamily(ipt iptables.Interface, sets IPSets, family corev1.IPFamily) error {
	var errs []error
	names, err := ipt.ListChains(iptables.TableFilter)
	if err != nil {
		return fmt.Errorf("listing filter chains: %w", err)
	}
	var ours []string
	for _, n := range names {
		if Owned(n) {
			ours = append(ours, n)
		}
	}
	if slices.Contains(ours, ChainHook) {
		for range 16 {
			ok, err := ipt.HasRule(iptables.TableFilter, "FORWARD", jumpArgs...)
			if err != nil || !ok {
				break
			}
			if err := ipt.DeleteRule(iptables.TableFilter, "FORWARD", jumpArgs...); err != nil {
				errs = append(errs, fmt.Errorf("deleting the FORWARD jump: %w", err))
				break
			}
		}
	}
	if len(ours) > 0 {
		if err := ipt.Restore(restoreInput(&State{}, ours, jumpFix{}), true); err != nil {
			errs = append(errs, fmt.Errorf("deleting %d network policy chains: %w", len(ours), err))
		}
	}
	if sets != nil {
		have, err := listFamily(sets, familyOf(family))
		if err != nil {
			errs = append(errs, err)
		}
		for name := range have {
			if err := sets.Destroy(name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
