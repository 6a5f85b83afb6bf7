package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/minikit/minikit/internal/lab"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Shell completion. cobra's own `minikit completion bash|zsh|fish` writes the
// scripts; the functions here give them names: labs from the lab registry,
// a lab's hosts from its state, and pods, nodes and Services from the API when
// one answers. Completion must never hang or print errors into the user's
// prompt, so every lookup that fails, or takes longer than
// completionTimeout, completes nothing.

const completionTimeout = 2 * time.Second

const noFiles = cobra.ShellCompDirectiveNoFileComp

// completionExamples are the Examples of cobra's completion command and its
// subcommands (cobra gives them a Long text only).
var completionExamples = map[string]string{
	"completion": `  source <(minikit completion bash)
  minikit completion zsh > "${fpath[1]}/_minikit"
  minikit completion fish > ~/.config/fish/completions/minikit.fish`,
	"bash": `  source <(minikit completion bash)
  minikit completion bash | sudo tee /etc/bash_completion.d/minikit > /dev/null`,
	"zsh": `  source <(minikit completion zsh)
  minikit completion zsh > "${fpath[1]}/_minikit"`,
	"fish": `  minikit completion fish | source
  minikit completion fish > ~/.config/fish/completions/minikit.fish`,
	"powershell": `  minikit completion powershell | Out-String | Invoke-Expression`,
}

// addCompletionExamples adds cobra's completion command now, rather than
// when the root command runs, to give it Examples. The scripts go to the
// root's output as it is when this is called (cobra takes it then).
func addCompletionExamples(root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		c.Example = completionExamples[c.Name()]
		for _, sub := range c.Commands() {
			sub.Example = completionExamples[sub.Name()]
		}
	}
}

// completeLabNames completes the names of the labs on this machine.
func completeLabNames(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	var out []string
	for _, e := range lab.Registered() {
		if strings.HasPrefix(e.Name, toComplete) {
			out = append(out, e.Name)
		}
	}
	return out, noFiles
}

// labHosts are the hosts of lab name (node1..., client, external), in the
// order `lab status` shows them; nil when the lab is unknown.
func labHosts(name, dir string) []string {
	name, err := pickLab(name, dir)
	if err != nil {
		return nil
	}
	st, err := lab.Load(name, dir)
	if err != nil {
		return nil
	}
	var hosts []string
	for _, h := range st.Info(context.Background(), false).Hosts {
		if h.Role != "forwarder" {
			hosts = append(hosts, h.Name)
		}
	}
	return hosts
}

// completeLabHost completes the first argument of `lab exec|stop|start` with
// the hosts of the lab that --name/--dir (or the only lab) names; nodesOnly
// leaves out the client and the external host, which run no minikit.
func completeLabHost(name, dir *string, nodesOnly bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			if cmd.ArgsLenAtDash() >= 0 {
				return nil, cobra.ShellCompDirectiveDefault // the command run on the host
			}
			return nil, noFiles
		}
		var out []string
		for _, h := range labHosts(*name, *dir) {
			if nodesOnly && (h == lab.Client || h == lab.External) {
				continue
			}
			if strings.HasPrefix(h, toComplete) {
				out = append(out, h)
			}
		}
		return out, noFiles
	}
}

// apiNames lists pods, nodes or services ("" namespace: the kubeconfig's)
// from the API that kubeconfig/labName find, or nothing.
func apiNames(kubeconfig, labName, namespace, kind string) []string {
	client, ns, _, err := kubeClientFor(kubeconfig, labName, namespace)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	var names []string
	switch kind {
	case "pods":
		l, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil
		}
		for _, p := range l.Items {
			names = append(names, p.Name)
		}
	case "services":
		l, err := client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil
		}
		for _, s := range l.Items {
			names = append(names, s.Name)
		}
	case "nodes":
		l, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil
		}
		for _, n := range l.Items {
			names = append(names, n.Name)
		}
	}
	sort.Strings(names)
	return names
}

func withPrefix(names []string, prefix, toComplete string) []string {
	var out []string
	for _, n := range names {
		if s := prefix + n; strings.HasPrefix(s, toComplete) {
			out = append(out, s)
		}
	}
	return out
}

// completeExecPod completes `minikit exec POD` with the pods of the namespace.
func completeExecPod(kubeconfig, namespace *string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveDefault
		}
		return withPrefix(apiNames(*kubeconfig, execLab, *namespace, "pods"), "", toComplete), noFiles
	}
}

// completeTrace completes FROM with pods, nodes and the lab's client and
// external hosts, and TO with Services and nodes (for NODE:NODEPORT).
func completeTrace(kubeconfig, labName, namespace *string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		var out []string
		switch len(args) {
		case 0:
			out = append(out, withPrefix(apiNames(*kubeconfig, *labName, *namespace, "pods"), "pod/", toComplete)...)
			out = append(out, withPrefix(apiNames(*kubeconfig, *labName, *namespace, "nodes"), "node/", toComplete)...)
			out = append(out, withPrefix([]string{lab.Client, lab.External}, "", toComplete)...)
		case 1:
			out = append(out, withPrefix(apiNames(*kubeconfig, *labName, *namespace, "services"), "svc/", toComplete)...)
			nodes := withPrefix(apiNames(*kubeconfig, *labName, *namespace, "nodes"), "", toComplete)
			for _, n := range nodes {
				out = append(out, n+":")
			}
			if len(nodes) > 0 {
				return out, noFiles | cobra.ShellCompDirectiveNoSpace
			}
		}
		return out, noFiles
	}
}

// completeKubectl completes the kubectl pass-through commands by asking
// kubectl's own completion (`kubectl __complete VERB ARGS...`) with the
// kubeconfig minikit would give it, so that `minikit get po<TAB>` completes
// exactly as `kubectl get po<TAB>` does against this cluster.
func completeKubectl(verb string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		path, err := exec.LookPath("kubectl")
		if err != nil {
			return nil, cobra.ShellCompDirectiveDefault
		}
		args, labName := cutLabFlag(args)
		env := os.Environ()
		if !hasKubeconfigFlag(args) {
			t, err := defaultFinder().find("", labName)
			if err == nil && t.kubeconfig != "" {
				env = append(env, "KUBECONFIG="+t.kubeconfig)
			}
		}
		argv := []string{"__complete"}
		if verb != "kubectl" {
			argv = append(argv, verb)
		}
		argv = append(append(argv, args...), toComplete)
		ctx, cancel := context.WithTimeout(context.Background(), 2*completionTimeout)
		defer cancel()
		c := exec.CommandContext(ctx, path, argv...)
		c.Env = env
		out, err := c.Output()
		if err != nil {
			return nil, cobra.ShellCompDirectiveDefault
		}
		return parseCobraCompletion(out)
	}
}

// parseCobraCompletion reads the output of a cobra program's __complete:
// one completion per line, then ":DIRECTIVE".
func parseCobraCompletion(out []byte) ([]string, cobra.ShellCompDirective) {
	var comps []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if d, ok := strings.CutPrefix(line, ":"); ok {
			n, err := strconv.Atoi(d)
			if err != nil {
				return nil, cobra.ShellCompDirectiveDefault
			}
			return comps, cobra.ShellCompDirective(n)
		}
		if line != "" {
			comps = append(comps, line)
		}
	}
	return nil, cobra.ShellCompDirectiveDefault
}
