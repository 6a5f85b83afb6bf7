package minikittest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/fsutil"
	"github.com/minikit/minikit/internal/lab"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// LabOption configures StartLab.
type LabOption func(*labOptions)

type labOptions struct {
	nodes     int
	binary    string
	proxyMode string
	logger    *slog.Logger
	crdPaths  []string
}

// WithLabCRDs installs CustomResourceDefinitions into the lab before
// StartLab returns, Established, as WithCRDs does for StartAPI.
func WithLabCRDs(paths ...string) LabOption {
	return func(o *labOptions) { o.crdPaths = append(o.crdPaths, paths...) }
}

// WithNodes sets the number of nodes (default 2; 1 to 50). node1 runs
// `minikit server`, the others `minikit agent`.
func WithNodes(n int) LabOption { return func(o *labOptions) { o.nodes = n } }

// WithBinary names the minikit binary the lab's hosts run. Without it,
// StartLab takes $MINIKIT_BINARY, else builds github.com/minikit/minikit/cmd/minikit
// once per test binary with `go build` in the test's directory: the test's
// module must then be able to build it (add `tool
// github.com/minikit/minikit/cmd/minikit` to its go.mod, so that go.sum
// holds every module it needs).
func WithBinary(path string) LabOption { return func(o *labOptions) { o.binary = path } }

// WithProxyMode sets every node's service proxy mode: "iptables" (default)
// or "nftables".
func WithProxyMode(mode string) LabOption { return func(o *labOptions) { o.proxyMode = mode } }

// WithLabLogger sends the lab's own progress logs to l (default: discarded;
// the hosts' logs are files, shown by the test's log when it fails).
func WithLabLogger(l *slog.Logger) LabOption { return func(o *labOptions) { o.logger = l } }

// Lab is a running lab of StartLab.
type Lab struct {
	// Name is the lab's name, the prefix of its network namespaces
	// (NAME-node1, NAME-client, ...): unique per StartLab.
	Name string
	// Dir holds the lab's state, kubeconfig and every host's log
	// (HOST.log); it is removed with the lab.
	Dir string
	// Kubeconfig is the path of the lab's admin kubeconfig, for kubectl
	// (--kubeconfig) or KUBECONFIG.
	Kubeconfig string
	// Config is the same admin as a *rest.Config, through the lab's
	// forwarder on 127.0.0.1.
	Config *rest.Config
	// Nodes are the nodes' names, node1 first.
	Nodes []string
	// Addresses are the underlay addresses of the lab's hosts: every node,
	// "client" and "external".
	Addresses map[string]netip.Addr
	// ServiceCIDR, ClusterCIDR and ClusterDNS are the lab cluster's ranges
	// and the cluster DNS Service's address.
	ServiceCIDR, ClusterCIDR netip.Prefix
	ClusterDNS               netip.Addr

	lab    *lab.Lab
	binary string
}

// The lab's hosts besides its nodes.
const (
	// ClientHost is a machine on the lab's network that is no node: a
	// student's laptop, a CI runner. It reaches NodePorts and LoadBalancer
	// addresses, not ClusterIPs.
	ClientHost = lab.Client
	// ExternalHost answers as "the internet" for the lab's pods.
	ExternalHost = lab.External
)

