package minikittest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/apiserver"
	"github.com/minikit/minikit/internal/controllers"
	"github.com/minikit/minikit/internal/store"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Option configures StartAPI.
type Option func(*apiOptions)

type apiOptions struct {
	crdPaths       []string
	logger         *slog.Logger
	noControllers  bool
	establishAfter time.Duration
}

// WithCRDs installs the CustomResourceDefinitions found in paths before
// StartAPI returns, and waits until each is Established (served), as
// envtest's CRDDirectoryPaths does. A path is a file or a directory, whose
// .yaml, .yml and .json files (not its subdirectories) are read; a file may
// hold several YAML documents, and documents of other kinds are ignored, so
// a whole install manifest may be given. A missing path fails the test.
func WithCRDs(paths ...string) Option {
	return func(o *apiOptions) { o.crdPaths = append(o.crdPaths, paths...) }
}

// WithLogger sends the API server's and the controllers' logs to l; by
// default they are discarded.
func WithLogger(l *slog.Logger) Option {
	return func(o *apiOptions) { o.logger = l }
}

// WithoutControllers starts the API server alone: nothing makes
// ReplicaSets, Pods or EndpointSlices, and nothing collects garbage, as
// envtest's kube-apiserver without a kube-controller-manager. Useful to
// check exactly what a controller writes.
func WithoutControllers() Option {
	return func(o *apiOptions) { o.noControllers = true }
}

// StartAPI starts an API server with minikit's controllers in this process
// (see the package doc for what runs and what does not) and returns an admin
// config for it, without client-side rate limiting. It returns once the API
// serves, the controllers' caches have synced and WithCRDs' definitions are
// Established; any failure fails the test. Everything is stopped and the
// store removed in t.Cleanup.
func StartAPI(t testing.TB, opts ...Option) *rest.Config {
	t.Helper()
	o := apiOptions{establishAfter: time.Minute}
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger == nil {
		o.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	a, err := startAPI(filepath.Join(t.TempDir(), "minikit.db"), o)
	if err != nil {
		t.Fatalf("minikittest: starting the API server: %v", err)
	}
	t.Cleanup(a.stop)
	return rest.CopyConfig(a.config)
}

// api is one started API server and what runs next to it.
type api struct {
	config   *rest.Config
	store    store.Interface
	server   *apiserver.Server
	http     *http.Server
	cancel   context.CancelFunc // the controllers and the endpoint reconciler
	requests context.CancelFunc // long-running requests (watches)
	wg       sync.WaitGroup
	once     sync.Once
}

func startAPI(dbPath string, o apiOptions) (*api, error) {
	a := &api{}
	if err := a.start(dbPath, o); err != nil {
		return nil, err
	}
	return a, nil
}

// start starts a; on failure, it stops what it started.
func (a *api) start(dbPath string, o apiOptions) (err error) {
	st, err := store.OpenBolt(dbPath, 0)
	if err != nil {
		return err
	}
	// Loopback only, whatever the machine's addresses: the API has no token.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		st.Close()
		return err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	srv, err := apiserver.New(apiserver.Config{Store: st, Logger: o.logger, Version: "minikittest",
		AdvertiseAddress: "127.0.0.1", Port: int32(port), Identity: "minikittest-" + strconv.Itoa(port)})
	if err != nil {
		ln.Close()
		st.Close()
		return err
	}
	a.store, a.server = st, srv
	baseCtx, cancelRequests := context.WithCancel(context.Background())
	a.requests = cancelRequests
	a.http = srv.HTTPServer()
	a.http.BaseContext = func(net.Listener) context.Context { return baseCtx }
	a.http.ErrorLog = slog.NewLogLogger(o.logger.Handler(), slog.LevelDebug)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if err := a.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.logger.Error("API server stopped", "component", "minikittest", "err", err)
		}
	}()
	a.config = &rest.Config{Host: "http://" + ln.Addr().String(), QPS: -1}
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	defer func() {
		if err != nil {
			a.stop()
		}
	}()
	// The controllers' own clients keep the API's deprecation warnings (the
	// garbage collector lists every resource, extensions/v1beta1 Ingresses
	// too) out of the test's output.
	own := rest.CopyConfig(a.config)
	own.WarningHandler = rest.NoWarnings{}
	client, err := kubernetes.NewForConfig(own)
	if err != nil {
		return err
	}
	// The default/kubernetes Service's endpoints, as every minikit server keeps them.
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		if err := srv.RunEndpointReconciler(ctx); err != nil && ctx.Err() == nil {
			o.logger.Error("endpoint reconciler stopped", "component", "minikittest", "err", err)
		}
	}()
	// The CRDs before the controllers: the garbage collector then finds
	// their resources in its first look at discovery.
	if len(o.crdPaths) > 0 {
		cctx, cancel := context.WithTimeout(ctx, o.establishAfter)
		defer cancel()
		if err := installCRDs(cctx, a.config, o.crdPaths); err != nil {
			return err
		}
	}
	if o.noControllers {
		return nil
	}
	md, err := controllers.NewMetadataClient(own)
	if err != nil {
		return err
	}
	ctrl := controllers.New(client, o.logger, controllers.Config{Metadata: md})
	ran := make(chan error, 1)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		ran <- ctrl.Run(ctx)
	}()
	select {
	case <-ctrl.Ready():
	case err := <-ran:
		return errors.Join(errors.New("the controllers stopped before they were ready"), err)
	case <-time.After(time.Minute):
		return errors.New("the controllers' caches did not sync within a minute")
	}
	return nil
}

// stop ends the controllers first (clients of the API), then the API:
// closing the store ends open watches, the requests' context and closing the
// connections end the rest, so nothing is left to wait for.
func (a *api) stop() {
	a.once.Do(func() {
		a.cancel()
		a.server.Shutdown(context.Background())
		a.requests()
		a.store.Close()
		a.http.Close()
		a.wg.Wait()
	})
}
