package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

const (
	rbacPath            = "/apis/rbac.authorization.k8s.io/v1"
	clusterRolesPath    = rbacPath + "/clusterroles"
	clusterBindingsPath = rbacPath + "/clusterrolebindings"
	rolesPath           = rbacPath + "/namespaces/default/roles"
	roleBindingsPath    = rbacPath + "/namespaces/default/rolebindings"
)

// ruleAllows decides as upstream's RBAC RuleAllows.
func TestRBACRuleAllows(t *testing.T) {
	u := &user.DefaultInfo{Name: "u"}
	res := func(verb, group, resource, sub, name string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: group, Resource: resource, Subresource: sub, Name: name, ResourceRequest: true}
	}
	path := func(verb, p string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: u, Verb: verb, Path: p}
	}
	pods := rbacv1.PolicyRule{Verbs: []string{"get", "list"}, APIGroups: []string{""}, Resources: []string{"pods"}}
	for _, c := range []struct {
		name string
		rule rbacv1.PolicyRule
		a    authorizer.AttributesRecord
		want bool
	}{
		{"verb and resource", pods, res("get", "", "pods", "", "web"), true},
		{"other verb", pods, res("delete", "", "pods", "", "web"), false},
		{"other group", pods, res("get", "apps", "pods", "", ""), false},
		{"subresource needs its own rule", pods, res("get", "", "pods", "log", "web"), false},
		{"resource/subresource", rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods/log"}},
			res("get", "", "pods", "log", "web"), true},
		{"*/subresource", rbacv1.PolicyRule{Verbs: []string{"update"}, APIGroups: []string{"*"}, Resources: []string{"*/scale"}},
			res("update", "apps", "deployments", "scale", "d"), true},
		{"*/subresource is not the resource", rbacv1.PolicyRule{Verbs: []string{"update"}, APIGroups: []string{"*"}, Resources: []string{"*/scale"}},
			res("update", "apps", "deployments", "", "d"), false},
		{"star covers subresources", rbacv1.PolicyRule{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}},
			res("create", "", "pods", "exec", "web"), true},
		{"resourceNames match", rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"a"}},
			res("get", "", "configmaps", "", "a"), true},
		{"resourceNames exclude others", rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"a"}},
			res("get", "", "configmaps", "", "b"), false},
		{"resourceNames never match a list", rbacv1.PolicyRule{Verbs: []string{"list"}, APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"a"}},
			res("list", "", "configmaps", "", ""), false},
		{"nonResourceURL exact", rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz"}}, path("get", "/healthz"), true},
		{"nonResourceURL prefix", rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/apis/*"}}, path("get", "/apis/apps/v1"), true},
		{"nonResourceURL other", rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/api"}}, path("get", "/apis"), false},
		{"resource rule never matches a path", pods, path("get", "/api"), false},
	} {
		if got := ruleAllows(&c.a, &c.rule); got != c.want {
			t.Errorf("%s: ruleAllows = %v, want %v", c.name, got, c.want)
		}
	}
}

// saToken creates ServiceAccount ns/name unless it exists and
// returns a token for it.
func (a *testAPI) saToken(ns, name string) string {
	a.t.Helper()
	if name != "default" && !a.exists("/api/v1/namespaces/"+ns+"/serviceaccounts/"+name) {
		a.post("/api/v1/namespaces/"+ns+"/serviceaccounts", map[string]any{"metadata": map[string]any{"name": name}}).mustCode(a.t, http.StatusCreated, nil)
	}
	var tr authenticationv1.TokenRequest
	a.post("/api/v1/namespaces/"+ns+"/serviceaccounts/"+name+"/token", map[string]any{}).mustCode(a.t, http.StatusCreated, &tr)
	return tr.Status.Token
}

func bearer(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

// Upstream's messages for invalid RBAC objects, and an immutable roleRef.
func TestRBACValidation(t *testing.T) {
	a := newTestAPI(t)
	for _, c := range []struct {
		path, body, msg string
	}{
		{roleBindingsPath, `{"metadata":{"name":"b"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Secret","name":"r"},"subjects":[{"kind":"Robot","name":"x"}]}`,
			`RoleBinding.rbac.authorization.k8s.io "b" is invalid: [roleRef.kind: Unsupported value: "Secret": supported values: "Role", "ClusterRole", subjects[0].kind: Unsupported value: "Robot": supported values: "ServiceAccount", "User", "Group"]`},
		{clusterBindingsPath, `{"metadata":{"name":"b"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"r"},"subjects":[{"kind":"ServiceAccount","name":"x"}]}`,
			`ClusterRoleBinding.rbac.authorization.k8s.io "b" is invalid: [roleRef.kind: Unsupported value: "Role": supported values: "ClusterRole", subjects[0].namespace: Required value]`},
		{roleBindingsPath, `{"metadata":{"name":"b"},"roleRef":{"apiGroup":"example.com","kind":"Role","name":""}}`,
			`[roleRef.apiGroup: Unsupported value: "example.com": supported values: "rbac.authorization.k8s.io", roleRef.name: Required value]`},
		{rolesPath, `{"metadata":{"name":"r"},"rules":[{"verbs":["get"],"nonResourceURLs":["/healthz"]},{"apiGroups":[""]}]}`,
			`[rules[0].nonResourceURLs: Invalid value: ["/healthz"]: namespaced rules cannot apply to non-resource URLs, rules[1].verbs: Required value: verbs must contain at least one value, rules[1].resources: Required value: resource rules must supply at least one resource]`},
		{clusterRolesPath, `{"metadata":{"name":"a/b"},"aggregationRule":{}}`,
			`metadata.name: Invalid value: "a/b": may not contain '/'`},
		{clusterRolesPath, `{"metadata":{"name":"agg"},"aggregationRule":{"clusterRoleSelectors":[]}}`,
			`aggregationRule.clusterRoleSelectors: Required value: at least one clusterRoleSelector required if aggregationRule is non-nil`},
	} {
		a.post(c.path, c.body).wantStatus(t, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, c.msg)
	}
	// Defaults: the roleRef's and a User subject's apiGroup.
	var b rbacv1.RoleBinding
	a.post(roleBindingsPath, `{"metadata":{"name":"b"},"roleRef":{"kind":"ClusterRole","name":"view"},"subjects":[{"kind":"User","name":"jane"}]}`).
		mustCode(t, http.StatusCreated, &b)
	if b.RoleRef.APIGroup != rbacv1.GroupName || b.Subjects[0].APIGroup != rbacv1.GroupName {
		t.Errorf("binding not defaulted: %+v", b)
	}
	a.patch(roleBindingsPath+"/b", "application/merge-patch+json", `{"roleRef":{"name":"edit"}}`).
		wantStatus(t, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, `roleRef: Invalid value:`)
	a.patch(roleBindingsPath+"/b", "application/merge-patch+json", `{"subjects":[{"kind":"Group","name":"devs","apiGroup":"rbac.authorization.k8s.io"}]}`).
		mustCode(t, http.StatusOK, nil)
}

// The bootstrap policy is upstream's, marked as upstream marks it, and view,
// edit and admin aggregate the system:aggregate-to-* roles and any
// ClusterRole labelled for them, until it is deleted.
func TestRBACDefaultsAndAggregation(t *testing.T) {
	a := newTestAPI(t)
	var view rbacv1.ClusterRole
	a.read(clusterRolesPath+"/view", &view)
	if view.Labels["kubernetes.io/bootstrapping"] != "rbac-defaults" || view.Annotations["rbac.authorization.kubernetes.io/autoupdate"] != "true" {
		t.Errorf("view is not marked as a default: %v %v", view.Labels, view.Annotations)
	}
	can := func(rules []rbacv1.PolicyRule, verb, group, resource string) bool {
		for _, r := range rules {
			if ruleAllows(&authorizer.AttributesRecord{Verb: verb, APIGroup: group, Resource: resource, ResourceRequest: true}, &r) {
				return true
			}
		}
		return false
	}
	var edit, admin rbacv1.ClusterRole
	a.read(clusterRolesPath+"/edit", &edit)
	a.read(clusterRolesPath+"/admin", &admin)
	for _, c := range []struct {
		role                  *rbacv1.ClusterRole
		verb, group, resource string
		want                  bool
	}{
		{&view, "list", "", "pods", true}, {&view, "get", "apps", "deployments", true}, {&view, "get", "", "secrets", false},
		{&view, "create", "", "pods", false},
		{&edit, "create", "apps", "deployments", true}, {&edit, "get", "", "secrets", true}, {&edit, "create", rbacv1.GroupName, "roles", false},
		{&admin, "create", rbacv1.GroupName, "rolebindings", true}, {&admin, "list", "", "pods", true},
	} {
		if got := can(c.role.Rules, c.verb, c.group, c.resource); got != c.want {
			t.Errorf("%s: %s %s.%s = %v, want %v", c.role.Name, c.verb, c.resource, c.group, got, c.want)
		}
	}
	for _, name := range []string{"cluster-admin", "system:discovery", "system:basic-user", "system:public-info-viewer"} {
		a.get(clusterRolesPath+"/"+name).mustCode(t, http.StatusOK, nil)
		a.get(clusterBindingsPath+"/"+name).mustCode(t, http.StatusOK, nil)
	}

	widgets := `{"metadata":{"name":"widgets-view","labels":{"rbac.authorization.k8s.io/aggregate-to-view":"true"}},
		"rules":[{"apiGroups":["example.com"],"resources":["widgets"],"verbs":["get","list","watch"]}]}`
	// A dry run aggregates nothing.
	a.post(clusterRolesPath+"?dryRun=All", widgets).mustCode(t, http.StatusCreated, nil)
	a.read(clusterRolesPath+"/view", &view)
	if can(view.Rules, "list", "example.com", "widgets") {
		t.Error("a dry run's ClusterRole was aggregated into view")
	}
	a.post(clusterRolesPath, widgets).mustCode(t, http.StatusCreated, nil)
	for _, name := range []string{"view", "edit", "admin"} {
		var cr rbacv1.ClusterRole
		a.read(clusterRolesPath+"/"+name, &cr)
		if !can(cr.Rules, "list", "example.com", "widgets") {
			t.Errorf("%s does not aggregate widgets-view", name)
		}
	}
	a.delete(clusterRolesPath+"/widgets-view").mustCode(t, http.StatusOK, nil)
	a.read(clusterRolesPath+"/admin", &admin)
	if can(admin.Rules, "list", "example.com", "widgets") {
		t.Error("admin keeps the rules of a deleted aggregated role")
	}
	// An aggregated role's own rules are the controller's: a write of them
	// is replaced by the aggregation.
	var mine rbacv1.ClusterRole
	a.post(clusterRolesPath, `{"metadata":{"name":"mine"},"aggregationRule":{"clusterRoleSelectors":[{"matchLabels":{"team":"a"}}]},
		"rules":[{"apiGroups":[""],"resources":["secrets"],"verbs":["*"]}]}`).mustCode(t, http.StatusCreated, &mine)
	if len(mine.Rules) != 0 {
		t.Errorf("aggregated role without matches kept rules %v", mine.Rules)
	}
}

// A ServiceAccount token gets what its bindings grant, with RBAC's
// semantics, and 403 with kube-apiserver's wording otherwise.
func TestRBACServiceAccountEnforcement(t *testing.T) {
	a := newTestAPI(t)
	a.post(namespacesPath, newNamespace("team")).mustCode(t, http.StatusCreated, nil)
	tok := a.saToken("default", "robot")
	as := bearer(tok)
	const cmPath = "/api/v1/namespaces/default/configmaps"
	a.post(cmPath, newConfigMap("a", nil)).mustCode(t, http.StatusCreated, nil)
	a.post(cmPath, newConfigMap("b", nil)).mustCode(t, http.StatusCreated, nil)

	a.do("GET", cmPath, "", nil, as...).wantStatus(t, http.StatusForbidden, metav1.StatusReasonForbidden,
		`configmaps is forbidden: User "system:serviceaccount:default:robot" cannot list resource "configmaps" in API group "" in the namespace "default"`)
	// Discovery and /version are every authenticated user's.
	for _, p := range []string{"/api", "/apis", "/apis/apps/v1", "/version", "/openapi/v2"} {
		a.do("GET", p, "", nil, as...).mustCode(t, http.StatusOK, nil)
	}
	a.do("GET", "/metrics", "", nil, as...).wantStatus(t, http.StatusForbidden, metav1.StatusReasonForbidden,
		`forbidden: User "system:serviceaccount:default:robot" cannot get path "/metrics"`)

	// A Role naming one ConfigMap, bound to the account.
	a.post(rolesPath, `{"metadata":{"name":"cm-a"},"rules":[{"apiGroups":[""],"resources":["configmaps"],"resourceNames":["a"],"verbs":["get","update"]}]}`).
		mustCode(t, http.StatusCreated, nil)
	a.post(roleBindingsPath, `{"metadata":{"name":"cm-a"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"cm-a"},
		"subjects":[{"kind":"ServiceAccount","name":"robot"}]}`).mustCode(t, http.StatusCreated, nil)
	a.do("GET", cmPath+"/a", "", nil, as...).mustCode(t, http.StatusOK, nil)
	a.do("GET", cmPath+"/b", "", nil, as...).wantStatus(t, http.StatusForbidden, metav1.StatusReasonForbidden,
		`configmaps "b" is forbidden: User "system:serviceaccount:default:robot" cannot get resource "configmaps" in API group "" in the namespace "default"`)
	a.do("DELETE", cmPath+"/a", "", nil, as...).wantStatus(t, http.StatusForbidden, metav1.StatusReasonForbidden, `cannot delete resource "configmaps"`)

	// A RoleBinding to a ClusterRole grants it in the binding's namespace only.
	a.do("GET", "/apis/apps/v1/namespaces/team/deployments", "", nil, as...).wantStatus(t, http.StatusForbidden, metav1.StatusReasonForbidden, "")
	a.post(rbacPath+"/namespaces/team/rolebindings", `{"metadata":{"name":"edit"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"edit"},
		"subjects":[{"kind":"ServiceAccount","name":"robot","namespace":"default"}]}`).mustCode(t, http.StatusCreated, nil)
	a.do("POST", "/apis/apps/v1/namespaces/team/deployments", "", newDeployment("web", 1), as...).mustCode(t, http.StatusCreated, nil)
	a.do("GET", "/apis/apps/v1/deployments", "", nil, as...).wantStatus(t, http.StatusForbidden, metav1.StatusReasonForbidden,
		`cannot list resource "deployments" in API group "apps" at the cluster scope`)
	a.do("POST", "/apis/apps/v1/namespaces/default/deployments", "", newDeployment("web", 1), as...).wantStatus(t, http.StatusForbidden, metav1.StatusReasonForbidden,
		`cannot create resource "deployments" in API group "apps" in the namespace "default"`)

	// Groups: every account of a namespace, and a ClusterRoleBinding.
	a.do("GET", "/api/v1/nodes", "", nil, as...).wantStatus(t, http.StatusForbidden, metav1.StatusReasonForbidden, "")
	a.post(clusterRolesPath, `{"metadata":{"name":"node-reader"},"rules":[{"apiGroups":[""],"resources":["nodes"],"verbs":["get","list","watch"]}]}`).
		mustCode(t, http.StatusCreated, nil)
	a.post(clusterBindingsPath, `{"metadata":{"name":"node-reader"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"node-reader"},
		"subjects":[{"kind":"Group","name":"system:serviceaccounts:default","apiGroup":"rbac.authorization.k8s.io"}]}`).mustCode(t, http.StatusCreated, nil)
	a.do("GET", "/api/v1/nodes", "", nil, as...).mustCode(t, http.StatusOK, nil)
	other := bearer(a.saToken("team", "default"))
	a.do("GET", "/api/v1/nodes", "", nil, other...).wantStatus(t, http.StatusForbidden, metav1.StatusReasonForbidden,
		`User "system:serviceaccount:team:default" cannot list resource "nodes"`)
	// Unbinding takes effect on the next request.
	a.delete(clusterBindingsPath+"/node-reader").mustCode(t, http.StatusOK, nil)
	a.do("GET", "/api/v1/nodes", "", nil, as...).wantStatus(t, http.StatusForbidden, metav1.StatusReasonForbidden, "")
}

// A ServiceAccount that may write RBAC objects may grant only what it holds,
// unless it may escalate or bind, as upstream's policy-based registries.
func TestRBACEscalationPrevention(t *testing.T) {
	a := newTestAPI(t)
	as := bearer(a.saToken("default", "deployer"))
	a.post(rolesPath, `{"metadata":{"name":"rbac-writer"},"rules":[
		{"apiGroups":["rbac.authorization.k8s.io"],"resources":["roles","rolebindings"],"verbs":["create","update","patch","get"]},
		{"apiGroups":[""],"resources":["configmaps"],"verbs":["get","list"]}]}`).mustCode(t, http.StatusCreated, nil)
	a.post(roleBindingsPath, `{"metadata":{"name":"rbac-writer"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"rbac-writer"},
		"subjects":[{"kind":"ServiceAccount","name":"deployer"}]}`).mustCode(t, http.StatusCreated, nil)

	a.do("POST", rolesPath, "", `{"metadata":{"name":"cm-reader"},"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get"]}]}`, as...).
		mustCode(t, http.StatusCreated, nil)
	a.do("POST", rolesPath, "", `{"metadata":{"name":"cm-writer"},"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get","create","delete"]}]}`, as...).
		wantStatus(t, http.StatusForbidden, metav1.StatusReasonForbidden,
			`roles.rbac.authorization.k8s.io "cm-writer" is forbidden: user "system:serviceaccount:default:deployer" (groups=["system:serviceaccounts" "system:serviceaccounts:default" "system:authenticated"]) is attempting to grant RBAC permissions not currently held:
{APIGroups:[""], Resources:["configmaps"], Verbs:["create" "delete"]}`)
	// The same through a patch of a role it could create.
	a.do("PATCH", rolesPath+"/cm-reader", "application/merge-patch+json", `{"rules":[{"apiGroups":[""],"resources":["secrets"],"verbs":["get"]}]}`, as...).
		wantStatus(t, http.StatusForbidden, metav1.StatusReasonForbidden, `is attempting to grant RBAC permissions not currently held`)
	// And through server-side apply.
	a.do("PATCH", rolesPath+"/applied?fieldManager=test", "application/apply-patch+yaml",
		`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"applied"},"rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["get"]}]}`, as...).
		wantStatus(t, http.StatusForbidden, metav1.StatusReasonForbidden, `{APIGroups:[""], Resources:["pods"], Verbs:["get"]}`)

	// Bindings: to a role whose rules it holds, yes; to admin, no.
	bind := func(name, kind, role string) string {
		return fmt.Sprintf(`{"metadata":{"name":%q},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":%q,"name":%q},"subjects":[{"kind":"User","name":"jane","apiGroup":"rbac.authorization.k8s.io"}]}`, name, kind, role)
	}
	a.do("POST", roleBindingsPath, "", bind("jane-cm", "Role", "cm-reader"), as...).mustCode(t, http.StatusCreated, nil)
	a.do("POST", roleBindingsPath, "", bind("jane-admin", "ClusterRole", "admin"), as...).
		wantStatus(t, http.StatusForbidden, metav1.StatusReasonForbidden, `rolebindings.rbac.authorization.k8s.io "jane-admin" is forbidden: user "system:serviceaccount:default:deployer"`)
	a.do("POST", roleBindingsPath, "", bind("jane-ghost", "ClusterRole", "ghost"), as...).
		wantStatus(t, http.StatusNotFound, metav1.StatusReasonNotFound, `clusterroles.rbac.authorization.k8s.io "ghost" not found`)
	// With bind on that one ClusterRole, it may.
	a.post(rolesPath, `{"metadata":{"name":"bind-admin"},"rules":[{"apiGroups":["rbac.authorization.k8s.io"],"resources":["clusterroles"],"resourceNames":["admin"],"verbs":["bind"]}]}`).
		mustCode(t, http.StatusCreated, nil)
	a.post(roleBindingsPath, `{"metadata":{"name":"deployer-bind"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"bind-admin"},"subjects":[{"kind":"ServiceAccount","name":"deployer"}]}`).
		mustCode(t, http.StatusCreated, nil)
	a.do("POST", roleBindingsPath, "", bind("jane-admin", "ClusterRole", "admin"), as...).mustCode(t, http.StatusCreated, nil)
	// The admin token bypasses the check, as system:masters does.
	a.post(rolesPath, `{"metadata":{"name":"all"},"rules":[{"apiGroups":["*"],"resources":["*"],"verbs":["*"]}]}`).mustCode(t, http.StatusCreated, nil)
}

// The review APIs and impersonation, as kubectl auth can-i and whoami use them.
func TestRBACReviewsAndImpersonation(t *testing.T) {
	a := newTestAPI(t)
	tok := a.saToken("default", "robot")
	as := bearer(tok)
	a.post(roleBindingsPath, `{"metadata":{"name":"view"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"view"},
		"subjects":[{"kind":"ServiceAccount","name":"robot"}]}`).mustCode(t, http.StatusCreated, nil)

	ssar := func(verb, resource, ns string, header ...string) authorizationv1.SelfSubjectAccessReview {
		var out authorizationv1.SelfSubjectAccessReview
		a.do("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "", authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: verb, Resource: resource, Namespace: ns}}}, header...).mustCode(t, http.StatusCreated, &out)
		return out
	}
	if r := ssar("list", "pods", "default", as...); !r.Status.Allowed ||
		r.Status.Reason != `RBAC: allowed by RoleBinding "view/default" of ClusterRole "view" to ServiceAccount "robot/default"` {
		t.Errorf("robot list pods: %+v", r.Status)
	}
	if r := ssar("create", "pods", "default", as...); r.Status.Allowed {
		t.Errorf("robot create pods allowed: %+v", r.Status)
	}
	if r := ssar("delete", "nodes", ""); !r.Status.Allowed {
		t.Errorf("admin delete nodes denied: %+v", r.Status)
	}
	// The admin impersonating the account sees what it sees.
	imp := []string{"Impersonate-User", "system:serviceaccount:default:robot"}
	if r := ssar("create", "pods", "default", imp...); r.Status.Allowed {
		t.Errorf("impersonated robot create pods allowed: %+v", r.Status)
	}
	a.do("GET", "/api/v1/nodes", "", nil, imp...).wantStatus(t, http.StatusForbidden, metav1.StatusReasonForbidden,
		`User "system:serviceaccount:default:robot" cannot list resource "nodes"`)
	// The account may not impersonate.
	a.do("GET", "/api/v1/pods", "", nil, append(as, "Impersonate-User", "jane")...).wantStatus(t, http.StatusForbidden, metav1.StatusReasonForbidden,
		`users "jane" is forbidden: User "system:serviceaccount:default:robot" cannot impersonate resource "users" in API group "" at the cluster scope`)
	a.do("GET", "/api/v1/pods", "", nil, "Impersonate-Group", "devs").wantStatus(t, http.StatusBadRequest, metav1.StatusReasonBadRequest, "without impersonating a user")

	// SubjectAccessReview for someone else: the admin may, the account may not.
	sar := authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "system:serviceaccount:default:robot",
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "configmaps", Namespace: "default"}}}
	var sarOut authorizationv1.SubjectAccessReview
	a.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", sar).mustCode(t, http.StatusCreated, &sarOut)
	if !sarOut.Status.Allowed {
		t.Errorf("SAR: %+v", sarOut.Status)
	}
	a.do("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", "", sar, as...).wantStatus(t, http.StatusForbidden, metav1.StatusReasonForbidden,
		`subjectaccessreviews.authorization.k8s.io is forbidden: User "system:serviceaccount:default:robot" cannot create resource "subjectaccessreviews" in API group "authorization.k8s.io" at the cluster scope`)
	a.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", `{"spec":{"resourceAttributes":{"verb":"get"}}}`).
		wantStatus(t, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "spec.user: Invalid value: \"\": at least one of user or group must be specified")

	// Rules review.
	var rules authorizationv1.SelfSubjectRulesReview
	a.do("POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", "", `{"spec":{"namespace":"default"}}`, as...).mustCode(t, http.StatusCreated, &rules)
	found := false
	for _, r := range rules.Status.ResourceRules {
		found = found || strings.Contains(fmt.Sprint(r.Resources), "pods") && strings.Contains(fmt.Sprint(r.Verbs), "list")
	}
	if !found || len(rules.Status.NonResourceRules) == 0 {
		t.Errorf("rules review lacks list pods or the non-resource rules: %+v", rules.Status)
	}

	// Token review and whoami.
	var tr authenticationv1.TokenReview
	a.post("/apis/authentication.k8s.io/v1/tokenreviews", authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tok}}).
		mustCode(t, http.StatusCreated, &tr)
	if !tr.Status.Authenticated || tr.Status.User.Username != "system:serviceaccount:default:robot" ||
		strings.Join(tr.Status.User.Groups, ",") != "system:serviceaccounts,system:serviceaccounts:default,system:authenticated" ||
		len(tr.Status.Audiences) != 1 || tr.Status.Audiences[0] != TokenIssuer {
		t.Errorf("token review: %+v", tr.Status)
	}
	var vault authenticationv1.TokenReview
	a.post("/apis/authentication.k8s.io/v1/tokenreviews", authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tok, Audiences: []string{"vault"}}}).
		mustCode(t, http.StatusCreated, &vault)
	if vault.Status.Authenticated || vault.Status.Error == "" {
		t.Errorf("token review for another audience: %+v", vault.Status)
	}
	var who authenticationv1.SelfSubjectReview
	a.do("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", "", `{}`, as...).mustCode(t, http.StatusCreated, &who)
	if who.Status.UserInfo.Username != "system:serviceaccount:default:robot" || len(who.Status.UserInfo.Extra["authentication.kubernetes.io/credential-id"]) != 1 {
		t.Errorf("whoami: %+v", who.Status.UserInfo)
	}
	b, _ := json.Marshal(who)
	if !strings.Contains(string(b), `"kind":"SelfSubjectReview","apiVersion":"authentication.k8s.io/v1"`) {
		t.Errorf("whoami answer %s", b)
	}
}

// The review APIs are create-only in discovery, as kube-apiserver lists them.
func TestRBACReviewDiscovery(t *testing.T) {
	got := map[string]string{}
	for _, gv := range reviewGroupVersions {
		for _, r := range reviewAPIResources(gv) {
			got[gv.Group+"/"+r.Name] = fmt.Sprintf("%s %v %v", r.Kind, r.Namespaced, r.Verbs)
		}
	}
	want := map[string]string{
		"authorization.k8s.io/subjectaccessreviews":      "SubjectAccessReview false [create]",
		"authorization.k8s.io/localsubjectaccessreviews": "LocalSubjectAccessReview true [create]",
		"authorization.k8s.io/selfsubjectaccessreviews":  "SelfSubjectAccessReview false [create]",
		"authorization.k8s.io/selfsubjectrulesreviews":   "SelfSubjectRulesReview false [create]",
		"authentication.k8s.io/tokenreviews":             "TokenReview false [create]",
		"authentication.k8s.io/selfsubjectreviews":       "SelfSubjectReview false [create]",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("review discovery:\n got %v\nwant %v", got, want)
	}
}

// At every start the defaults annotated autoupdate get back what they lack,
// keep what was added, and are left alone once the annotation says "false";
// a start with nothing to do writes nothing.
func TestRBACDefaultsReconciled(t *testing.T) {
	a := newTestAPI(t)
	var cr rbacv1.ClusterRole
	a.read(clusterRolesPath+"/view", &cr)
	viewRV := cr.ResourceVersion
	a.patch(clusterRolesPath+"/system:discovery", "application/merge-patch+json",
		`{"rules":[{"nonResourceURLs":["/extra"],"verbs":["get"]}]}`).mustCode(t, http.StatusOK, nil)
	a.patch(clusterRolesPath+"/system:basic-user", "application/merge-patch+json",
		`{"metadata":{"annotations":{"rbac.authorization.kubernetes.io/autoupdate":"false"}},"rules":[{"nonResourceURLs":["/extra"],"verbs":["get"]}]}`).
		mustCode(t, http.StatusOK, nil)
	a.patch(clusterBindingsPath+"/system:discovery", "application/merge-patch+json", `{"subjects":null}`).mustCode(t, http.StatusOK, nil)
	a.close()
	a = newTestAPIWith(t, apiOptions{dbPath: a.dbPath})

	a.read(clusterRolesPath+"/system:discovery", &cr)
	if len(cr.Rules) < 2 || !strings.Contains(fmt.Sprint(cr.Rules), "/extra") || !strings.Contains(fmt.Sprint(cr.Rules), "/openapi") {
		t.Errorf("system:discovery not reconciled: %v", cr.Rules)
	}
	a.read(clusterRolesPath+"/system:basic-user", &cr)
	if len(cr.Rules) != 1 {
		t.Errorf("system:basic-user with autoupdate false was reconciled: %v", cr.Rules)
	}
	var b rbacv1.ClusterRoleBinding
	a.read(clusterBindingsPath+"/system:discovery", &b)
	if len(b.Subjects) != 1 || b.Subjects[0].Name != user.AllAuthenticated {
		t.Errorf("system:discovery binding not reconciled: %v", b.Subjects)
	}
	a.read(clusterRolesPath+"/view", &cr)
	if cr.ResourceVersion != viewRV {
		t.Errorf("view was rewritten at start: resourceVersion %s, was %s", cr.ResourceVersion, viewRV)
	}
}

// BenchmarkRBACAuthorize is one ServiceAccount request's authorization with
// upstream's default policy and a binding, with the decoded objects kept
// between requests (as served) and, as the reference, decoded every time.
func BenchmarkRBACAuthorize(b *testing.B) {
	a := newTestAPI(b)
	a.post(roleBindingsPath, `{"metadata":{"name":"view"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"view"},
		"subjects":[{"kind":"ServiceAccount","name":"robot"}]}`).mustCode(b, http.StatusCreated, nil)
	u := (&serviceAccountUser{namespace: "default", name: "robot"}).info()
	attrs := &authorizer.AttributesRecord{User: u, Verb: "list", Resource: "pods", Namespace: "default", ResourceRequest: true}
	for _, c := range []struct {
		name  string
		reset bool
	}{{"cached", false}, {"decoding", true}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if c.reset {
					a.srv.rbacObjects = decodedCache{}
				}
				if ok, _, err := a.srv.authorize(attrs); !ok || err != nil {
					b.Fatalf("denied: %v", err)
				}
			}
		})
	}
}
