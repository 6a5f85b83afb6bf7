package kubeproxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/minikit/minikit/internal/nft"
)

// monitor is the nftables mode's canary, run every SyncPeriod: the table, a
// base chain or one of our chains missing, a fixed chain's or (in rotation) a
// service chain's rule count changed, or an element missing from (or added
// to) the shared sets and maps forces a full sync, which repairs all of it
// in one transaction. kube-proxy's nftables mode has no such check; its
// iptables mode polls a canary chain.
func (p *NFTProxier) monitor(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.clock.After(p.cfg.SyncPeriod):
		}
		if drift := p.checkDrift(ctx); drift != "" {
			p.log.Info("nftables rules were changed by someone else; resyncing everything", "drift", drift)
			p.forceFullSync()
		}
	}
}

// checkDrift compares the kernel with what the last syncs wrote and says
// what differs ("" when nothing does, or before the first sync).
func (p *NFTProxier) checkDrift(ctx context.Context) string {
	p.mu.Lock()
	ready := p.initialized && !p.needFull
	p.mu.Unlock()
	if !ready {
		return ""
	}
	p.syncMu.Lock()
	defer p.syncMu.Unlock()
	if !p.synced || !p.flushed {
		return ""
	}
	names, err := p.nft.ListChains(ctx)
	if err != nil {
		return "listing chains: " + err.Error()
	}
	if len(names) == 0 {
		return "table ip " + nftTableName + " is gone"
	}
	have := make(map[string]bool, len(names))
	for _, n := range names {
		have[n] = true
	}
	fixed := make([]string, 0, len(p.fixed))
	for n := range p.fixed {
		fixed = append(fixed, n)
	}
	sort.Strings(fixed)
	for _, n := range fixed {
		if !have[n] {
			return "chain " + n + " is gone"
		}
		if got, err := p.nft.CountRules(ctx, n); err != nil {
			return "counting rules of " + n + ": " + err.Error()
		} else if got != p.fixed[n] {
			return fmt.Sprintf("chain %s has %d rules, not %d", n, got, p.fixed[n])
		}
	}
	svc := make([]string, 0, len(p.chains))
	for n := range p.chains {
		if !have[n] {
			return "chain " + n + " is gone"
		}
		svc = append(svc, n)
	}
	// Counting the rules of every service chain costs a netlink dump per
	// chain; a window of them per check covers all of them in turn.
	if len(svc) > 0 {
		sort.Strings(svc)
		k := min(p.cfg.DriftSampleChains, len(svc))
		for i := 0; i < k; i++ {
			n := svc[(p.driftCursor+i)%len(svc)]
			want := len(p.chains[n].rules)
			got, err := p.nft.CountRules(ctx, n)
			if err != nil {
				return "counting rules of " + n + ": " + err.Error()
			}
			if got != want {
				return fmt.Sprintf("chain %s has %d rules, not %d", n, got, want)
			}
		}
		p.driftCursor = (p.driftCursor + k) % len(svc)
	}
	for _, set := range p.managedSets() {
		elems, err := p.nft.ListElements(ctx, set)
		if err != nil {
			if errors.Is(err, nft.ErrNotFound) {
				return set + " is gone"
			}
			return "listing " + set + ": " + err.Error()
		}
		want := p.kernel[set]
		seen := 0
		for _, e := range elems {
			k := strings.Join(e.Key, " . ")
			w, ok := want[k]
			if !ok {
				return "unexpected element " + k + " in " + set
			}
			if w.value != e.Value {
				return fmt.Sprintf("element %s of %s is %q, not %q", k, set, e.Value, w.value)
			}
			seen++
		}
		if seen != len(want) {
			listed := make(map[string]bool, len(elems))
			for _, e := range elems {
				listed[strings.Join(e.Key, " . ")] = true
			}
			for k := range want {
				if !listed[k] {
					return "element " + k + " missing from " + set
				}
			}
		}
	}
	return ""
}

// dumper is what a backend offers to show the whole table (the Fake's Dump).
type dumper interface{ Dump() string }

// lister is what a backend offers to list the table as `nft list table`.
type lister interface {
	List(ctx context.Context) (string, error)
}

// Rules returns the table as text: the backend's own listing when it has
// one, otherwise nothing before the first successful sync.
func (p *NFTProxier) Rules() []byte {
	switch b := p.nft.(type) {
	case lister:
		out, err := b.List(context.Background())
		if err != nil {
			return []byte("listing table ip " + nftTableName + ": " + err.Error() + "\n")
		}
		return []byte(out)
	case dumper:
		return []byte(b.Dump())
	}
	return nil
}

// Handler serves the proxy's debug endpoint: /rules is the table's text,
// /stats the sync statistics as JSON, /healthz 200 once a sync has
// succeeded, /metrics the sync duration histograms.
func (p *NFTProxier) Handler() http.Handler { return debugHandler(p.Rules, p.Stats, p.WriteMetrics) }

// CleanupNFT removes the nftables mode's table (and with it every chain,
// set and map of it); minikit down and a node starting in iptables mode call
// it. A missing table is no error.
func CleanupNFT(ctx context.Context, backend nft.Interface) error {
	if err := backend.DeleteTable(ctx); err != nil {
		return fmt.Errorf("deleting table ip %s: %w", nftTableName, err)
	}
	return nil
}
