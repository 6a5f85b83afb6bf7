package ui

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/topology"
	"github.com/minikit/minikit/internal/trace"

	"k8s.io/client-go/kubernetes"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
)

//go:embed assets
var assets embed.FS

// Source reads the lab's topology: *topology.Collector.
type Source interface {
	// Collect reads the whole lab.
	Collect(ctx context.Context) (*topology.Graph, error)
	// ReadHost reads one namespace again: the host and the links with an
	// end in it.
	ReadHost(ctx context.Context, id string) (topology.Host, []topology.Link, error)
}

// Config is what a Server needs. Lab, Client and Source are required; the
// functions default to the real ones (trace.Run, the kernel's rules, DNS
// from inside a namespace) and are replaced by fakes in tests.
type Config struct {
	Lab    lab.State
	Client kubernetes.Interface
	// Gateway, when set, watches the Gateway API's Gateways and routes
	// (a cluster without their CRDs has none to watch) and lets a trace
	// to a Gateway's address say which routes take it.
	Gateway gwclient.Interface
	Source  Source
	// Listen is the address the server listens on; off loopback, Token is
	// required.
	Listen string
	// Token is the lab's API token: every request off loopback must carry it.
	Token string
	Log   *slog.Logger

	// Trace runs a trace (default trace.Run with Client).
	Trace func(ctx context.Context, o trace.Config) (*trace.Result, error)
	// PathOf draws a trace's path over a graph (topology.PathOf).
	PathOf func(g *topology.Graph, r *trace.Result, path int) []topology.Hop
	// Rules reads a node namespace's proxy rules (default: the kernel's).
	Rules RulesReader
	// Exchange sends one DNS query from inside netns (default: a UDP
	// exchange from a socket made in that namespace).
	Exchange Exchanger
	// Debounce is how long live updates gather events before a refresh
	// (default 100ms).
	Debounce time.Duration
}

// Server is one lab's page.
type Server struct {
	cfg  Config
	log  *slog.Logger
	live *live
	// traces bounds the traces running at once: each reads a node's rules
	// and routes, and a live one sends a probe.
	traces chan struct{}
}

// New checks the configuration: off loopback it needs a token.
func New(cfg Config) (*Server, error) {
	if cfg.Client == nil || cfg.Source == nil || cfg.Lab.Name == "" {
		return nil, errors.New("ui: a lab, its API client and a topology source are required")
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	loop, err := loopbackListen(cfg.Listen)
	if err != nil {
		return nil, err
	}
	if !loop && cfg.Token == "" {
		return nil, fmt.Errorf("ui: listening on %s, off loopback, needs the lab's API token (none in the lab's kubeconfig, and no --token-file): refusing to serve the lab to the network without one", cfg.Listen)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Trace == nil {
		c, gw := cfg.Client, cfg.Gateway
		cfg.Trace = func(ctx context.Context, o trace.Config) (*trace.Result, error) {
			if o.Gateway == nil {
				o.Gateway = gw
			}
			return trace.Run(ctx, c, o)
		}
	}
	if cfg.PathOf == nil {
		return nil, errors.New("ui: PathOf (topology.PathOf) is required")
	}
	if cfg.Rules == nil {
		cfg.Rules = kernelRules{}
	}
	if cfg.Exchange == nil {
		cfg.Exchange = netnsExchange
	}
	if cfg.Debounce == 0 {
		cfg.Debounce = 100 * time.Millisecond
	}
	log := cfg.Log.With("component", "ui", "lab", cfg.Lab.Name)
	s := &Server{cfg: cfg, log: log, traces: make(chan struct{}, 2)}
	s.live = newLive(cfg.Source, cfg.Client, cfg.Debounce, log)
	s.live.gw = cfg.Gateway
	return s, nil
}

// Start reads the whole lab once and starts watching it; the page is
// served once Start has returned. It stops when ctx ends.
func (s *Server) Start(ctx context.Context) error {
	return s.live.start(ctx)
}

// Serve serves the page on ln until ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Handler is the page and its API, behind the read-only and token checks.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /", http.FileServerFS(static))
	mux.Handle("GET /api/graph", s.handle(s.serveGraph))
	mux.HandleFunc("GET /api/events", s.serveEvents)
	mux.Handle("GET /api/trace", s.handle(s.serveTrace))
	mux.Handle("GET /api/chains", s.handle(s.serveChains))
	mux.Handle("GET /api/dns", s.handle(s.serveDNS))
	loop, _ := loopbackListen(s.cfg.Listen)
	return guard(mux, guardConfig{token: s.cfg.Token, loopbackListen: loop, listen: s.cfg.Listen, log: s.log})
}

// apiError is an error with the status it answers with.
type apiError struct {
	code int
	err  error
}

func (e *apiError) Error() string { return e.err.Error() }
func (e *apiError) Unwrap() error { return e.err }

func badRequest(format string, args ...any) error {
	return &apiError{code: http.StatusBadRequest, err: fmt.Errorf(format, args...)}
}

// handle turns a handler's value or error into the response: JSON, or
// {"error": "..."} with the error's status (500 unless it says otherwise).
// It is the one place errors become responses and are logged.
func (s *Server) handle(fn func(r *http.Request) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		v, err := fn(r)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if err != nil {
			code := http.StatusInternalServerError
			var ae *apiError
			if errors.As(err, &ae) {
				code = ae.code
			}
			s.log.Info("request failed", "path", r.URL.Path, "query", r.URL.RawQuery, "status", code, "err", err)
			w.WriteHeader(code)
			json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
			return
		}
		s.log.Debug("request", "path", r.URL.Path, "duration", time.Since(start))
		if err := json.NewEncoder(w).Encode(v); err != nil {
			s.log.Info("writing response", "path", r.URL.Path, "err", err)
		}
	})
}

func (s *Server) serveGraph(r *http.Request) (any, error) {
	g, _ := s.live.snapshot()
	if g == nil {
		return nil, &apiError{code: http.StatusServiceUnavailable, err: errors.New("the lab has not been read yet")}
	}
	return g, nil
}
