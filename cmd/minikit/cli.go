package main

import (
	"context"
	"errors"
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

	"github.com/minikit/minikit/internal/cluster"
	"github.com/minikit/minikit/internal/gateway"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "minikit",
		Short:         "A mini-Kubernetes networking stack for labs, on real kernel objects",
		SilenceUsage:  true,
		SilenceErrors: false,
		Example: `  sudo minikit lab up                                   # a 2-node cluster of network namespaces
  minikit apply -f examples/clusterip/hostnames.yaml
  minikit get pods,svc -o wide
  sudo minikit trace client svc/hostnames                # the path through the nodes' iptables rules
  sudo minikit lab down
  source <(minikit completion bash)                     # shell completion (also zsh, fish)`,
	}
	execCmd := newExecCommand()
	execCmd.Flags().StringVar(&execLab, "lab", "", "the lab whose API to ask (default: as the kubeconfig says, else the only lab)")
	execCmd.RegisterFlagCompletionFunc("lab", completeLabNames)
	root.AddCommand(newServerCommand(), newVersionCommand(), newImageRunCommand(), execCmd, newDownCommand(),
		newAgentCommand(), newLabCommand(), newIngressCommand(), newTraceCommand(), newProxyCommand(), newDocsCommand())
	root.AddCommand(newUICommand())
	root.AddCommand(newDoctorCommand())
	root.AddCommand(newStoreCommand())
	root.AddCommand(newLabHelperCommands()...)
	root.AddCommand(newKubectlCommands()...)
	requireRoot(root)
	return root
}

// rootReasons are the commands that need root, and why.
var rootReasons = map[string]string{
	"minikit server":    "it creates pods, a bridge and iptables rules",
	"minikit agent":     "it creates pods, a bridge and iptables rules",
	"minikit down":      "it removes pods, the bridge and iptables rules",
	"minikit exec":      "it enters the pod's namespaces",
	"minikit trace":     "it reads the iptables rules and routes inside the nodes' network namespaces",
	"minikit lab up":    "it creates network namespaces and runs the nodes",
	"minikit lab down":  "it stops the lab's processes and removes its namespaces",
	"minikit lab stop":  "it stops a node's processes",
	"minikit lab start": "it starts a node's processes inside its network namespace",
	"minikit lab exec":  "it enters a lab host's network namespace",
	"minikit ui":        "it reads the lab's network namespaces and the rules in them",

	"minikit proxy rules": "it reads the rules inside the nodes' network namespaces",
}

// requireRoot makes the commands that need root say so before doing
// anything else.
func requireRoot(root *cobra.Command) {
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		why, ok := rootReasons[cmd.CommandPath()]
		if !ok || os.Geteuid() == 0 {
			return nil
		}
		return fmt.Errorf("%s needs root (%s): run it with sudo: sudo %s", cmd.CommandPath(), why, strings.Join(os.Args, " "))
	}
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
			Example:            kubectlExamples[verb],
			DisableFlagParsing: true,
			ValidArgsFunction:  completeKubectl(verb),
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

// kubectlExamples are the Examples of the kubectl pass-through commands.
var kubectlExamples = map[string]string{
	"apply": `  minikit apply -f examples/clusterip/hostnames.yaml
  minikit apply -n clusterip -f examples/clusterip/hostnames.yaml
  minikit apply --lab np -n networkpolicy -f examples/networkpolicy/pods.yaml`,
	"get": `  minikit get pods -o wide
  minikit get deploy,svc,endpointslices -n clusterip
  minikit get nodes --lab np -o yaml`,
	"describe": `  minikit describe svc hostnames
  minikit describe pod client
  minikit describe networkpolicy -n networkpolicy`,
	"delete": `  minikit delete -f examples/clusterip/hostnames.yaml
  minikit delete pod client
  minikit delete namespace clusterip`,
	"logs": `  minikit logs deploy/hostnames
  minikit logs -f client
  minikit logs -n clusterip -l app=hostnames --prefix`,
	"scale": `  minikit scale deployment hostnames --replicas=5
  minikit scale -n clusterip deployment/hostnames --replicas=0`,
	"patch": `  minikit patch svc hostnames -p '{"spec":{"type":"NodePort"}}'
  minikit patch svc hostnames -p '{"spec":{"externalTrafficPolicy":"Local"}}'`,
	"rollout": `  minikit rollout status deployment/hostnames
  minikit rollout restart deployment/hostnames
  minikit rollout undo deployment/hostnames`,
	"wait": `  minikit wait --for=condition=Ready pod --all --timeout=60s
  minikit wait --for=condition=Available deployment/hostnames`,
	"kubectl": `  minikit kubectl config current-context
  minikit kubectl exec client -- curl -s http://hostnames/
  minikit kubectl --lab np get netpol -A`,
}

