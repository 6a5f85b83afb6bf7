package apiserver

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Authentication and authorization. Two kinds of bearer token exist:
//
//   - the cluster token (Config.Token, DATA_DIR/token), which is the admin and
//     the node agents; on a loopback server that serves plain HTTP no token is
//     required and a request without one is the admin too;
//   - service account tokens (token.go), which pods mount. They are
//     authorized for reads only — get, list and watch of resources, logs, and
//     discovery — whatever the listen address: a pod runs as root on its node,
//     so nothing it holds may write to the cluster or open exec, attach,
//     port-forward or proxy streams. Refusals are 403 with kube-apiserver's
//     RBAC wording.
//
// A JWT that does not verify is a 401, even where no token is required.

// checkAccess authenticates r and authorizes it, returning the error to send.
func (s *Server) checkAccess(r *http.Request) error {
	switch r.URL.Path {
	case "/healthz", "/livez", "/readyz", "/version":
		return nil
	}
	tok, hasBearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if hasBearer && looksLikeJWT(tok) {
		user, err := s.verifyToken(tok)
		if err != nil {
			s.log.Debug("rejected service account token", "path", r.URL.Path, "err", err)
			return apierrors.NewUnauthorized("Unauthorized")
		}
		return s.authorizeServiceAccount(r, user)
	}
	if s.cfg.Token == "" {
		return nil
	}
	if hasBearer && subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.Token)) == 1 {
		return nil
	}
	return apierrors.NewUnauthorized("Unauthorized")
}

// readSubresources are the subresources a service account may GET. Streams
// (exec, attach, portforward, proxy) are never reads, whatever the method.
var readSubresources = map[string]bool{"": true, "status": true, "scale": true, "log": true}

func (s *Server) authorizeServiceAccount(r *http.Request, user *serviceAccountUser) error {
	path := strings.Trim(r.URL.Path, "/")
	parts := strings.Split(path, "/")
	var gv schema.GroupVersion
	var rest []string
	switch {
	case parts[0] == "api" && len(parts) >= 3:
		gv, rest = schema.GroupVersion{Version: parts[1]}, parts[2:]
	case parts[0] == "apis" && len(parts) >= 4:
		gv, rest = schema.GroupVersion{Group: parts[1], Version: parts[2]}, parts[3:]
	default:
		// Discovery, OpenAPI and other non-resource paths.
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			return nil
		}
		return apierrors.NewForbidden(schema.GroupResource{}, "", fmt.Errorf("User %q cannot %s path %q",
			user.String(), strings.ToLower(r.Method), r.URL.Path))
	}
	// The resource as RBAC names it, parsed without looking the resource up
	// (an unknown one is refused the same way).
	var ns, res, name, sub string
	if rest[0] == "namespaces" && len(rest) >= 3 && rest[2] != "status" && rest[2] != "finalize" {
		ns, rest = rest[1], rest[2:]
	}
	res = rest[0]
	if len(rest) > 1 {
		name = rest[1]
	}
	if len(rest) > 2 {
		sub = rest[2]
	}
	if res == "namespaces" && len(rest) > 1 && ns == "" {
		ns = name // a namespace is in its own namespace for RBAC
	}
	verb := requestVerb(r, name)
	if (verb == "get" || verb == "list" || verb == "watch") && readSubresources[sub] {
		return nil
	}
	if sub == "exec" || sub == "attach" || sub == "portforward" || sub == "proxy" {
		if verb == "get" {
			verb = "create" // kubectl's websocket upgrade is a GET; kube authorizes it as create
		}
	}
	rbacRes := res
	if sub != "" {
		rbacRes += "/" + sub
	}
	scope := fmt.Sprintf("in the namespace %q", ns)
	if ns == "" {
		scope = "at the cluster scope"
	}
	return apierrors.NewForbidden(schema.GroupResource{Group: gv.Group, Resource: res}, name,
		fmt.Errorf("User %q cannot %s resource %q in API group %q %s", user.String(), verb, rbacRes, gv.Group, scope))
}

// requestVerb is the Kubernetes verb of a resource request.
func requestVerb(r *http.Request, name string) string {
	q := r.URL.Query().Get("watch")
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		switch {
		case q == "true" || q == "1":
			return "watch"
		case name == "":
			return "list"
		}
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		if name == "" {
			return "deletecollection"
		}
		return "delete"
	}
	return strings.ToLower(r.Method)
}
