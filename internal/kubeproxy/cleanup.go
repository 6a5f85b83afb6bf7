package kubeproxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"

	"github.com/minikit/minikit/internal/iptables"
)

// Cleanup removes everything the proxy put into iptables: the jump rules from
// built-in chains (one `iptables -D` each) and every KUBE-* chain in the nat,
// filter and mangle tables (one --noflush restore per table that declares,
// hence flushes, each of them and then deletes it). Built-in chains are never
// flushed and nothing else is touched. It works from the kernel state alone,
// so it also cleans up after a crash; minikit down calls it.
func Cleanup(ipt iptables.Interface) error {
	var errs []error
	for _, j := range jumpRules {
		// A jump to a chain that is gone cannot exist (iptables refuses even to
		// check for it), so there is nothing to delete.
		if ok, err := ipt.ChainExists(j.table, j.to); err == nil && !ok {
			continue
		}
		if err := ipt.DeleteRule(j.table, j.from, j.args()...); err != nil {
			errs = append(errs, fmt.Errorf("deleting jump %s %s -> %s: %w", j.table, j.from, j.to, err))
		}
	}
	for _, t := range []string{iptables.TableNAT, iptables.TableFilter, iptables.TableMangle} {
		names, err := ipt.ListChains(t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var ours []string
		for _, n := range names {
			if ownedChain(n) && !iptables.IsBuiltin(t, n) {
				ours = append(ours, n)
			}
		}
		if len(ours) == 0 {
			continue
		}
		// Descending names keep iptables-nft's sorted chain list cheap (see sortByTarget).
		sort.Sort(sort.Reverse(sort.StringSlice(ours)))
		var b bytes.Buffer
		b.WriteString("*" + t + "\n")
		for _, n := range ours {
			b.WriteString(":" + n + " - [0:0]\n")
		}
		for _, n := range ours {
			b.WriteString("-X " + n + "\n")
		}
		b.WriteString("COMMIT\n")
		if err := ipt.Restore(b.Bytes(), true); err != nil {
			errs = append(errs, fmt.Errorf("deleting %d KUBE-* chains in %s: %w", len(ours), t, err))
		}
	}
	return errors.Join(errs...)
}

// Handler serves the proxy's debug endpoint (kubernetes#74677 asked for one):
// /rules is the rule set of the last successful sync as iptables-restore
// input, /stats the sync statistics as JSON, /healthz 200 once a sync has
// succeeded.
func (p *Proxier) Handler() http.Handler { return debugHandler(p.Rules, p.Stats, nil) }

// debugHandler is both proxy modes' debug endpoint: /rules, /stats, /healthz,
// and /metrics when metrics is not nil.
func debugHandler(rules func() []byte, stats func() Stats, metrics func(io.Writer)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/rules", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write(rules())
	})
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(stats())
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		s := stats()
		if s.LastSync.IsZero() || s.LastError != "" {
			http.Error(w, "not synced: "+s.LastError, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	if metrics != nil {
		mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
			metrics(w)
		})
	}
	return mux
}
