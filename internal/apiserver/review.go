package apiserver

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// The review APIs, create-only and never stored, as kube-apiserver serves
// them: authorization.k8s.io/v1 SubjectAccessReview,
// LocalSubjectAccessReview, SelfSubjectAccessReview (kubectl auth can-i) and
// SelfSubjectRulesReview (can-i --list), and authentication.k8s.io/v1
// TokenReview and SelfSubjectReview (kubectl auth whoami). Who may create
// them is RBAC's to say (system:basic-user grants the self reviews to every
// authenticated user; the others take a binding such as
// system:auth-delegator).

// reviewKinds maps the review resources to their kinds.
var reviewKinds = map[schema.GroupResource]string{
	{Group: authorizationv1.GroupName, Resource: "subjectaccessreviews"}:      "SubjectAccessReview",
	{Group: authorizationv1.GroupName, Resource: "localsubjectaccessreviews"}: "LocalSubjectAccessReview",
	{Group: authorizationv1.GroupName, Resource: "selfsubjectaccessreviews"}:  "SelfSubjectAccessReview",
	{Group: authorizationv1.GroupName, Resource: "selfsubjectrulesreviews"}:   "SelfSubjectRulesReview",
	{Group: authenticationv1.GroupName, Resource: "tokenreviews"}:             "TokenReview",
	{Group: authenticationv1.GroupName, Resource: "selfsubjectreviews"}:       "SelfSubjectReview",
}

// reviewGroupVersions are the group versions of the review APIs, for
// discovery: authorization.k8s.io/v1 and authentication.k8s.io/v1 (whose
// TokenRequest is a subresource of serviceaccounts).
var reviewGroupVersions = []schema.GroupVersion{authorizationv1.SchemeGroupVersion, authenticationv1.SchemeGroupVersion}

// reviewAPIResources is the discovery of gv's review resources, as
// kube-apiserver lists them: create only.
func reviewAPIResources(gv schema.GroupVersion) []metav1.APIResource {
	var out []metav1.APIResource
	for _, name := range []string{"localsubjectaccessreviews", "selfsubjectaccessreviews", "selfsubjectrulesreviews",
		"subjectaccessreviews", "selfsubjectreviews", "tokenreviews"} {
		kind, ok := reviewKinds[schema.GroupResource{Group: gv.Group, Resource: name}]
		if !ok || gv.Version != "v1" {
			continue
		}
		out = append(out, metav1.APIResource{Name: name, SingularName: strings.ToLower(kind), Kind: kind,
			Namespaced: name == "localsubjectaccessreviews", Verbs: metav1.Verbs{"create"}})
	}
	return out
}

// isReview reports whether gv and rest name a review resource, and returns
// the request's namespace (LocalSubjectAccessReview) and resource.
func isReview(gv schema.GroupVersion, rest []string) (ns, resource string, ok bool) {
	if gv.Version != "v1" || (gv.Group != authorizationv1.GroupName && gv.Group != authenticationv1.GroupName) {
		return "", "", false
	}
	switch {
	case len(rest) == 1:
		resource = rest[0]
	case len(rest) == 3 && rest[0] == "namespaces":
		ns, resource = rest[1], rest[2]
	default:
		return "", "", false
	}
	_, ok = reviewKinds[schema.GroupResource{Group: gv.Group, Resource: resource}]
	if ok && (ns != "") != (resource == "localsubjectaccessreviews") {
		ok = false
	}
	return ns, resource, ok
}