// runKubectl replaces this process with kubectl, adding --kubeconfig when the
// user gave none, found as every minikit command finds its cluster (see
// finder.find); --lab NAME, which kubectl does not know, picks a lab.
func runKubectl(args []string) error {
	path, err := exec.LookPath("kubectl")
	if err != nil {
		return fmt.Errorf("kubectl is not installed (Debian/Ubuntu: apt-get install kubernetes-client, or see https://kubernetes.io/docs/tasks/tools/): %w", err)
	}
	args, labName := cutLabFlag(args)
	argv := append([]string{"kubectl"}, args...)
	if !hasKubeconfigFlag(args) {
		t, err := defaultFinder().find("", labName)
		switch {
		case errors.Is(err, errNoCluster):
			// kubectl's own defaults (root's ~/.kube/config), and its own errors.
		case err != nil:
			return err
		case t.kubeconfig != "":
			argv = append([]string{"kubectl", "--kubeconfig", t.kubeconfig}, args...)
		}
	}
	return syscall.Exec(path, argv, os.Environ())
}

func hasKubeconfigFlag(args []string) bool {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "--kubeconfig" || strings.HasPrefix(a, "--kubeconfig=") {
			return true
		}
	}
	return false
}

// cutLabFlag removes --lab NAME (or --lab=NAME) from kubectl's arguments.
func cutLabFlag(args []string) (rest []string, name string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return append(rest, args[i:]...), name
		case a == "--lab" && i+1 < len(args):
			name = args[i+1]
			i++
		case strings.HasPrefix(a, "--lab="):
			name = strings.TrimPrefix(a, "--lab=")
		default:
			rest = append(rest, a)
		}
	}
	return rest, name
}

// execLab is `minikit exec --lab`.
var execLab string

// kubeClient connects to the API server found as finder.find finds it and
// returns the namespace to use: namespace when it is set, else the kubeconfig
// context's, as kubectl does.
func kubeClient(kubeconfig, namespace string) (*kubernetes.Clientset, string, error) {
	client, ns, _, err := kubeClientFor(kubeconfig, execLab, namespace)
	return client, ns, err
}

// kubeClientFor is kubeClient for a lab given by name, and says which lab
// (if any) the API it found belongs to.
func kubeClientFor(kubeconfig, labName, namespace string) (*kubernetes.Clientset, string, target, error) {
	c, _, ns, t, err := kubeClientsFor(kubeconfig, labName, namespace)
	return c, ns, t, err
}

