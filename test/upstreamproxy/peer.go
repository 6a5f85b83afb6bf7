package upstreamproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/minikit/minikit/internal/netns"

	"k8s.io/client-go/tools/clientcmd"
)

// Peer is upstream kube-proxy running in a network namespace of its own.
type Peer struct {
	NS  string
	cmd *exec.Cmd
	log *syncBuffer
	ln  net.Listener
	wg  sync.WaitGroup
	// exited is closed when the process ends; err is its exit status.
	exited chan struct{}
	err    error
}

// PeerConfig says how to start the peer.
type PeerConfig struct {
	Binary string // kube-proxy, from scripts/build-upstream-proxy.sh
	// NS is the network namespace to create (mkt-<name>-*); MirrorNS is the
	// minikit node namespace whose IPv4 addresses it copies onto links of
	// the same names, so that the peer sees the node's addresses.
	NS, MirrorNS string
	// Kubeconfig's server must be https://127.0.0.1:PORT in the root
	// namespace: the peer reaches it through a splice this process runs
	// (a listener inside NS on the same address, dialling out from here).
	Kubeconfig  string
	Hostname    string // --hostname-override: the minikit node it stands in for
	ClusterCIDR string
	Args        []string // more flags (the bench's --proxy-mode)
}

// StartPeer creates the namespace and starts kube-proxy in it. Stop undoes
// everything, also after a failed start.
func StartPeer(cfg PeerConfig) (*Peer, error) {
	if !strings.HasPrefix(cfg.NS, "mkt-") {
		return nil, fmt.Errorf("peer namespace %q: must start with mkt-", cfg.NS)
	}
	p := &Peer{NS: cfg.NS, log: &syncBuffer{}, exited: make(chan struct{})}
	exec.Command("ip", "netns", "del", cfg.NS).Run() // a leftover of a killed run
	if out, err := exec.Command("ip", "netns", "add", cfg.NS).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("creating netns %s: %v: %s", cfg.NS, err, out)
	}
	fail := func(err error) (*Peer, error) {
		p.Stop()
		return nil, err
	}
	if err := p.mirror(cfg.MirrorNS); err != nil {
		return fail(err)
	}
	if err := p.spliceAPI(cfg.Kubeconfig); err != nil {
		return fail(err)
	}
	args := append([]string{"netns", "exec", cfg.NS, cfg.Binary,
		"--kubeconfig", cfg.Kubeconfig, "--hostname-override", cfg.Hostname, "--cluster-cidr", cfg.ClusterCIDR, "--v", "2"}, cfg.Args...)
	p.cmd = exec.Command("ip", args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return fail(fmt.Errorf("starting kube-proxy: %w", err))
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// mirror copies the IPv4 addresses of from's links (not lo) onto links of the
// same names in the peer's namespace.
func (p *Peer) mirror(from string) error {
	out, err := exec.Command("ip", "netns", "exec", from, "ip", "-o", "-4", "addr", "show").Output()
	if err != nil {
		return fmt.Errorf("listing %s's addresses: %w", from, err)
	}
	run := func(args ...string) error {
		if out, err := exec.Command("ip", append([]string{"netns", "exec", p.NS, "ip"}, args...)...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s in %s: %v: %s", strings.Join(args, " "), p.NS, err, out)
		}
		return nil
	}
	if err := run("link", "set", "lo", "up"); err != nil {
		return err
	}
	made := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if len(f) < 4 || f[2] != "inet" || f[1] == "lo" {
			continue
		}
		dev := strings.SplitN(f[1], "@", 2)[0]
		if !made[dev] {
			// A veth with its peer left down: the kernel may lack dummy links.
			if err := run("link", "add", dev, "type", "veth", "peer", "name", dev+"-p"); err != nil {
				return err
			}
			if err := run("link", "set", dev, "up"); err != nil {
				return err
			}
			made[dev] = true
		}
		if err := run("addr", "add", f[3], "dev", dev); err != nil {
			return err
		}
	}
	if len(made) == 0 {
		return fmt.Errorf("%s has no IPv4 address to mirror", from)
	}
	return nil
}

// spliceAPI listens inside the peer's namespace on the kubeconfig's server
// address and splices each connection to the same address in the root
// namespace, where the lab forwards it to the API server: loopback only.
func (p *Peer) spliceAPI(kubeconfig string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("kubeconfig server %s is not on loopback", cfg.Host)
	}
	addr := u.Host
	err = netns.DoPath(netns.NetNSPath(p.NS), func() error {
		var err error
		p.ln, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		return fmt.Errorf("listening on %s in %s: %w", addr, p.NS, err)
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := p.ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer c.Close()
				up, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
				go func() { io.Copy(c, up); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
				<-done
				<-done
			}()
		}
	}()
	return nil
}

// Running returns an error if kube-proxy has exited.
func (p *Peer) Running() error {
	select {
	case <-p.exited:
		return fmt.Errorf("kube-proxy exited: %v", p.err)
	default:
		return nil
	}
}

// Log returns kube-proxy's output so far.
func (p *Peer) Log() string { return p.log.String() }

// Save returns iptables-save of the peer's namespace (filter, nat, mangle).
func (p *Peer) Save() (string, error) {
	out, err := exec.Command("ip", "netns", "exec", p.NS, "iptables-save").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("iptables-save in %s: %v: %s", p.NS, err, out)
	}
	return string(out), nil
}

// Metrics fetches kube-proxy's /metrics (127.0.0.1:10249 in its namespace).
func (p *Peer) Metrics(ctx context.Context) (string, error) {
	return GetInNetns(ctx, p.NS, "http://127.0.0.1:10249/metrics")
}

// GetInNetns GETs url from inside a network namespace.
func GetInNetns(ctx context.Context, ns, url string) (string, error) {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := netns.DoPath(netns.NetNSPath(ns), func() error {
			var d net.Dialer
			var err error
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s in %s: %s", url, ns, resp.Status)
	}
	return string(b), err
}

// Stop ends kube-proxy (its own process, by pid), the splice, and deletes
// the namespace with everything kube-proxy wrote into it.
func (p *Peer) Stop() error {
	var errs []error
	if p.cmd != nil && p.cmd.Process != nil {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-p.exited
		}
	}
	if p.ln != nil {
		p.ln.Close()
	}
	if out, err := exec.Command("ip", "netns", "del", p.NS).CombinedOutput(); err != nil {
		errs = append(errs, fmt.Errorf("deleting netns %s: %v: %s", p.NS, err, out))
	}
	if _, err := os.Stat(netns.NetNSPath(p.NS)); err == nil {
		errs = append(errs, fmt.Errorf("netns %s still exists", p.NS))
	}
	return errors.Join(errs...)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
