// Package apiserver is minikit's control plane: a Kubernetes-shaped REST API over the
// store. It owns URL routing, encoding, validation and defaulting (through package
// validation), ClusterIP and NodePort allocation, watches, discovery and server-side
// tables, so that the real kubectl and client-go work against it unchanged.
package apiserver

import (
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minikit/minikit/internal/apiserver/validation"
	"github.com/minikit/minikit/internal/store"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// Config is what the API server needs from its wiring.
type Config struct {
	Store      store.Interface
	Validation validation.Config
	Logger     *slog.Logger
	// Token, when set, is required as a bearer token on every request but the
	// probes /healthz, /livez and /readyz (which answer "ok" and nothing else)
	// and /version: what Kubernetes' system:public-info-viewer role lets anyone
	// read, so `curl -k https://NODE:6443/version` works as on a real cluster.
	Token string
	// AdvertiseAddress and Port are written into the default/kubernetes Endpoints.
	AdvertiseAddress string
	Port             int32
	// Identity names this API server among several sharing one store: its
	// identity Lease (kube-system/apiserver-<hash of Identity>, as
	// kube-apiserver names its own) carries AdvertiseAddress, and the
	// default/kubernetes endpoints are the addresses of every server whose
	// lease is fresh (endpoints.go). The wiring passes the node name; empty
	// means the hostname.
	Identity string
	// Version is reported by /version.
	Version string
	// NodeToken authenticates the API server to node agents (pods/log).
	NodeToken string
	// Limits bound slow and hostile clients; zero fields take DefaultLimits.
	Limits Limits
	// ServiceAccountKey signs and verifies service account tokens (token.go);
	// nil means a key generated for this process only.
	ServiceAccountKey *ecdsa.PrivateKey
}

// Server serves the API. Create it with New.
type Server struct {
	cfg   Config
	store store.Interface
	log   *slog.Logger
	now   func() time.Time

	nsFinalizing sync.Map     // namespace name -> struct{}, finalizers running
	watches      atomic.Int64 // watch streams being served
	proxy        proxyTransports
	localAgent   atomic.Pointer[localAgent] // the node agent in this process, if any (stream.go)
	// instance tells this process's identity lease from an earlier one of the
	// same server (endpoints.go).
	instance string
	// crds is the custom resources served, kept by the CRD controller
	// (crdcontroller.go); stop ends that controller.
	crds        crdRegistry
	crdCleanups sync.Map // CRD UID -> true, cleanups running (crdcontroller.go)
	stop        context.CancelFunc
	rbacObjects decodedCache // the authorizer's decoded RBAC objects (rbac.go)
	openapi     openAPIDocs
	discovery   atomic.Pointer[aggregatedDocs] // aggregated discovery, built lazily (discovery.go)
	metrics     *serverMetrics                 // served at /metrics (metrics.go)
}

// New builds a server over cfg.Store and makes sure the built-in objects exist.
func New(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if !cfg.Validation.ServiceCIDR.IsValid() {
		cfg.Validation = validation.DefaultConfig()
	}
	cfg.Limits = cfg.Limits.withDefaults()
	if cfg.ServiceAccountKey == nil {
		key, err := NewServiceAccountKey()
		if err != nil {
			return nil, err
		}
		cfg.ServiceAccountKey = key
	}
	s := &Server{cfg: cfg, store: cfg.Store, log: cfg.Logger.With("component", "apiserver"), now: time.Now,
		instance: string(uuid.NewUUID()), metrics: newServerMetrics()}
	if err := s.bootstrap(); err != nil {
		return nil, fmt.Errorf("creating built-in objects: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	if err := s.startCRDController(ctx); err != nil {
		stop()
		return nil, fmt.Errorf("starting the CRD controller: %w", err)
	}
	return s, nil
}

// Handler returns the HTTP handler of the API.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(s.serveHTTP)
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	start := s.now()
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("panic serving request", "method", r.Method, "path", r.URL.Path, "panic", p)
			writeError(w, r, apierrors.NewInternalError(fmt.Errorf("%v", p)), s.log)
		}
	}()
	authed, err := s.checkAccess(r)
	if err != nil {
		writeError(w, r, err, nil)
		return
	}
	r = authed
	s.metrics.instrument(w, r, func(w http.ResponseWriter, r *http.Request) {
		if err := s.bodyDeadline(w, r); err != nil {
			writeError(w, r, err, s.log)
			return
		}
		if err := s.route(w, r); err != nil {
			writeError(w, r, err, s.log)
		}
	})
	s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "query", r.URL.RawQuery, "duration", time.Since(start))
}

// request is a parsed resource URL.
type request struct {
	res       *resource
	namespace string
	name      string
	sub       string // "", "status", "scale", "finalize"
}

