package kubeproxy

import (
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// The nfacct counters kube-proxy's iptables rules count with, and the
// metrics it exports them as (pkg/proxy/metrics).
const (
	CounterLocalhostNodePorts = "localhost_nps_accepted_pkts"
	CounterInvalidDropped     = "ct_state_invalid_dropped_pkts"
)

// syncMetrics are kube-proxy's sync metrics, under its names and with its
// buckets, so that the same queries (and scripts/bench-proxy.sh) read
// minikit's proxy and kube-proxy alike. ip_family is always IPv4.
type syncMetrics struct {
	mu          sync.Mutex
	sync        promHistogram // every sync, full or partial
	full        promHistogram
	partial     promHistogram
	programming promHistogram
	lastSuccess time.Time
}

func newSyncMetrics() *syncMetrics {
	syncBuckets := exponentialBuckets(0.001, 2, 15)
	// 0.25 s, 0.5 s, 1..59 s, 60..115 s by 5, 120..300 s by 30.
	var prog []float64
	prog = append(prog, 0.25, 0.5)
	for i := 1; i <= 59; i++ {
		prog = append(prog, float64(i))
	}
	for i := 0; i < 12; i++ {
		prog = append(prog, 60+5*float64(i))
	}
	for i := 0; i < 7; i++ {
		prog = append(prog, 120+30*float64(i))
	}
	return &syncMetrics{
		sync: newPromHistogram(syncBuckets), full: newPromHistogram(syncBuckets), partial: newPromHistogram(syncBuckets),
		programming: newPromHistogram(prog),
	}
}

func exponentialBuckets(start, factor float64, n int) []float64 {
	b := make([]float64, n)
	for i := range b {
		b[i] = start
		start *= factor
	}
	return b
}

// observeSync records one sync. Like kube-proxy, the duration is recorded
// whether or not the sync succeeded; the timestamp only on success.
func (m *syncMetrics) observeSync(full bool, took time.Duration, ok bool, start time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := took.Seconds()
	m.sync.observe(s)
	if full {
		m.full.observe(s)
	} else {
		m.partial.observe(s)
	}
	if ok {
		m.lastSuccess = start.Add(took)
	}
}

// observeProgramming records, after a successful sync, how long each
// EndpointSlice change it programmed took from its trigger time.
func (m *syncMetrics) observeProgramming(now time.Time, triggers []time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range triggers {
		m.programming.observe(now.Sub(t).Seconds())
	}
}

// writeProgramming writes only the network programming histogram (the
// nftables mode writes its sync histograms itself).
func (m *syncMetrics) writeProgramming(w io.Writer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.programming.write(w, "kubeproxy_network_programming_duration_seconds", "In Cluster Network Programming Latency in seconds")
}

// triggerTime is the EndpointSlice's last-change-trigger-time, the start of
// kube-proxy's network programming latency, if it is newer than the proxier.
func triggerTime(s *discovery.EndpointSlice, created time.Time) (time.Time, bool) {
	v := s.Annotations[corev1.EndpointsLastChangeTriggerTime]
	if v == "" {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	return t, err == nil && t.After(created)
}

type promHistogram struct {
	bounds []float64
	counts []uint64 // per bucket, not cumulative
	count  uint64
	sum    float64
}

func newPromHistogram(bounds []float64) promHistogram {
	return promHistogram{bounds: bounds, counts: make([]uint64, len(bounds))}
}

func (h *promHistogram) observe(v float64) {
	h.count++
	h.sum += v
	for i, b := range h.bounds {
		if v <= b {
			h.counts[i]++
			return
		}
	}
}

// add adds o's observations (with the same bounds) to h.
func (h *promHistogram) add(o *promHistogram) {
	h.count += o.count
	h.sum += o.sum
	for i := range h.counts {
		if i < len(o.counts) {
			h.counts[i] += o.counts[i]
		}
	}
}

func (h *promHistogram) write(w io.Writer, name, help string) {
	fmt.Fprintf(w, "# HELP %s [ALPHA] %s\n# TYPE %s histogram\n", name, help, name)
	var cum uint64
	for i, b := range h.bounds {
		cum += h.counts[i]
		fmt.Fprintf(w, "%s_bucket{ip_family=\"IPv4\",le=%q} %d\n", name, strconv.FormatFloat(b, 'g', -1, 64), cum)
	}
	fmt.Fprintf(w, "%s_bucket{ip_family=\"IPv4\",le=\"+Inf\"} %d\n", name, h.count)
	fmt.Fprintf(w, "%s_sum{ip_family=\"IPv4\"} %s\n", name, strconv.FormatFloat(h.sum, 'g', -1, 64))
	fmt.Fprintf(w, "%s_count{ip_family=\"IPv4\"} %d\n", name, h.count)
}

// WriteMetrics writes the proxy's metrics in Prometheus text format under
// kube-proxy's names: the sync and network programming histograms, the last
// sync's time, and the nfacct counters read from the kernel at each scrape
// (only those that exist, as kube-proxy registers a collector only for a
// counter it can read).
func (p *Proxier) WriteMetrics(w io.Writer) {
	m := p.metrics
	m.mu.Lock()
	m.sync.write(w, "kubeproxy_sync_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds")
	m.full.write(w, "kubeproxy_sync_full_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for full resyncs")
	m.partial.write(w, "kubeproxy_sync_partial_proxy_rules_duration_seconds", "SyncProxyRules latency in seconds for partial resyncs")
	m.programming.write(w, "kubeproxy_network_programming_duration_seconds", "In Cluster Network Programming Latency in seconds")
	last := m.lastSuccess
	m.mu.Unlock()
	if !last.IsZero() {
		name := "kubeproxy_sync_proxy_rules_last_timestamp_seconds"
		fmt.Fprintf(w, "# HELP %s [ALPHA] The last time proxy rules were successfully synced\n# TYPE %s gauge\n", name, name)
		fmt.Fprintf(w, "%s{ip_family=\"IPv4\"} %s\n", name, strconv.FormatFloat(float64(last.UnixNano())/1e9, 'g', -1, 64))
	}
	if p.acct == nil {
		return
	}
	for _, c := range []struct{ counter, name, help string }{
		{CounterInvalidDropped, "kubeproxy_iptables_ct_state_invalid_dropped_packets_total", "packets dropped by iptables to work around conntrack problems"},
		{CounterLocalhostNodePorts, "kubeproxy_iptables_localhost_nodeports_accepted_packets_total", "Number of packets accepted on nodeports of loopback interface"},
	} {
		v, err := p.acct.Get(c.counter)
		if err != nil {
			continue
		}
		fmt.Fprintf(w, "# HELP %s [ALPHA] %s\n# TYPE %s counter\n%s %d\n", c.name, c.help, c.name, c.name, v.Packets)
	}
}
