package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/minikit/minikit/cluster"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "minikit",
		Short:         "A mini-Kubernetes networking stack for labs, on real kernel objects",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.AddCommand(newServerCommand(), newVersionCommand(), newImageRunCommand(), newExecCommand(), newDownCommand(),
		newAgentCommand(), newLabCommand(), newIngressCommand(), newTraceCommand(), newDocsCommand())
	root.AddCommand(newLabHelperCommands()...)
	root.AddCommand(newKubectlCommands()...)
	return root
}

// newKubectlCommands are the client commands. They run the real kubectl against
// the cluster, so that minikit get/apply/describe/delete/logs behave exactly as the
// kubectl a student will use on a real cluster. (Linking kubectl's command packages
// into minikit instead would make every container start, which re-executes this
// binary, several times slower.)
func newKubectlCommands() []*cobra.Command {
	var out []*cobra.Command
	for _, verb := range []string{"apply", "get", "describe", "delete", "logs", "scale", "patch", "rollout", "wait", "kubectl"} {
		verb := verb
		short := "kubectl " + verb + ", against this cluster"
		if verb == "kubectl" {
			short = "Run kubectl against this cluster"
		}
		out = append(out, &cobra.Command{
			Use:                verb,
			Short:              short,
			DisableFlagParsing: true,
			RunE: func(cmd *cobra.Command, args []string) error {
				if verb != "kubectl" {
					args = append([]string{verb}, args...)
				}
				return runKubectl(args)
			},
		})
	}
	return out
}

// runKubectl replaces this process with kubectl, adding --kubeconfig when the user
// gave none: kubectl's own order (--kubeconfig, then KUBECONFIG), then the
// kubeconfig a local server wrote.
func runKubectl(args []string) error {
	path, err := exec.LookPath("kubectl")
	if err != nil {
		return fmt.Errorf("kubectl is not installed (Debian/Ubuntu: apt-get install kubernetes-client, or see https://kubernetes.io/docs/tasks/tools/): %w", err)
	}
	argv := append([]string{"kubectl"}, args...)
	if kc := defaultKubeconfig(args); kc != "" {
		argv = append([]string{"kubectl", "--kubeconfig", kc}, args...)
	}
	return syscall.Exec(path, argv, os.Environ())
}

// defaultKubeconfig is the kubeconfig to add, or "" when kubectl's own lookup applies.
func defaultKubeconfig(args []string) string {
	for _, a := range args {
		if a == "--kubeconfig" || strings.HasPrefix(a, "--kubeconfig=") {
			return ""
		}
	}
	if os.Getenv(clientcmd.RecommendedConfigPathEnvVar) != "" {
		return ""
	}
	local := cluster.KubeconfigPath(cluster.DefaultDataDir)
	if _, err := os.Stat(local); err == nil {
		return local
	}
	return ""
}

// kubeClient connects to the API server the kubeconfig names (when kubeconfig is
// "": KUBECONFIG, then the local server's) and returns the namespace to use:
// namespace when it is set, else the kubeconfig context's, as kubectl does.
func kubeClient(kubeconfig, namespace string) (*kubernetes.Clientset, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig == "" {
		kubeconfig = defaultKubeconfig(nil)
	}
	rules.ExplicitPath = kubeconfig
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	if namespace == "" {
		ns, _, err := loader.Namespace()
		if err != nil {
			return nil, "", err
		}
		namespace = ns
	}
	rc, err := loader.ClientConfig()
	if err != nil {
		return nil, "", err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, "", err
	}
	return client, namespace, nil
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the minikit version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, args []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "minikit %s (Kubernetes API %s)\n", version, "v1.32")
		},
	}
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

func newServerCommand() *cobra.Command {
	var (
		dataDir, listen, serviceCIDR, nodePorts, advertise, logLevel string
		nodeName, nodeIP, podCIDR                                    string
		disableAgent                                                 bool
		sans                                                         []string
	)
	var lbPool string
	var dnsOpts cluster.DNSOptions
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the API server, the controllers and this node's agent",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg := cluster.ServerConfig{DataDir: dataDir, Listen: listen, AdvertiseAddress: advertise,
				ExtraSANs: sans, Version: version, Logger: newLogger(logLevel), DisableAgent: disableAgent, NodeName: nodeName}
			cfg.LBPool = lbPool
			cfg.DNS = dnsOpts
			var err error
			if nodeIP != "" {
				if cfg.NodeIP, err = netip.ParseAddr(nodeIP); err != nil {
					return fmt.Errorf("parsing --node-ip: %w", err)
				}
			}
			if cfg.PodCIDR, err = netip.ParsePrefix(podCIDR); err != nil {
				return fmt.Errorf("parsing --cluster-cidr: %w", err)
			}
			if cfg.ServiceCIDR, err = netip.ParsePrefix(serviceCIDR); err != nil {
				return fmt.Errorf("parsing --service-cidr: %w", err)
			}
			if cfg.NodePortMin, cfg.NodePortMax, err = parsePortRange(nodePorts); err != nil {
				return fmt.Errorf("parsing --service-node-port-range: %w", err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			srv, err := cluster.StartServer(cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "minikit server ready at %s\nkubeconfig: %s\n", srv.URL, srv.Kubeconfig)
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return srv.Stop(sctx)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&dataDir, "data-dir", cluster.DefaultDataDir, "directory for the store, credentials and kubeconfig")
	fl.StringVar(&listen, "listen", "127.0.0.1:6443", "address of the API; any non-loopback address serves TLS with a bearer token")
	fl.StringVar(&serviceCIDR, "service-cidr", "10.96.0.0/12", "range of ClusterIPs")
	fl.StringVar(&nodePorts, "service-node-port-range", "30000-32767", "range of NodePorts")
	fl.StringVar(&advertise, "advertise-address", "", "address other nodes and the kubernetes Service use to reach the API")
	fl.StringSliceVar(&sans, "tls-san", nil, "extra names or addresses for the serving certificate")
	fl.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fl.BoolVar(&disableAgent, "disable-agent", false, "run the API and controllers only: no node agent, no pods, no kernel changes")
	fl.StringVar(&nodeName, "node-name", "", "name of this node (default: the hostname)")
	fl.StringVar(&nodeIP, "node-ip", "", "InternalIP of this node (default: the first non-loopback IPv4 address)")
	fl.StringVar(&podCIDR, "cluster-cidr", "10.244.0.0/16", "pod range; each node gets a /24 of it")
	addDNSFlags(fl, &dnsOpts)
	fl.StringVar(&lbPool, "lb-pool", "", "addresses for LoadBalancer Services, CIDRs or FIRST-LAST ranges, comma-separated, "+
		"on the nodes' network (e.g. 192.168.56.240-192.168.56.250); empty leaves them <pending>")
	return cmd
}

func parsePortRange(s string) (int32, int32, error) {
	lo, hi, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, fmt.Errorf("want LOW-HIGH, got %q", s)
	}
	a, err1 := strconv.Atoi(lo)
	b, err2 := strconv.Atoi(hi)
	if err1 != nil || err2 != nil || a < 1 || b > 65535 || a > b {
		return 0, 0, fmt.Errorf("want LOW-HIGH within 1-65535, got %q", s)
	}
	return int32(a), int32(b), nil
}