func (s *Server) route(w http.ResponseWriter, r *http.Request) error {
	path := strings.Trim(r.URL.Path, "/")
	switch path {
	case "healthz", "livez", "readyz":
		w.Write([]byte("ok"))
		return nil
	case "version":
		writeValue(w, r, http.StatusOK, s.versionInfo())
		return nil
	case oidcConfigPath, oidcJWKSPath:
		return s.serveOIDC(w, r, path)
	case "metrics":
		if r.Method != http.MethodGet {
			return apierrors.NewMethodNotSupported(schema.GroupResource{}, r.Method)
		}
		s.metrics.handler.ServeHTTP(w, r)
		return nil
	case "api", "apis":
		if wantsAggregated(r) {
			return s.serveAggregated(w, r, path == "api")
		}
		if path == "api" {
			return s.serveAPIVersions(w, r)
		}
		return s.serveAPIGroupList(w, r)
	}
	if strings.HasPrefix(path, "openapi/") {
		return s.serveOpenAPI(w, r, path)
	}
	parts := strings.Split(path, "/")
	var gv schema.GroupVersion
	var rest []string
	switch {
	case parts[0] == "api" && len(parts) >= 2:
		gv, rest = schema.GroupVersion{Version: parts[1]}, parts[2:]
	case parts[0] == "apis" && len(parts) == 2:
		return s.serveAPIGroup(w, r, parts[1])
	case parts[0] == "apis" && len(parts) >= 3:
		gv, rest = schema.GroupVersion{Group: parts[1], Version: parts[2]}, parts[3:]
	default:
		return apierrors.NewNotFound(schema.GroupResource{}, "")
	}
	if ns, res, ok := isReview(gv, rest); ok {
		return s.serveReview(w, r, gv, ns, res)
	}
	if isIngressV1beta1(gv, rest) {
		return s.serveIngressV1beta1(w, r, gv, rest)
	}
	if len(rest) == 0 {
		return s.serveResourceList(w, r, gv)
	}
	rq, err := s.parseResourcePath(gv, rest)
	if err != nil {
		return err
	}
	if rq.res.cr != nil {
		return s.serveCustom(w, r, rq)
	}
	if isStreamSub(rq) {
		return s.serveStream(w, r, rq)
	}
	if rq.sub == "proxy" {
		return s.serveProxy(w, r, rq)
	}
	return s.serveResource(w, r, rq)
}

func notFoundPath() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
		Message: "the server could not find the requested resource",
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseTypeUnexpectedServerResponse, Message: "404 page not found"}}},
	}}
}

func (s *Server) parseResourcePath(gv schema.GroupVersion, rest []string) (request, error) {
	var rq request
	var resName string
	switch {
	case rest[0] == "namespaces" && len(rest) >= 3 && !(len(rest) == 3 && (rest[2] == "status" || rest[2] == "finalize")):
		rq.namespace, resName = rest[1], rest[2]
		rest = rest[3:]
	default:
		resName = rest[0]
		rest = rest[1:]
	}
	rq.res = s.lookup(gv.Group, gv.Version, resName)
	if rq.res == nil {
		return rq, notFoundPath()
	}
	if rq.namespace != "" && !rq.res.namespaced {
		return rq, notFoundPath()
	}
	if len(rest) > 0 {
		rq.name = rest[0]
	}
	if len(rest) > 1 {
		rq.sub = rest[1]
	}
	if len(rest) > 2 && rq.sub != "proxy" { // proxy: the rest is the target's path
		return rq, notFoundPath()
	}
	switch rq.sub {
	case "":
	case "status":
		if !rq.res.status {
			return rq, notFoundPath()
		}
	case "scale":
		if !rq.res.scale {
			return rq, notFoundPath()
		}
	case "finalize":
		if rq.res.name != "namespaces" {
			return rq, notFoundPath()
		}
	case "log", "exec", "attach", "portforward":
		if rq.res.name != "pods" {
			return rq, notFoundPath()
		}
	case "proxy":
		if !proxyable(rq.res) {
			return rq, notFoundPath()
		}
	case "token":
		if rq.res.name != "serviceaccounts" {
			return rq, notFoundPath()
		}
	default:
		return rq, notFoundPath()
	}
	return rq, nil
}

// writeError renders any error as a metav1.Status body, the one place errors become
// responses. Unexpected errors are logged and reported as 500s.
func writeError(w http.ResponseWriter, r *http.Request, err error, log *slog.Logger) {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		if log != nil {
			log.Error("internal error", "method", r.Method, "path", r.URL.Path, "err", err)
		}
		se = apierrors.NewInternalError(err)
	}
	st := se.Status()
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	if st.Status == "" {
		st.Status = metav1.StatusFailure
	}
	b, _ := json.Marshal(st)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(int(st.Code))
	w.Write(b)
	w.Write([]byte("\n"))
}

// Shutdown stops the CRD controller; the server holds no other goroutines
// beyond those tied to requests and namespace finalization. The controller
// also ends when the store closes.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stop()
	return nil
}
