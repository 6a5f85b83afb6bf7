package kubeproxy

import (
	"encoding/json"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// This file is kube-proxy's own health server (pkg/proxy/healthcheck,
// proxy_health.go), on --healthz-bind-address (0.0.0.0:10256): /healthz
// answers 200 while no change has waited longer than the health timeout for
// a sync and the node may take traffic, 503 otherwise; /livez ignores the
// node. Load balancers probe it to drain a node's traffic (KEP-3836), and
// `curl localhost:10256/healthz` on a node is how one checks the proxy.

// HealthzPort is kube-proxy's default healthz port (ports.ProxyHealthzPort).
const HealthzPort = 10256

// toBeDeletedTaint marks a node the cluster autoscaler is removing.
const toBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// proxyHealth is kube-proxy's ProxyHealth JSON (one IP family).
type proxyHealth struct {
	LastUpdated  time.Time                         `json:"lastUpdated"`
	CurrentTime  time.Time                         `json:"currentTime"`
	NodeEligible *bool                             `json:"nodeEligible,omitempty"`
	Healthy      bool                              `json:"healthy"`
	Status       map[corev1.IPFamily]proxierHealth `json:"status,omitempty"`
}

type proxierHealth struct {
	LastUpdated time.Time `json:"lastUpdated"`
	Healthy     bool      `json:"healthy"`
}

// health is ProxyHealthServer.Health: unhealthy when a change has waited
// for a sync longer than timeout.
func (c *changes) health(timeout time.Duration) proxyHealth {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	h := proxyHealth{CurrentTime: now, LastUpdated: c.updated, Healthy: true, Status: map[corev1.IPFamily]proxierHealth{}}
	if !c.queued.IsZero() && now.Sub(c.queued) >= timeout {
		h.Healthy = false
	}
	if !c.updated.IsZero() {
		family := corev1.IPv4Protocol
		if c.ipv6 {
			family = corev1.IPv6Protocol
		}
		h.Status[family] = proxierHealth{LastUpdated: c.updated, Healthy: h.Healthy}
	}
	return h
}

// healthOf is kube-proxy's ProxyHealthServer.Health over the proxiers of a
// dual-stack node (one per family): healthy when every one is, last updated
// when the least recent one was, with each family's status.
func healthOf(timeout time.Duration, cs []*changes) proxyHealth {
	var h proxyHealth
	for i, c := range cs {
		one := c.health(timeout)
		if i == 0 {
			h = one
			continue
		}
		h.Healthy = h.Healthy && one.Healthy
		if one.LastUpdated.Before(h.LastUpdated) {
			h.LastUpdated = one.LastUpdated
		}
		for f, s := range one.Status {
			h.Status[f] = s
		}
	}
	return h
}

// SetNode records this node as the Node informer last saw it (nil when it
// is gone): kube-proxy's healthz is 503 for a node being deleted or drained
// by the autoscaler, and before the node is known; its
// topology.kubernetes.io/zone label decides the endpoints hinted for this
// node's zone (topology-aware routing), and a change of zone resyncs every
// service.
func (c *changes) SetNode(n *corev1.Node) {
	eligible := n != nil && n.DeletionTimestamp.IsZero()
	if n != nil {
		for _, t := range n.Spec.Taints {
			if t.Key == toBeDeletedTaint {
				eligible = false
			}
		}
	}
	c.mu.Lock()
	c.nodeEligible = eligible
	changed := n != nil && n.Labels[corev1.LabelTopologyZone] != c.nodeZone
	if changed {
		c.nodeZone = n.Labels[corev1.LabelTopologyZone]
		c.needFull = true
	}
	c.mu.Unlock()
	if changed {
		c.runner.Run()
	}
}

// HealthzHandler serves kube-proxy's /healthz and /livez, with kube-proxy's
// health timeout: twice the sync period.
func (p *Proxier) HealthzHandler() http.Handler {
	return healthzHandler(2*p.cfg.SyncPeriod, &p.changes)
}

// HealthzHandler serves kube-proxy's /healthz and /livez, as Proxier's does.
func (p *NFTProxier) HealthzHandler() http.Handler {
	return healthzHandler(2*p.cfg.SyncPeriod, &p.changes)
}

// healthzHandler serves the health of cs, one proxier per IP family; the
// first one's node decides eligibility (every proxier is told the same node).
func healthzHandler(timeout time.Duration, cs ...*changes) http.Handler {
	c := cs[0]
	write := func(w http.ResponseWriter, h proxyHealth, healthy bool) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if !healthy {
			w.WriteHeader(http.StatusServiceUnavailable)
		} else {
			w.WriteHeader(http.StatusOK)
			// kube-proxy reports a healthy proxy as up to date now.
			h.LastUpdated = h.CurrentTime
		}
		b, _ := json.Marshal(h)
		w.Write(b)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		h := healthOf(timeout, cs)
		c.mu.Lock()
		eligible := c.nodeEligible
		c.mu.Unlock()
		h.NodeEligible = &eligible
		write(w, h, h.Healthy && eligible)
	})
	mux.HandleFunc("/livez", func(w http.ResponseWriter, r *http.Request) {
		h := healthOf(timeout, cs)
		write(w, h, h.Healthy)
	})
	return mux
}
