package apiserver

import (
	"crypto/subtle"
	"net/http"
	"net/url"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericrequest "k8s.io/apiserver/pkg/endpoints/request"
)

// Authentication, impersonation and authorization, in kube-apiserver's order.
// Two kinds of bearer token exist:
//
//   - the cluster token (Config.Token, DATA_DIR/token), which is the admin and
//     the node agents: user kubernetes-admin in group system:masters, allowed
//     everything. On a loopback server that serves plain HTTP no token is
//     required and a request without one is the admin too;
//   - service account tokens (token.go), which pods mount: user
//     system:serviceaccount:NS:NAME in the groups system:serviceaccounts,
//     system:serviceaccounts:NS and system:authenticated, authorized by RBAC
//     (rbac.go): what its bindings grant, and what upstream's default
//     bindings grant every authenticated user (discovery, /version, the
//     review APIs). Refusals are 403 with kube-apiserver's wording.
//
// Impersonate-User, -Group, -Uid and -Extra-* headers make a request run as
// another user when the requester may "impersonate" each (the admin may).
// A JWT that does not verify is a 401, even where no token is required.

// adminUser is who the cluster token authenticates.
var adminUser = &user.DefaultInfo{Name: "kubernetes-admin", Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}}

var requestInfoFactory = &genericrequest.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

// checkAccess authenticates r and authorizes it. It returns r with the
// user in its context (genericrequest.UserFrom), or the error to send.
func (s *Server) checkAccess(r *http.Request) (*http.Request, error) {
	switch r.URL.Path {
	case "/healthz", "/livez", "/readyz", "/version":
		return r, nil
	}
	u, err := s.authenticate(r)
	if err != nil {
		return nil, err
	}
	if u, err = s.impersonate(r, u); err != nil {
		return nil, err
	}
	attrs, err := requestAttributes(r, u)
	if err != nil {
		return nil, err
	}
	ok, reason, err := s.authorize(attrs)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, responsewriters.ForbiddenStatusError(attrs, reason)
	}
	return r.WithContext(genericrequest.WithUser(r.Context(), u)), nil
}

// authenticate is who r's credentials say.
func (s *Server) authenticate(r *http.Request) (user.Info, error) {
	tok, hasBearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if hasBearer && looksLikeJWT(tok) {
		sa, err := s.verifyToken(tok, nil)
		if err != nil {
			s.log.Debug("rejected service account token", "path", r.URL.Path, "err", err)
			return nil, apierrors.NewUnauthorized("Unauthorized")
		}
		return sa.info(), nil
	}
	if s.cfg.Token == "" {
		return adminUser, nil
	}
	if hasBearer && subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.Token)) == 1 {
		return adminUser, nil
	}
	return nil, apierrors.NewUnauthorized("Unauthorized")
}

// requestAttributes are what RBAC decides r on, as kube-apiserver's
// RequestInfoFactory parses a request.
func requestAttributes(r *http.Request, u user.Info) (*authorizer.AttributesRecord, error) {
	info, err := requestInfoFactory.NewRequestInfo(r)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	verb := info.Verb
	// A websocket upgrade of exec, attach or portforward is a GET that
	// kube-apiserver authorizes as create, as for its POST.
	if info.IsResourceRequest && info.Resource == "pods" && verb == "get" {
		switch info.Subresource {
		case "exec", "attach", "portforward":
			verb = "create"
		}
	}
	return &authorizer.AttributesRecord{
		User: u, Verb: verb, Namespace: info.Namespace, APIGroup: info.APIGroup, APIVersion: info.APIVersion,
		Resource: info.Resource, Subresource: info.Subresource, Name: info.Name,
		ResourceRequest: info.IsResourceRequest, Path: info.Path,
	}, nil
}

// impersonate is kube-apiserver's impersonation filter: each requested
// identity (user or service account, groups, uid, extra values) must be
// allowed to the requester by the "impersonate" verb; the result is the user
// the request runs as.
func (s *Server) impersonate(r *http.Request, requester user.Info) (user.Info, error) {
	name := r.Header.Get(authenticationv1.ImpersonateUserHeader)
	groupsAsked := r.Header.Values(authenticationv1.ImpersonateGroupHeader)
	uid := r.Header.Get(authenticationv1.ImpersonateUIDHeader)
	extra := map[string][]string{}
	for h, vs := range r.Header {
		if key, ok := strings.CutPrefix(h, authenticationv1.ImpersonateUserExtraHeaderPrefix); ok {
			// Keys are percent-encoded in header names, as client-go sends them.
			key = strings.ToLower(key)
			if k, err := url.PathUnescape(key); err == nil {
				key = k
			}
			extra[key] = append(extra[key], vs...)
		}
	}
	if name == "" {
		if len(groupsAsked) > 0 || len(extra) > 0 || uid != "" {
			return nil, apierrors.NewBadRequest("requested impersonation of groups, extra or uid without impersonating a user")
		}
		return requester, nil
	}
	check := func(a *authorizer.AttributesRecord) error {
		a.User, a.Verb, a.ResourceRequest = requester, "impersonate", true
		ok, reason, err := s.authorize(a)
		if err != nil {
			return err
		}
		if !ok {
			return responsewriters.ForbiddenStatusError(a, reason)
		}
		return nil
	}
	var groups []string
	if ns, sa, err := serviceaccount.SplitUsername(name); err == nil {
		if err := check(&authorizer.AttributesRecord{APIVersion: "v1", Resource: "serviceaccounts", Namespace: ns, Name: sa}); err != nil {
			return nil, err
		}
		if len(groupsAsked) == 0 {
			groups = serviceaccount.MakeGroupNames(ns)
		}
	} else if err := check(&authorizer.AttributesRecord{APIVersion: "v1", Resource: "users", Name: name}); err != nil {
		return nil, err
	}
	for _, g := range groupsAsked {
		if err := check(&authorizer.AttributesRecord{APIVersion: "v1", Resource: "groups", Name: g}); err != nil {
			return nil, err
		}
		groups = append(groups, g)
	}
	for key, vs := range extra {
		for _, v := range vs {
			if err := check(&authorizer.AttributesRecord{APIGroup: authenticationv1.GroupName, APIVersion: "v1",
				Resource: "userextras", Subresource: key, Name: v}); err != nil {
				return nil, err
			}
		}
	}
	if uid != "" {
		if err := check(&authorizer.AttributesRecord{APIGroup: authenticationv1.GroupName, APIVersion: "v1", Resource: "uids", Name: uid}); err != nil {
			return nil, err
		}
	}
	// As upstream: a non-anonymous user is authenticated unless the groups
	// asked for say otherwise; the anonymous one is unauthenticated.
	if name != user.Anonymous {
		if !sets.NewString(groups...).HasAny(user.AllAuthenticated, user.AllUnauthenticated) {
			groups = append(groups, user.AllAuthenticated)
		}
	} else if !sets.NewString(groups...).Has(user.AllUnauthenticated) {
		groups = append(groups, user.AllUnauthenticated)
	}
	if len(extra) == 0 {
		extra = nil
	}
	return &user.DefaultInfo{Name: name, UID: uid, Groups: groups, Extra: extra}, nil
}

// userFrom is the user checkAccess put in r's context; the admin when there
// is none (requests the server makes to itself in tests).
func userFrom(r *http.Request) user.Info {
	if u, ok := genericrequest.UserFrom(r.Context()); ok {
		return u
	}
	return adminUser
}
