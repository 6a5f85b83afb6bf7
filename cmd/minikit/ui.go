package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/topology"
	"github.com/minikit/minikit/internal/ui"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
)

// newUICommand is `minikit ui`.
func newUICommand() *cobra.Command {
	var labName, listen, tokenFile, logLevel string
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve a live web page of a lab: its topology, Services' chains, traces and DNS",
		Long: `Serve a web page that draws a lab as the kernel and the API have it (the
underlay bridge, the nodes, client and external hosts, every pod with its IP),
kept live over a watch: pods appear and disappear as Deployments scale.
Beside the picture: the Services and Ingresses, each with its chain tree in a
node's rules and their counters (KUBE-SERVICES -> KUBE-SVC -> KUBE-SEP, or
the nftables maps and chains); a trace panel that runs minikit trace and draws
its path hop by hop over the topology; a DNS panel that asks the cluster DNS
from a pod's network namespace with the pod's search path.

The page is read-only (GET only; it reads no Secret) and embedded in the
binary: nothing is fetched from a network. It listens on loopback by default.
A --listen address off loopback makes every request carry the lab's API
token (the one in the lab's kubeconfig, or --token-file): the header
"Authorization: Bearer TOKEN", or ?token=TOKEN once in the browser, which
sets a cookie. Without it the answer is 401.`,
		Example: `  sudo minikit ui                                   # the only lab, on http://127.0.0.1:7080/
  sudo minikit ui --lab np --listen 127.0.0.1:0     # any free port: the address is printed
  sudo minikit ui --listen 192.168.56.1:7080        # off loopback: open http://192.168.56.1:7080/?token=TOKEN
  sudo minikit ui --listen 0.0.0.0:7080 --token-file /root/ui-token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			log := newLogger(logLevel)
			f := defaultFinder()
			var t target
			if labName != "" {
				// --lab names the lab to draw, whatever KUBECONFIG says.
				e, ok := f.lookup(labName)
				if !ok {
					return fmt.Errorf("no lab %q on this machine%s", labName, f.labList())
				}
				t = target{kubeconfig: e.Kubeconfig, lab: e.Name, how: "--lab"}
			} else {
				var err error
				if t, err = f.find("", ""); err != nil {
					return err
				}
			}
			if t.lab == "" {
				return fmt.Errorf("minikit ui draws a lab, and %s is no lab's (labs: sudo minikit lab list)", t.how)
			}
			st, err := lab.Load(t.lab, "")
			if err != nil {
				return err
			}
			// As kubectl reads it: t.kubeconfig, or (empty) KUBECONFIG's files.
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			rules.ExplicitPath = t.kubeconfig
			rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
			if err != nil {
				return fmt.Errorf("reading the lab's kubeconfig (%s): %w", t.how, err)
			}
			token, err := uiToken(rc, tokenFile)
			if err != nil {
				return err
			}
			// Every pod change reads the API again (Collector.ReadHost
			// lists the lab's objects): client-go's default 5 requests a
			// second would make a scale-up wait on the rate limiter.
			rc.QPS, rc.Burst = 200, 400
			client, err := kubernetes.NewForConfig(rc)
			if err != nil {
				return err
			}
			gw, err := gwclient.NewForConfig(rc)
			if err != nil {
				return err
			}
			srv, err := ui.New(ui.Config{Lab: st, Client: client, Gateway: gw, Source: topology.NewCollector(st, client, gw),
				PathOf: topology.PathOf, Listen: listen, Token: token, Log: log})
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := srv.Start(ctx); err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("minikit ui: listening on %s: %w", listen, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "minikit ui: lab %s on http://%s/\n", st.Name, ln.Addr())
			return srv.Serve(ctx, ln)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&labName, "lab", "", "the lab to draw (default: the lab the kubeconfig's current context minikit-NAME names, else the only lab)")
	fl.StringVar(&listen, "listen", "127.0.0.1:7080", "address to serve the page on; off loopback every request needs the lab's API token")
	fl.StringVar(&tokenFile, "token-file", "", "file holding the token that requests off loopback must carry (default: the lab's API token, from its kubeconfig)")
	fl.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.RegisterFlagCompletionFunc("lab", completeLabNames)
	return cmd
}

// uiToken is the token requests off loopback must carry: the one in
// tokenFile, else the lab's kubeconfig's bearer token.
func uiToken(rc *rest.Config, tokenFile string) (string, error) {
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return "", fmt.Errorf("reading --token-file: %w", err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return "", errors.New("--token-file " + tokenFile + " is empty")
		}
		return tok, nil
	}
	if rc.BearerToken == "" && rc.BearerTokenFile != "" {
		b, err := os.ReadFile(rc.BearerTokenFile)
		if err != nil {
			return "", fmt.Errorf("reading the kubeconfig's token file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return rc.BearerToken, nil
}
