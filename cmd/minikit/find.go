package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/minikit/minikit/internal/cluster"
	"github.com/minikit/minikit/internal/lab"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// target is the API a command talks to: a kubeconfig path ("" means
// kubectl's own loading rules, i.e. KUBECONFIG) and, when it is a lab's, the
// lab's name.
type target struct {
	kubeconfig string
	lab        string
	how        string // why this one, for error messages
}

// finder holds what findCluster looks at, so that tests can set it up.
type finder struct {
	getenv     func(string) string
	user       func() (*lab.User, error)
	lookup     func(name string) (lab.Entry, bool)
	registered func() []lab.Entry
	exists     func(path string) bool
	localKC    string
}

func defaultFinder() finder {
	return finder{
		getenv:     os.Getenv,
		user:       lab.InvokingUser,
		lookup:     lab.Lookup,
		registered: lab.Registered,
		exists:     func(p string) bool { _, err := os.Stat(p); return err == nil },
		localKC:    cluster.KubeconfigPath(cluster.DefaultDataDir),
	}
}

// find locates the API as kubectl does (--kubeconfig, then KUBECONFIG), then:
// the lab named by --lab; the lab the invoking user's ~/.kube/config has as
// its current context (minikit-NAME; under sudo, SUDO_USER's file, since
// sudo drops KUBECONFIG); the only lab in the registry (several: an error
// listing them); the kubeconfig a local `minikit server` wrote.
func (f finder) find(kubeconfig, labName string) (target, error) {
	if kubeconfig != "" {
		return target{kubeconfig: kubeconfig, lab: f.labOf(kubeconfig), how: "--kubeconfig"}, nil
	}
	if env := f.getenv(clientcmd.RecommendedConfigPathEnvVar); env != "" {
		return target{lab: f.labOf(""), how: "KUBECONFIG"}, nil
	}
	if labName != "" {
		e, ok := f.lookup(labName)
		if !ok {
			return target{}, fmt.Errorf("no lab %q on this machine%s", labName, f.labList())
		}
		return target{kubeconfig: e.Kubeconfig, lab: e.Name, how: "--lab"}, nil
	}
	if u, err := f.user(); err == nil && u.KubeconfigPath() != "" && f.exists(u.KubeconfigPath()) {
		if cfg, err := clientcmd.LoadFromFile(u.KubeconfigPath()); err == nil {
			if name, ok := lab.LabFromContext(cfg.CurrentContext); ok {
				if _, ok := f.lookup(name); ok {
					return target{kubeconfig: u.KubeconfigPath(), lab: name, how: u.KubeconfigPath() + " (current context " + cfg.CurrentContext + ")"}, nil
				}
			}
		}
	}
	var labs []lab.Entry
	for _, e := range f.registered() {
		if f.exists(e.Kubeconfig) {
			labs = append(labs, e)
		}
	}
	switch {
	case len(labs) == 1:
		return target{kubeconfig: labs[0].Kubeconfig, lab: labs[0].Name, how: "the only lab, " + labs[0].Name}, nil
	case len(labs) > 1:
		return target{}, fmt.Errorf("%d labs run on this machine; choose one with --lab NAME (or --kubeconfig, or KUBECONFIG, or `kubectl config use-context minikit-NAME`)%s", len(labs), f.labList())
	}
	if f.exists(f.localKC) {
		return target{kubeconfig: f.localKC, how: "the local server's kubeconfig"}, nil
	}
	return target{}, errNoCluster
}

var errNoCluster = errors.New("no cluster found: no --kubeconfig, no KUBECONFIG, no lab on this machine (sudo minikit lab up), no local server (sudo minikit server)")

func (f finder) labList() string {
	var names []string
	for _, e := range f.registered() {
		names = append(names, fmt.Sprintf("%s (%s)", e.Name, e.Dir))
	}
	if len(names) == 0 {
		return "; there is no lab (sudo minikit lab up)"
	}
	return "; labs: " + strings.Join(names, ", ")
}

// labOf is the lab a kubeconfig ("": KUBECONFIG's) points at: its current
// context's minikit-NAME, or a registered lab whose forwarder its server
// URL is. "" when it is no lab's.
func (f finder) labOf(kubeconfig string) string {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := rules.Load()
	if err != nil {
		return ""
	}
	return f.labOfConfig(cfg)
}

func (f finder) labOfConfig(cfg *clientcmdapi.Config) string {
	if name, ok := lab.LabFromContext(cfg.CurrentContext); ok {
		if _, ok := f.lookup(name); ok {
			return name
		}
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil || cfg.Clusters[ctx.Cluster] == nil {
		return ""
	}
	server := strings.TrimSuffix(cfg.Clusters[ctx.Cluster].Server, "/")
	for _, e := range f.registered() {
		for _, host := range []string{"127.0.0.1", "localhost"} {
			if e.APIPort != 0 && server == fmt.Sprintf("https://%s:%d", host, e.APIPort) {
				return e.Name
			}
		}
	}
	return ""
}