func (s *Server) serveReview(w http.ResponseWriter, r *http.Request, gv schema.GroupVersion, ns, resource string) error {
	gr := schema.GroupResource{Group: gv.Group, Resource: resource}
	kind := reviewKinds[gr]
	if r.Method != http.MethodPost {
		return apierrors.NewMethodNotSupported(gr, strings.ToLower(r.Method))
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	gvk := gv.WithKind(kind)
	u := userFrom(r)
	var out any
	switch kind {
	case "SelfSubjectAccessReview":
		var ssar authorizationv1.SelfSubjectAccessReview
		if _, err := decodeInto(body, &ssar, gvk, "Strict"); err != nil {
			return err
		}
		if (ssar.Spec.ResourceAttributes == nil) == (ssar.Spec.NonResourceAttributes == nil) {
			return apierrors.NewInvalid(gvk.GroupKind(), "", field.ErrorList{field.Invalid(field.NewPath("spec", "resourceAttributes"),
				ssar.Spec.NonResourceAttributes, "exactly one of nonResourceAttributes or resourceAttributes must be specified")})
		}
		ssar.TypeMeta = metav1.TypeMeta{Kind: kind, APIVersion: gv.String()}
		ssar.Status = s.accessReview(authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: ssar.Spec.ResourceAttributes,
			NonResourceAttributes: ssar.Spec.NonResourceAttributes}, u)
		out = &ssar
	case "SubjectAccessReview", "LocalSubjectAccessReview":
		var sar authorizationv1.SubjectAccessReview
		if _, err := decodeInto(body, &sar, gvk, "Strict"); err != nil {
			return err
		}
		if errs := validateSARSpec(sar.Spec, kind == "LocalSubjectAccessReview", ns); len(errs) > 0 {
			return apierrors.NewInvalid(gvk.GroupKind(), "", errs)
		}
		extra := map[string][]string{}
		for k, v := range sar.Spec.Extra {
			extra[k] = v
		}
		sar.TypeMeta = metav1.TypeMeta{Kind: kind, APIVersion: gv.String()}
		sar.Status = s.accessReview(sar.Spec, &user.DefaultInfo{Name: sar.Spec.User, UID: sar.Spec.UID, Groups: sar.Spec.Groups, Extra: extra})
		out = &sar
	case "SelfSubjectRulesReview":
		var ssrr authorizationv1.SelfSubjectRulesReview
		if _, err := decodeInto(body, &ssrr, gvk, "Strict"); err != nil {
			return err
		}
		ssrr.TypeMeta = metav1.TypeMeta{Kind: kind, APIVersion: gv.String()}
		ssrr.Status, err = s.rulesReview(u, ssrr.Spec.Namespace)
		if err != nil {
			return err
		}
		out = &ssrr
	case "TokenReview":
		var tr authenticationv1.TokenReview
		if _, err := decodeInto(body, &tr, gvk, "Strict"); err != nil {
			return err
		}
		if tr.Spec.Token == "" {
			return apierrors.NewBadRequest("token is required for TokenReview in authentication")
		}
		tr.TypeMeta = metav1.TypeMeta{Kind: kind, APIVersion: gv.String()}
		tr.Status = s.reviewToken(tr.Spec.Token, tr.Spec.Audiences)
		out = &tr
	case "SelfSubjectReview":
		var ssr authenticationv1.SelfSubjectReview
		if _, err := decodeInto(body, &ssr, gvk, "Strict"); err != nil {
			return err
		}
		ssr.TypeMeta = metav1.TypeMeta{Kind: kind, APIVersion: gv.String()}
		ssr.CreationTimestamp = metav1.NewTime(s.now().Truncate(1e9))
		ssr.Status.UserInfo = userInfo(u)
		out = &ssr
	}
	writeValue(w, r, http.StatusCreated, out)
	return nil
}

// validateSARSpec is upstream's ValidateSubjectAccessReviewSpec (and the
// namespace check of a LocalSubjectAccessReview).
func validateSARSpec(spec authorizationv1.SubjectAccessReviewSpec, local bool, ns string) field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("spec")
	if spec.ResourceAttributes != nil && spec.NonResourceAttributes != nil {
		errs = append(errs, field.Invalid(p.Child("nonResourceAttributes"), spec.NonResourceAttributes, `cannot be specified in combination with resourceAttributes`))
	}
	if spec.ResourceAttributes == nil && spec.NonResourceAttributes == nil {
		errs = append(errs, field.Invalid(p.Child("resourceAttributes"), spec.NonResourceAttributes, `exactly one of nonResourceAttributes or resourceAttributes must be specified`))
	}
	if spec.User == "" && len(spec.Groups) == 0 {
		errs = append(errs, field.Invalid(p.Child("user"), spec.User, `at least one of user or group must be specified`))
	}
	if local {
		if spec.ResourceAttributes == nil || spec.ResourceAttributes.Namespace != ns {
			got := ""
			if spec.ResourceAttributes != nil {
				got = spec.ResourceAttributes.Namespace
			}
			errs = append(errs, field.Invalid(p.Child("resourceAttributes", "namespace"), got, "must match metadata.namespace"))
		}
		if spec.NonResourceAttributes != nil {
			errs = append(errs, field.Invalid(p.Child("nonResourceAttributes"), spec.NonResourceAttributes, "disallowed on this kind of request"))
		}
	}
	return errs
}

