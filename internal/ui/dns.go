package ui

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/minikit/minikit/internal/dns"
	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/topology"

	mdns "github.com/miekg/dns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Exchanger sends one DNS query to server from inside the network
// namespace netns (never "": the machine's own namespace is not the lab's).
type Exchanger func(ctx context.Context, netns string, server netip.AddrPort, m *mdns.Msg) (*mdns.Msg, time.Duration, error)

// netnsExchange asks over UDP from a socket made inside netns, as a process
// in the pod would.
func netnsExchange(ctx context.Context, netns string, server netip.AddrPort, m *mdns.Msg) (*mdns.Msg, time.Duration, error) {
	if netns == "" {
		return nil, 0, errors.New("refusing to send a DNS query from the machine's own network namespace")
	}
	conn, err := lab.DialIn(ctx, netns, "udp", server.String())
	if err != nil {
		return nil, 0, fmt.Errorf("opening a socket in netns %s: %w", netns, err)
	}
	defer conn.Close()
	c := &mdns.Client{Net: "udp", Timeout: 2 * time.Second}
	return c.ExchangeWithConnContext(ctx, m, &mdns.Conn{Conn: conn})
}

// DNSTry is one query of a lookup: the name tried and what came back.
type DNSTry struct {
	Name    string   `json:"name"`
	Rcode   string   `json:"rcode,omitempty"`
	Answers []string `json:"answers,omitempty"`
	RTT     string   `json:"rtt,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// DNSLookup is a name looked up from a pod the way its resolver does.
type DNSLookup struct {
	Pod        string   `json:"pod"`
	Netns      string   `json:"netns"`
	Name       string   `json:"name"`
	Type       string   `json:"type"`
	ResolvConf string   `json:"resolvConf"`
	Nameserver string   `json:"nameserver"`
	Search     []string `json:"search"`
	Ndots      int      `json:"ndots"`
	Tries      []DNSTry `json:"tries"`
	// Answer is the index of the try that answered, or -1.
	Answer int `json:"answer"`
}

// serveDNS is GET /api/dns?pod=NAMESPACE/NAME&name=NAME[&type=A]: the
// lookup a process in the pod would make (its resolv.conf's first
// nameserver, search list and ndots), one query per name tried, each sent
// from inside the pod's network namespace.
func (s *Server) serveDNS(r *http.Request) (any, error) {
	q := r.URL.Query()
	podKey, name := q.Get("pod"), strings.TrimSpace(q.Get("name"))
	if name == "" {
		return nil, badRequest("dns: name= is required")
	}
	if _, ok := mdns.IsDomainName(name); !ok {
		return nil, badRequest("dns: %q is not a domain name", name)
	}
	typ := strings.ToUpper(q.Get("type"))
	if typ == "" {
		typ = "A"
	}
	qtype, ok := map[string]uint16{"A": mdns.TypeA, "AAAA": mdns.TypeAAAA, "SRV": mdns.TypeSRV, "PTR": mdns.TypePTR, "TXT": mdns.TypeTXT}[typ]
	if !ok {
		return nil, badRequest("dns: type %q: want A, AAAA, SRV, PTR or TXT", typ)
	}
	g, _ := s.live.snapshot()
	var host *topology.Host
	for i := range g.Hosts {
		if h := &g.Hosts[i]; h.Kind == topology.KindPod && (h.Name == podKey || h.ID == podKey) {
			host = h
		}
	}
	if host == nil {
		return nil, badRequest("dns: the lab has no pod %q with a network namespace (pick one as NAMESPACE/NAME)", podKey)
	}
	resolv, err := s.podResolvConf(r.Context(), host.Name)
	if err != nil {
		return nil, err
	}
	servers := dns.Upstreams(resolv)
	if len(servers) == 0 {
		return nil, fmt.Errorf("dns: pod %s's resolv.conf names no nameserver:\n%s", host.Name, resolv)
	}
	l := &DNSLookup{Pod: host.Name, Netns: host.ID, Name: name, Type: typ, ResolvConf: string(resolv),
		Nameserver: servers[0].String(), Search: dns.SearchDomains(resolv), Ndots: ndots(resolv), Answer: -1}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	for i, n := range searchNames(name, l.Search, l.Ndots) {
		m := new(mdns.Msg)
		m.SetQuestion(n, qtype)
		try := DNSTry{Name: n}
		resp, rtt, err := s.cfg.Exchange(ctx, host.ID, servers[0], m)
		if err != nil {
			try.Error = err.Error()
			l.Tries = append(l.Tries, try)
			continue
		}
		try.Rcode, try.RTT = mdns.RcodeToString[resp.Rcode], rtt.Round(time.Microsecond).String()
		for _, rr := range resp.Answer {
			try.Answers = append(try.Answers, rr.String())
		}
		l.Tries = append(l.Tries, try)
		if resp.Rcode == mdns.RcodeSuccess && len(resp.Answer) > 0 {
			l.Answer = i
			break
		}
	}
	return l, nil
}

// podResolvConf reads the resolv.conf the node agent wrote for the pod
// (AGENT_DIR/pods/UID/resolv.conf, a lab node's agent dir being
// LABDIR/NODE/agent), the file mounted as the pod's /etc/resolv.conf.
func (s *Server) podResolvConf(ctx context.Context, key string) ([]byte, error) {
	ns, name, _ := strings.Cut(key, "/")
	p, err := s.cfg.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("dns: getting pod %s: %w", key, err)
	}
	uid := string(p.UID)
	if uid == "" || strings.ContainsAny(uid, "/\\") || strings.Contains(uid, "..") || strings.ContainsAny(p.Spec.NodeName, "/\\") {
		return nil, fmt.Errorf("dns: pod %s has no usable UID or node", key)
	}
	path := filepath.Join(s.cfg.Lab.Dir, p.Spec.NodeName, "agent", "pods", uid, "resolv.conf")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("dns: reading pod %s's resolv.conf: %w", key, err)
	}
	return b, nil
}

// ndots is the resolv.conf's options ndots:N (the last one wins), 1 when
// none is given, as in glibc.
func ndots(resolv []byte) int {
	n := 1
	sc := bufio.NewScanner(bytes.NewReader(resolv))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "options" {
			continue
		}
		for _, o := range f[1:] {
			if v, ok := strings.CutPrefix(o, "ndots:"); ok {
				if i, err := strconv.Atoi(v); err == nil {
					n = min(max(i, 0), 15)
				}
			}
		}
	}
	return n
}

// searchNames are the fully qualified names glibc's resolver tries for
// name, in order: a name ending in a dot only as it is; a name with at
// least ndots dots as it is first, then with each search domain; any other
// name with each search domain first, then as it is.
func searchNames(name string, search []string, ndots int) []string {
	if strings.HasSuffix(name, ".") {
		return []string{name}
	}
	var withSearch []string
	for _, d := range search {
		withSearch = append(withSearch, mdns.Fqdn(name+"."+strings.TrimSuffix(d, ".")))
	}
	if strings.Count(name, ".") >= ndots {
		return append([]string{mdns.Fqdn(name)}, withSearch...)
	}
	return append(withSearch, mdns.Fqdn(name))
}
