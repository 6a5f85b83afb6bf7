package kubelet

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func everything() labels.Selector { return labels.Everything() }

// probeClient is shared by all HTTP probes; probes never reuse connections, like
// the kubelet's.
var probeClient = &http.Client{
	Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
	CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return http.ErrUseLastResponse
		}
		return nil
	},
}

// prober runs one probe or hook handler against a container: netProber
// over the pod network and in its namespaces, or a fake with scripted
// results in tests. ctx carries the probe's timeout.
type prober interface {
	probe(ctx context.Context, p *corev1.Probe, t probeTarget) error
}

// probeTarget is what one probe runs against.
type probeTarget struct {
	// kind is "startup", "readiness", "liveness" or "preStop".
	kind string
	spec corev1.Container
	// ip is the pod's IP, the default host of HTTP and TCP probes.
	ip string
	// execArgv wraps a command to run in the pod's namespaces.
	execArgv func([]string) []string
}

// ensureProbes starts the container's probe loops once per run of its process.
func (c *container) ensureProbes(ctx context.Context, pod *corev1.Pod, spec corev1.Container) {
	c.mu.Lock()
	if c.probeCancel != nil || !c.running {
		c.mu.Unlock()
		return
	}
	pctx, cancel := context.WithCancel(ctx)
	c.probeCancel = cancel
	ip, started := c.w.state.IP, c.started
	c.mu.Unlock()
	if spec.StartupProbe != nil && !started {
		go c.probeLoop(pctx, "startup", spec.StartupProbe, spec, ip)
	}
	if spec.ReadinessProbe != nil {
		go c.probeLoop(pctx, "readiness", spec.ReadinessProbe, spec, ip)
	}
	if spec.LivenessProbe != nil {
		go c.probeLoop(pctx, "liveness", spec.LivenessProbe, spec, ip)
	}
}