// StartLab brings up a lab and returns once every node is Ready, the cluster
// DNS answers and every node's service proxy has its rules. It needs root:
// without it the test fails. Any other failure fails the test too, with the
// lab's logs. The lab is removed in t.Cleanup (then its hosts' logs are
// printed if the test failed), and by a watchdog process if the test binary
// exits without running its cleanups.
func StartLab(t testing.TB, opts ...LabOption) *Lab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("minikittest.StartLab needs root: a lab is made of network namespaces; run the test as root (sudo -E go test, or go test -exec sudo)")
	}
	o := labOptions{nodes: 2}
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger == nil {
		o.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	bin := o.binary
	if bin == "" {
		bin = os.Getenv("MINIKIT_BINARY")
	}
	if bin == "" {
		var err error
		if bin, err = buildMinikit(); err != nil {
			t.Fatalf("minikittest: building minikit for the lab: %v", err)
		}
	}
	b := make([]byte, 3)
	rand.Read(b)
	name := "mkt" + hex.EncodeToString(b)
	dir := filepath.Join(os.TempDir(), "minikit-"+name)

	// The watchdog removes the lab when this process dies without running
	// t.Cleanup.
	watchdog, err := lab.StartWatchdog(bin, name, dir)
	if err != nil {
		t.Fatalf("minikittest: starting the lab's watchdog: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, err := lab.Up(ctx, lab.Config{Name: name, Dir: dir, Binary: bin, Nodes: o.nodes, ProxyMode: o.proxyMode, Logger: o.logger})
	if err == nil {
		err = l.WaitServices(ctx)
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, hostLogs(dir))
			l.Down()
		}
	}
	if err != nil {
		watchdog.Stop()
		t.Fatalf("minikittest: lab up: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(hostLogs(dir))
		}
		if err := l.Down(); err != nil {
			t.Errorf("minikittest: lab down: %v", err)
		}
		watchdog.Stop()
	})
	cfg, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		t.Fatalf("minikittest: reading the lab's kubeconfig: %v", err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	if len(o.crdPaths) > 0 {
		if err := installCRDs(ctx, cfg, o.crdPaths); err != nil {
			t.Fatalf("minikittest: %v", err)
		}
	}
	info := l.Info(ctx)
	out := &Lab{Name: name, Dir: dir, Kubeconfig: l.Kubeconfig(), Config: cfg, Addresses: map[string]netip.Addr{},
		lab: l, binary: bin}
	out.ServiceCIDR, _ = netip.ParsePrefix(info.ServiceCIDR)
	out.ClusterCIDR, _ = netip.ParsePrefix(info.ClusterCIDR)
	out.ClusterDNS, _ = netip.ParseAddr(info.ClusterDNS)
	for _, h := range l.Hosts() {
		out.Addresses[h] = l.Addr(h)
		if h != lab.Client && h != lab.External {
			out.Nodes = append(out.Nodes, h)
		}
	}
	return out
}

// Exec runs argv inside pod namespace/name, as `kubectl exec` does (the
// pod's network, its /etc/resolv.conf and hosts), and returns its combined
// output, trimmed. Commands are the node's own (curl, dig, nc, sh...):
// minikit's images are built in, and every container of a pod shares its
// namespaces.
func (l *Lab) Exec(ctx context.Context, namespace, pod string, argv ...string) (string, error) {
	args := append([]string{"--kubeconfig", l.Kubeconfig, "exec", "-n", namespace, pod, "--"}, argv...)
	out, err := exec.CommandContext(ctx, l.binary, args...).CombinedOutput()
	if err != nil {
		return strings.TrimSpace(string(out)), fmt.Errorf("exec in pod %s/%s: %s: %w: %s", namespace, pod, strings.Join(argv, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// Run runs argv on a host of the lab (a node, ClientHost or ExternalHost),
// in that host's network namespace, and returns its combined output,
// trimmed.
func (l *Lab) Run(ctx context.Context, host string, argv ...string) (string, error) {
	cmd := l.lab.Command(host, argv...)
	out, err := exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...).CombinedOutput()
	if err != nil {
		return strings.TrimSpace(string(out)), fmt.Errorf("running on %s: %s: %w: %s", host, strings.Join(argv, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// hostLogs is the end of every host's log, for a failed test.
func hostLogs(dir string) string {
	var b strings.Builder
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, p := range logs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if len(data) > 4096 {
			data = data[len(data)-4096:]
		}
		fmt.Fprintf(&b, "=== %s (last 4 KiB)\n%s\n", filepath.Base(p), data)
	}
	return b.String()
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

func buildMinikit() (string, error) {
	buildOnce.Do(func() {
		// Removed by the next test process once this one is gone.
		dir, err := fsutil.ProcessTempDir("minikittest-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "minikit")
		out, err := exec.Command("go", "build", "-o", builtBin, "github.com/minikit/minikit/cmd/minikit").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build github.com/minikit/minikit/cmd/minikit: %v: %s", err, out)
		}
	})
	return builtBin, buildErr
}
