// Package apiservertest starts minikit's real API server in the test's own
// process, over loopback HTTP on port 0, with a client-go clientset for it.
// Tests of components that meet the rest of minikit through the API
// (controllers, the load balancer, leader election) need the real thing —
// validation, defaulting, allocation, watches, the status subresource —
// rather than client-go's fake clientset, and starting it was written once
// per package before. Everything it starts is stopped with t.Cleanup.
//
// Only tests import it; production code must not (test/layout checks).
// The API server's own in-package tests cannot import it either (the import
// would be a cycle), so internal/apiserver keeps its raw-HTTP harness.
package apiservertest

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"

	"github.com/minikit/minikit/internal/apiserver"
	"github.com/minikit/minikit/internal/store"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Server is a started API server.
type Server struct {
	*apiserver.Server
	// Store is the store the server writes to.
	Store store.Interface
	// URL is the server's base URL, http://127.0.0.1:PORT.
	URL string
	// Config reaches the server without client-side rate limiting; copy it
	// (rest.CopyConfig) to adjust it for another client.
	Config *rest.Config
	// Client is a clientset built from Config.
	Client kubernetes.Interface

	http      *httptest.Server
	ownsStore bool
	closeOnce sync.Once
}

// Start starts an API server over a fresh bbolt store in t.TempDir() with
// the default configuration.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartConfig(t, apiserver.Config{})
}

// StartConfig is Start with cfg, where zero fields take a test's defaults: a
// fresh bbolt store (which the Server then owns and closes), a logger that
// discards, and version "test". A store given in cfg is the caller's to
// close, so that several servers may share it as several minikit servers
// share one etcd.
func StartConfig(t testing.TB, cfg apiserver.Config) *Server {
	t.Helper()
	s := &Server{}
	if cfg.Store == nil {
		st, err := store.OpenBolt(filepath.Join(t.TempDir(), "db"), 0)
		if err != nil {
			t.Fatalf("opening the API server's store: %v", err)
		}
		cfg.Store, s.ownsStore = st, true
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Version == "" {
		cfg.Version = "test"
	}
	srv, err := apiserver.New(cfg)
	if err != nil {
		if s.ownsStore {
			cfg.Store.Close()
		}
		t.Fatalf("creating the API server: %v", err)
	}
	s.Server, s.Store = srv, cfg.Store
	s.http = httptest.NewServer(srv.Handler())
	s.URL = s.http.URL
	t.Cleanup(s.Close)
	s.Config = &rest.Config{Host: s.URL, QPS: -1}
	if s.Client, err = kubernetes.NewForConfig(s.Config); err != nil {
		t.Fatalf("building a client of the API server: %v", err)
	}
	return s
}

// Close stops the server, as a dead control plane, and closes the store if
// the Server opened it; later calls do nothing. Closing the store first ends
// open watches, and closing the client connections ends the requests still
// running, so the HTTP server has none to wait for.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		if s.ownsStore {
			s.Store.Close()
		}
		s.http.CloseClientConnections()
		s.http.Close()
	})
}