// probeLoop runs one probe with Kubernetes' timing and thresholds. Readiness and
// liveness wait for the startup probe to succeed.
func (c *container) probeLoop(ctx context.Context, kind string, p *corev1.Probe, spec corev1.Container, ip string) {
	period := time.Duration(max(p.PeriodSeconds, 1)) * time.Second
	timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
	success, failure := max(p.SuccessThreshold, 1), max(p.FailureThreshold, 1)
	clk := c.w.a.clock
	select {
	case <-ctx.Done():
		return
	case <-clk.After(time.Duration(p.InitialDelaySeconds) * time.Second):
	}
	var okRun, failRun int32
	t := clk.NewTicker(period)
	defer t.Stop()
	for {
		c.mu.Lock()
		started := c.started
		c.mu.Unlock()
		if kind == "startup" || started {
			err := c.probeOnce(ctx, kind, p, spec, ip, timeout)
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				okRun, failRun = okRun+1, 0
			} else {
				okRun, failRun = 0, failRun+1
			}
			switch kind {
			case "readiness":
				if okRun >= success {
					c.setProbe(func() { c.ready = true })
				} else if failRun >= failure {
					c.setProbe(func() { c.ready = false })
				}
			case "startup":
				if okRun >= 1 {
					c.setProbe(func() { c.started = true })
					return
				}
				if failRun >= failure {
					c.w.logf("startup probe failed, restarting container", "container", spec.Name, "err", err)
					c.mu.Lock()
					c.livenessFailed = true
					c.mu.Unlock()
					c.signal(9)
					return
				}
			case "liveness":
				if failRun >= failure {
					c.w.logf("liveness probe failed, restarting container", "container", spec.Name, "err", err)
					c.mu.Lock()
					c.livenessFailed = true
					c.mu.Unlock()
					c.signal(9)
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

func (c *container) setProbe(f func()) {
	c.mu.Lock()
	before := c.ready && c.started
	f()
	after := c.ready && c.started
	c.mu.Unlock()
	if before != after {
		c.w.wake()
	}
}

// probeOnce runs one probe of the container with its timeout.
func (c *container) probeOnce(ctx context.Context, kind string, p *corev1.Probe, spec corev1.Container, ip string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return c.w.a.prober.probe(ctx, p, probeTarget{kind: kind, spec: spec, ip: ip, execArgv: c.execArgv})
}

// netProber runs probes as the kubelet's prober does: HTTP GETs and TCP
// connects to the pod's IP from the node, commands in the pod's namespaces.
type netProber struct{}

func (netProber) probe(ctx context.Context, p *corev1.Probe, t probeTarget) error {
	spec, ip := t.spec, t.ip
	switch {
	case p.HTTPGet != nil:
		g := p.HTTPGet
		port, err := resolvePort(g.Port, spec)
		if err != nil {
			return err
		}
		host := ip
		if g.Host != "" {
			host = g.Host
		}
		scheme := "http"
		if g.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		path := g.Path
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+net.JoinHostPort(host, strconv.Itoa(port))+path, nil)
		if err != nil {
			return err
		}
		req.Header.Set("User-Agent", "kube-probe/1.37")
		for _, h := range g.HTTPHeaders {
			if strings.EqualFold(h.Name, "Host") {
				req.Host = h.Value
			} else {
				req.Header.Add(h.Name, h.Value)
			}
		}
		resp, err := probeClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("HTTP probe failed with statuscode: %d", resp.StatusCode)
		}
		return nil
	case p.TCPSocket != nil:
		port, err := resolvePort(p.TCPSocket.Port, spec)
		if err != nil {
			return err
		}
		host := ip
		if p.TCPSocket.Host != "" {
			host = p.TCPSocket.Host
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return err
		}
		return conn.Close()
	case p.Exec != nil:
		argv := t.execArgv(p.Exec.Command)
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("command %q failed: %v: %s", p.Exec.Command, err, strings.TrimSpace(string(out)))
		}
		return nil
	case p.GRPC != nil:
		return fmt.Errorf("gRPC probes are not supported by minikit")
	}
	return fmt.Errorf("probe has no handler")
}

// resolvePort turns a probe port (number or container port name) into a number.
func resolvePort(p intstr.IntOrString, spec corev1.Container) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, cp := range spec.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("port %q not found in container %q", p.StrVal, spec.Name)
}

// runPreStop runs the preStop hook of every running container that has one,
// concurrently, and returns when all are done or deadline (the end of the
// pod's grace period) passes; terminate sends SIGTERM after it, as the kubelet
// does. A hook's failure is logged and does not stop the termination. The time
// a hook takes is what lets every node's proxy drop the pod's endpoint before
// the process stops accepting connections.
func (w *podWorker) runPreStop(ctx context.Context, pod *corev1.Pod, deadline time.Time) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var wg sync.WaitGroup
	for _, spec := range pod.Spec.Containers {
		c := w.containers[spec.Name]
		if c == nil || spec.Lifecycle == nil || spec.Lifecycle.PreStop == nil {
			continue
		}
		c.mu.Lock()
		running := c.running
		c.mu.Unlock()
		if !running {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.runHook(ctx, spec.Lifecycle.PreStop, spec); err != nil && ctx.Err() == nil {
				w.logf("preStop hook failed", "container", spec.Name, "err", err)
			}
		}()
	}
	wg.Wait()
}

// runHook runs a lifecycle handler: sleep, exec or httpGet (tcpSocket hooks are
// accepted for compatibility and, as by the kubelet, not run).
func (c *container) runHook(ctx context.Context, h *corev1.LifecycleHandler, spec corev1.Container) error {
	switch {
	case h.Sleep != nil:
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(h.Sleep.Seconds) * time.Second):
		}
		return nil
	case h.Exec != nil || h.HTTPGet != nil:
		timeout := time.Minute
		if d, ok := ctx.Deadline(); ok {
			timeout = time.Until(d)
		}
		p := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: h.Exec, HTTPGet: h.HTTPGet}}
		return c.probeOnce(ctx, "preStop", p, spec, c.w.state.IP, timeout)
	}
	return nil
}
