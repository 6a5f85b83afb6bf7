package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/miekg/dns"
)

// kubernetesName is the name every cluster DNS answers: the API's Service.
const kubernetesName = "kubernetes.default.svc.cluster.local."

// WaitServices waits until, from every node, the cluster DNS Service
// (ClusterDNS, a ClusterIP) answers kubernetes.default.svc.cluster.local
// with the API's ClusterIP. That one answer proves what a pod needs before
// anything else: the node's service proxy has written the rules of the
// Services (the query goes through them), and a DNS server is running,
// synced and published among kube-dns's endpoints. Up returns when the
// nodes are Ready, which says neither.
func (l *Lab) WaitServices(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for i := 1; i <= l.cfg.Nodes; i++ {
		host := nodeName(i)
		var last error
		for {
			if last = l.queryClusterDNS(ctx, host); last == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting for the cluster DNS to answer on %s: %w", host, last)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// queryClusterDNS asks the cluster DNS Service, from host's namespace, for
// the kubernetes Service's address.
func (l *Lab) queryClusterDNS(ctx context.Context, host string) error {
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := l.DialContext(qctx, host, "udp", net.JoinHostPort(ClusterDNS, "53"))
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline, _ := qctx.Deadline()
	conn.SetDeadline(deadline)
	m := new(dns.Msg)
	m.SetQuestion(kubernetesName, dns.TypeA)
	c := &dns.Conn{Conn: conn}
	if err := c.WriteMsg(m); err != nil {
		return err
	}
	r, err := c.ReadMsg()
	if err != nil {
		return err
	}
	if r.Rcode != dns.RcodeSuccess {
		return fmt.Errorf("%s: %s", kubernetesName, dns.RcodeToString[r.Rcode])
	}
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok && a.A.String() == KubernetesIP {
			return nil
		}
	}
	return fmt.Errorf("%s: no A record %s in %v", kubernetesName, KubernetesIP, r.Answer)
}

// CollectLogs copies every log of the lab in dir (each host's HOST.log, each
// embedded etcd member's as NODE-etcd.log) into out, made if missing, and
// returns the files it wrote: what a CI job keeps as artifacts. It reads
// only files, so it works on a lab whose processes died.
func CollectLogs(dir, out string) ([]string, error) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	etcd, _ := filepath.Glob(filepath.Join(dir, "*", "etcd", "etcd.log"))
	if len(logs)+len(etcd) == 0 {
		return nil, fmt.Errorf("collecting logs: no log in %s", dir)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("collecting logs: %w", err)
	}
	var wrote []string
	var errs []error
	for _, p := range append(logs, etcd...) {
		name := filepath.Base(p)
		if filepath.Base(filepath.Dir(p)) == "etcd" {
			name = filepath.Base(filepath.Dir(filepath.Dir(p))) + "-etcd.log"
		}
		dst := filepath.Join(out, name)
		if err := copyFile(p, dst); err != nil {
			errs = append(errs, err)
			continue
		}
		wrote = append(wrote, dst)
	}
	slices.Sort(wrote)
	if err := errors.Join(errs...); err != nil {
		return wrote, fmt.Errorf("collecting logs: %w", err)
	}
	return wrote, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, in); err != nil {
		f.Close()
		return fmt.Errorf("copying %s: %w", src, err)
	}
	return f.Close()
}