// kubeClientsFor is kubeClientFor with a Gateway API client of the same
// kubeconfig.
func kubeClientsFor(kubeconfig, labName, namespace string) (*kubernetes.Clientset, gwclient.Interface, string, target, error) {
	t, err := defaultFinder().find(kubeconfig, labName)
	if err != nil {
		return nil, nil, "", t, err
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = t.kubeconfig
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	if namespace == "" {
		ns, _, err := loader.Namespace()
		if err != nil {
			return nil, nil, "", t, fmt.Errorf("reading the kubeconfig (%s): %w", t.how, err)
		}
		namespace = ns
	}
	rc, err := loader.ClientConfig()
	if err != nil {
		return nil, nil, "", t, fmt.Errorf("reading the kubeconfig (%s): %w", t.how, err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, "", t, err
	}
	gw, err := gwclient.NewForConfig(rc)
	if err != nil {
		return nil, nil, "", t, err
	}
	return client, gw, namespace, t, nil
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
		proxyMode, podNetwork                                        string
		disableAgent                                                 bool
		sans                                                         []string
	)
	var lbPool string
	var dnsOpts cluster.DNSConfig
	var ha cluster.ServerConfig // the datastore and HA flags
	var joinTokenFile string
	var gatewayAPI bool
	var gatewayAPIChannel string
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the API server, the controllers and this node's agent",
		Example: `  sudo minikit server
  sudo minikit server --log-level debug --lb-pool 192.168.56.240-192.168.56.250
  sudo minikit server --listen 0.0.0.0:6443 --advertise-address 192.168.56.10 --node-ip 192.168.56.10
  sudo minikit server --disable-agent --data-dir /tmp/minikit-api
  sudo minikit server --proxy-mode nftables
  sudo minikit server --datastore etcd --etcd-endpoints https://10.0.0.5:2379 --etcd-cafile ca.crt --etcd-certfile c.crt --etcd-keyfile c.key
  sudo minikit server --cluster-init --listen 0.0.0.0:6443 --node-ip 192.168.56.10
  sudo minikit server --join https://192.168.56.10:6443 --token-file server-token --listen 0.0.0.0:6443 --node-ip 192.168.56.11`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg := cluster.ServerConfig{DataDir: dataDir, Listen: listen, AdvertiseAddress: advertise,
				ExtraSANs: sans, Version: version, Logger: newLogger(logLevel), DisableAgent: disableAgent, NodeName: nodeName}
			cfg.LBPool = lbPool
			cfg.DisableGatewayAPI, cfg.GatewayAPIChannel = !gatewayAPI, gatewayAPIChannel
			cfg.DNS = dnsOpts
			cfg.Datastore, cfg.Etcd, cfg.ClusterInit, cfg.Join, cfg.JoinToken, cfg.JoinCAFile =
				ha.Datastore, ha.Etcd, ha.ClusterInit, ha.Join, ha.JoinToken, ha.JoinCAFile
			var err error
			if joinTokenFile != "" {
				b, err := os.ReadFile(joinTokenFile)
				if err != nil {
					return fmt.Errorf("reading --token-file: %w", err)
				}
				cfg.JoinToken = strings.TrimSpace(string(b))
			}
			if nodeIP != "" {
				if cfg.NodeIP, cfg.SecondaryNodeIP, err = parseNodeIPs(nodeIP); err != nil {
					return fmt.Errorf("parsing --node-ip: %w", err)
				}
			}
			// A joining server takes the cluster's ranges unless told otherwise.
			if cfg.Join == "" || cmd.Flags().Changed("cluster-cidr") {
				if cfg.PodCIDR, cfg.SecondaryPodCIDR, err = parseDualStackCIDRs(podCIDR); err != nil {
					return fmt.Errorf("parsing --cluster-cidr: %w", err)
				}
			}
			if cfg.Join == "" || cmd.Flags().Changed("service-cidr") {
				if cfg.ServiceCIDR, cfg.SecondaryServiceCIDR, err = parseDualStackCIDRs(serviceCIDR); err != nil {
					return fmt.Errorf("parsing --service-cidr: %w", err)
				}
			}
			if cfg.Join != "" && (cfg.SecondaryPodCIDR.IsValid() || cfg.SecondaryServiceCIDR.IsValid()) {
				return fmt.Errorf("--join with dual-stack ranges is not supported yet: a joining server takes one range of each kind")
			}
			if cfg.ProxyMode, err = cluster.ParseProxyMode(proxyMode); err != nil {
				return fmt.Errorf("parsing --proxy-mode: %w", err)
			}
			if cfg.PodNetwork, err = cluster.ParsePodNetwork(podNetwork); err != nil {
				return fmt.Errorf("parsing --pod-network: %w", err)
			}
			if cfg.NodePortMin, cfg.NodePortMax, err = parsePortRange(nodePorts); err != nil {
				return fmt.Errorf("parsing --service-node-port-range: %w", err)
			}
			if !disableAgent {
				if err := preflight(cmd); err != nil {
					return err
				}
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
	fl.StringVar(&serviceCIDR, "service-cidr", "10.96.0.0/12", "range of ClusterIPs; two comma-separated ranges of different families make Services dual-stack, the first primary")
	fl.StringVar(&nodePorts, "service-node-port-range", "30000-32767", "range of NodePorts")
	fl.StringVar(&advertise, "advertise-address", "", "address other nodes and the kubernetes Service use to reach the API")
	fl.StringSliceVar(&sans, "tls-san", nil, "extra names or addresses for the serving certificate")
	fl.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fl.BoolVar(&disableAgent, "disable-agent", false, "run the API and controllers only: no node agent, no pods, no kernel changes")
	fl.StringVar(&nodeName, "node-name", "", "name of this node (default: the hostname)")
	fl.StringVar(&nodeIP, "node-ip", "", "InternalIP of this node (default: the first non-loopback IPv4 address; the first global IPv6 one when --cluster-cidr is IPv6 alone); two comma-separated, of different families, on a dual-stack node")
	fl.StringVar(&podCIDR, "cluster-cidr", "10.244.0.0/16", "pod range; each node gets a /24 of it (a /64 of an IPv6 one); two comma-separated ranges of different families give pods both")
	addDNSFlags(fl, &dnsOpts)
	addProxyModeFlag(cmd, &proxyMode)
	addPodNetworkFlag(cmd, &podNetwork)
	fl.StringVar(&lbPool, "lb-pool", "", "addresses for LoadBalancer Services, CIDRs or FIRST-LAST ranges, comma-separated, "+
		"of either family, on the nodes' network (e.g. 192.168.56.240-192.168.56.250,fd00:56::240-fd00:56::250); empty leaves them <pending>")
	fl.BoolVar(&gatewayAPI, "gateway-api", true, "install the Gateway API "+gateway.BundleVersion+" CRDs at start (server-side apply; a restart re-applies them)")
	fl.StringVar(&gatewayAPIChannel, "gateway-api-channel", gateway.ChannelStandard, "the Gateway API bundle's channel: standard or experimental")
	fl.StringVar(&ha.Datastore, "datastore", cluster.DatastoreBolt, "where objects live: bolt (DATA_DIR/minikit.db) or etcd")
	fl.StringSliceVar(&ha.Etcd.Endpoints, "etcd-endpoints", nil, "an external etcd's client URLs, comma-separated (with --datastore etcd)")
	fl.StringVar(&ha.Etcd.CAFile, "etcd-cafile", "", "CA certificate that signed the etcd servers' certificates")
	fl.StringVar(&ha.Etcd.CertFile, "etcd-certfile", "", "client certificate minikit presents to etcd")
	fl.StringVar(&ha.Etcd.KeyFile, "etcd-keyfile", "", "key of --etcd-certfile")
	fl.BoolVar(&ha.ClusterInit, "cluster-init", false, "start an HA control plane: this server runs an embedded etcd member that other servers --join")
	fl.StringVar(&ha.Join, "join", "", "join the HA control plane of the server at this https:// URL (an embedded etcd member here too)")
	fl.StringVar(&ha.JoinToken, "token", "", "the cluster's join token (the first server's DATA_DIR/server-token), with --join")
	fl.StringVar(&joinTokenFile, "token-file", "", "read --token from this file")
	fl.StringVar(&ha.JoinCAFile, "ca-file", "", "the cluster's CA certificate, needed with --join only when --token is a bare token")
	cmd.RegisterFlagCompletionFunc("datastore", cobra.FixedCompletions([]string{cluster.DatastoreBolt, cluster.DatastoreEtcd}, cobra.ShellCompDirectiveNoFileComp))
	cmd.RegisterFlagCompletionFunc("gateway-api-channel", cobra.FixedCompletions([]string{gateway.ChannelStandard, gateway.ChannelExperimental}, cobra.ShellCompDirectiveNoFileComp))
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

// parseDualStackCIDRs parses one CIDR, or two of different IP families
// separated by a comma (the primary first), as kube-apiserver's
// --service-cluster-ip-range and kube-controller-manager's --cluster-cidr do.
func parseDualStackCIDRs(v string) (primary, secondary netip.Prefix, err error) {
	parts := strings.Split(v, ",")
	if len(parts) > 2 {
		return primary, secondary, fmt.Errorf("%q: at most two CIDRs, one of each IP family", v)
	}
	var out [2]netip.Prefix
	for i, p := range parts {
		if out[i], err = netip.ParsePrefix(strings.TrimSpace(p)); err != nil {
			return primary, secondary, err
		}
	}
	if len(parts) == 2 && out[0].Addr().Is4() == out[1].Addr().Is4() {
		return primary, secondary, fmt.Errorf("%q: the two CIDRs must be of different IP families", v)
	}
	return out[0], out[1], nil
}

// parseNodeIPs parses --node-ip: one address, or two of different IP
// families separated by a comma (the primary first), as the kubelet's.
func parseNodeIPs(v string) (primary, secondary netip.Addr, err error) {
	parts := strings.Split(v, ",")
	if len(parts) > 2 {
		return primary, secondary, fmt.Errorf("%q: at most two addresses, one of each IP family", v)
	}
	var out [2]netip.Addr
	for i, p := range parts {
		if out[i], err = netip.ParseAddr(strings.TrimSpace(p)); err != nil {
			return primary, secondary, err
		}
	}
	if len(parts) == 2 && out[0].Is4() == out[1].Is4() {
		return primary, secondary, fmt.Errorf("%q: the two addresses must be of different IP families", v)
	}
	return out[0], out[1], nil
}
