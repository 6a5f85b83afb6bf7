package ui

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/minikit/minikit/internal/iptables/iptsim"
	"github.com/minikit/minikit/internal/topology"
	"github.com/minikit/minikit/internal/trace"
)

// traceAnswer is a trace as the page draws it: the result as `minikit trace
// -o json` prints it, each path's hops over the graph, and in iptables mode
// each step's rule counters as the kernel has them after the trace.
type traceAnswer struct {
	Result   *trace.Result       `json:"result"`
	Hops     [][]topology.Hop    `json:"hops"`
	Counters [][]*iptsim.Counter `json:"counters,omitempty"`
	// CountersError says why the counters could not be read.
	CountersError string `json:"countersError,omitempty"`
}

// serveTrace is GET /api/trace?from=FROM&to=TO[&namespace=NS][&family=ipv6][&live=1]:
// trace.Run in-process. Anything trace.Run refuses (an unknown FROM or TO, a
// Service without the port) is the request's fault: 400 with trace's own
// message.
func (s *Server) serveTrace(r *http.Request) (any, error) {
	q := r.URL.Query()
	o := trace.Config{From: q.Get("from"), To: q.Get("to"), Namespace: q.Get("namespace"), Proto: q.Get("proto"), Family: q.Get("family"), Lab: s.cfg.Lab.Name}
	if o.From == "" || o.To == "" {
		return nil, badRequest("trace: both FROM and TO are required (FROM: pod/NAME, node/NAME, client, external or an IP; TO: svc/NAME[:PORT] or ADDRESS:PORT)")
	}
	if v := q.Get("live"); v != "" {
		live, err := strconv.ParseBool(v)
		if err != nil {
			return nil, badRequest("trace: live=%q is not a boolean", v)
		}
		o.Live = live
	}
	select {
	case s.traces <- struct{}{}:
		defer func() { <-s.traces }()
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	res, err := s.cfg.Trace(ctx, o)
	if err != nil {
		return nil, &apiError{code: http.StatusBadRequest, err: fmt.Errorf("trace %s %s: %w", o.From, o.To, err)}
	}
	g, _ := s.live.snapshot()
	a := &traceAnswer{Result: res}
	for i := range res.Paths {
		a.Hops = append(a.Hops, s.cfg.PathOf(g, res, i))
	}
	if res.Mode == trace.ModeIPTables {
		read := s.cfg.Rules.IPTables
		if res.Family == "IPv6" {
			read = s.cfg.Rules.IPTablesIPv6
		}
		rules, err := read(res.Netns)
		if err != nil {
			a.CountersError = err.Error()
		} else {
			for _, p := range res.Paths {
				var cs []*iptsim.Counter
				for _, st := range p.Steps {
					if c, ok := rules.Counter(st.Table, st.Chain, st.Rule); ok && st.Rule > 0 && c.Text == st.Text {
						cs = append(cs, &c)
					} else {
						cs = append(cs, nil)
					}
				}
				a.Counters = append(a.Counters, cs)
			}
		}
	}
	return a, nil
}
