package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"

	"github.com/minikit/minikit/node"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// AgentConfig is the configuration of `minikit agent`, which joins a node to a server.
type AgentConfig struct {
	ServerURL string
	Token     string
	CAFile    string
	DataDir   string
	NodeName  string
	NodeIP    netip.Addr
	Version   string
	Logger    *slog.Logger
}

// Agent is a running `minikit agent`.
type Agent struct {
	cancel context.CancelFunc
	done   chan struct{}
	Node   *node.Agent
}

// StartAgent joins this machine to the cluster at cfg.ServerURL and runs its node agent.
func StartAgent(cfg AgentConfig) (*Agent, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DataDir == "" {
		cfg.DataDir = DefaultDataDir
	}
	if !strings.HasPrefix(cfg.ServerURL, "https://") {
		return nil, fmt.Errorf("--server must be an https:// URL: agents join over TLS with a token, got %q", cfg.ServerURL)
	}
	if cfg.Token == "" {
		return nil, fmt.Errorf("a token is required to join (the server's DATA_DIR/token)")
	}
	rc := &rest.Config{Host: cfg.ServerURL, BearerToken: cfg.Token, QPS: 100, Burst: 200}
	if cfg.CAFile != "" {
		rc.TLSClientConfig.CAFile = cfg.CAFile
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, err
	}
	name := cfg.NodeName
	if name == "" {
		name, _ = os.Hostname()
	}
	ip := cfg.NodeIP
	if !ip.IsValid() {
		ip, _ = netip.ParseAddr(firstAddress())
	}
	na, err := node.New(node.Config{NodeName: strings.ToLower(name), NodeIP: ip, DataDir: agentDir(cfg.DataDir),
		Version: cfg.Version, Client: client, Logger: cfg.Logger, Token: cfg.Token})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Agent{cancel: cancel, done: make(chan struct{}), Node: na}
	go func() {
		defer close(a.done)
		if err := na.Run(ctx); err != nil && ctx.Err() == nil {
			cfg.Logger.Error("node agent stopped", "err", err)
		}
	}()
	return a, nil
}

// Stop stops the agent; pods keep running and are adopted by the next start.
func (a *Agent) Stop() {
	a.cancel()
	<-a.done
}

// agentDir is where a node agent keeps its state inside a data dir.
func agentDir(dataDir string) string { return dataDir + "/agent" }