// accessReview is the authorizer's answer to spec for u.
func (s *Server) accessReview(spec authorizationv1.SubjectAccessReviewSpec, u user.Info) authorizationv1.SubjectAccessReviewStatus {
	allowed, reason, err := s.authorize(sarAttributes(&spec, u))
	st := authorizationv1.SubjectAccessReviewStatus{Allowed: allowed, Reason: reason}
	if err != nil {
		st.EvaluationError = err.Error()
	}
	return st
}

// sarAttributes are the attributes a SubjectAccessReview asks about.
func sarAttributes(spec *authorizationv1.SubjectAccessReviewSpec, u user.Info) *authorizer.AttributesRecord {
	a := &authorizer.AttributesRecord{User: u}
	if ra := spec.ResourceAttributes; ra != nil {
		a.Verb, a.Namespace, a.APIGroup, a.APIVersion = ra.Verb, ra.Namespace, ra.Group, ra.Version
		a.Resource, a.Subresource, a.Name, a.ResourceRequest = ra.Resource, ra.Subresource, ra.Name, true
	} else if nra := spec.NonResourceAttributes; nra != nil {
		a.Verb, a.Path = nra.Verb, nra.Path
	}
	return a
}

// rulesReview is what u may do in ns: RBAC's rules, or everything for
// system:masters (through upstream's default binding of cluster-admin to
// that group, when it exists).
func (s *Server) rulesReview(u user.Info, ns string) (authorizationv1.SubjectRulesReviewStatus, error) {
	var st authorizationv1.SubjectRulesReviewStatus
	p, err := s.loadPolicy(ns)
	if err != nil {
		return st, err
	}
	rules, errs := p.rulesFor(u)
	if isMaster(u) && !slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.Verbs, "*") && slices.Contains(r.Resources, "*") && slices.Contains(r.APIGroups, "*")
	}) {
		rules = append(fullAuthority, rules...)
	}
	st.ResourceRules, st.NonResourceRules = []authorizationv1.ResourceRule{}, []authorizationv1.NonResourceRule{}
	for _, r := range rules {
		if len(r.NonResourceURLs) > 0 {
			st.NonResourceRules = append(st.NonResourceRules, authorizationv1.NonResourceRule{Verbs: r.Verbs, NonResourceURLs: r.NonResourceURLs})
			continue
		}
		st.ResourceRules = append(st.ResourceRules, authorizationv1.ResourceRule{Verbs: r.Verbs, APIGroups: r.APIGroups,
			Resources: r.Resources, ResourceNames: r.ResourceNames})
	}
	if len(errs) > 0 {
		st.Incomplete = true
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		st.EvaluationError = strings.Join(msgs, ", ")
	}
	return st, nil
}

// reviewToken authenticates a token for a TokenReview: service account
// tokens for the audiences asked (the API server's own when none), and the
// cluster token.
func (s *Server) reviewToken(tok string, audiences []string) authenticationv1.TokenReviewStatus {
	if looksLikeJWT(tok) {
		sa, err := s.verifyToken(tok, audiences)
		if err != nil {
			return authenticationv1.TokenReviewStatus{Error: "[invalid bearer token, " + err.Error() + "]"}
		}
		return authenticationv1.TokenReviewStatus{Authenticated: true, User: userInfo(sa.info()), Audiences: sa.audiences}
	}
	if s.cfg.Token != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.Token)) == 1 {
		st := authenticationv1.TokenReviewStatus{Authenticated: true, User: userInfo(adminUser)}
		if len(audiences) > 0 {
			// The cluster token is not audience-bound: it is for this API only.
			if !slices.Contains(audiences, TokenIssuer) {
				return authenticationv1.TokenReviewStatus{Error: "token audiences " + fmt.Sprint([]string{TokenIssuer}) + " is invalid for the target audiences " + fmt.Sprint(audiences)}
			}
			st.Audiences = []string{TokenIssuer}
		}
		return st
	}
	return authenticationv1.TokenReviewStatus{Error: "[invalid bearer token]"}
}

func userInfo(u user.Info) authenticationv1.UserInfo {
	ui := authenticationv1.UserInfo{Username: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups()}
	if ex := u.GetExtra(); len(ex) > 0 {
		ui.Extra = map[string]authenticationv1.ExtraValue{}
		for k, v := range ex {
			ui.Extra[k] = v
		}
	}
	return ui
}
