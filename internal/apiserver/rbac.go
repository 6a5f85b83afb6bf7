package apiserver

import (
	"bytes"
	_ "embed"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/minikit/minikit/internal/store"

	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	rbacvalidation "k8s.io/component-helpers/auth/rbac/validation"
	"sigs.k8s.io/yaml"
)

// RBAC, as kube-apiserver's RBAC authorizer, its policy-based registries and
// its clusterrole-aggregation controller do it:
//
//   - a user holds the rules of the ClusterRoles its ClusterRoleBindings
//     name, and in a namespace also those of the Roles and ClusterRoles the
//     RoleBindings of that namespace name; a subject is a User (by name), a
//     Group (system:serviceaccounts, system:serviceaccounts:NS,
//     system:authenticated, …) or a ServiceAccount;
//   - system:masters (the cluster token) is allowed everything without
//     looking at RBAC, as kube-apiserver's privileged-group authorizer;
//   - writing a Role or ClusterRole needs the rules it grants (or the
//     escalate verb), writing a binding needs the rules of the role it binds
//     (or the bind verb), and an aggregationRule needs cluster-admin;
//   - a ClusterRole with an aggregationRule has the rules of the ClusterRoles
//     its selectors match. kube-controller-manager does that asynchronously;
//     here it happens in the transaction that writes or deletes a ClusterRole,
//     so a reader never sees an aggregated role behind its parts.
//
// The defaults (upstream's bootstrap policy, rbacdefaults/) are created and
// reconciled when the server starts.

var (
	clusterRoleResource        = lookup(rbacv1.GroupName, "v1", "clusterroles")
	clusterRoleBindingResource = lookup(rbacv1.GroupName, "v1", "clusterrolebindings")
	roleResource               = lookup(rbacv1.GroupName, "v1", "roles")
	roleBindingResource        = lookup(rbacv1.GroupName, "v1", "rolebindings")
)

// policy is a snapshot of the RBAC objects that decide requests in one
// namespace (all cluster-scoped ones, and the Roles and RoleBindings of ns).
type policy struct {
	ns           string
	clusterRoles map[string]*rbacv1.ClusterRole
	roles        map[string]*rbacv1.Role
	crbs         []*rbacv1.ClusterRoleBinding
	rbs          []*rbacv1.RoleBinding
}

// loadPolicy reads the policy for ns from the store.
func (s *Server) loadPolicy(ns string) (*policy, error) {
	p := &policy{ns: ns, clusterRoles: map[string]*rbacv1.ClusterRole{}, roles: map[string]*rbacv1.Role{}}
	list := func(res *resource, ns string, each func(runtime.Object)) error {
		objs, err := s.rbacObjects.list(s.store, res, res.prefix(ns))
		if err != nil {
			return err
		}
		for _, o := range objs {
			each(o)
		}
		return nil
	}
	if err := list(clusterRoleResource, "", func(o runtime.Object) {
		cr := o.(*rbacv1.ClusterRole)
		p.clusterRoles[cr.Name] = cr
	}); err != nil {
		return nil, err
	}
	if err := list(clusterRoleBindingResource, "", func(o runtime.Object) {
		p.crbs = append(p.crbs, o.(*rbacv1.ClusterRoleBinding))
	}); err != nil {
		return nil, err
	}
	if ns == "" {
		return p, nil
	}
	if err := list(roleResource, ns, func(o runtime.Object) {
		r := o.(*rbacv1.Role)
		p.roles[r.Name] = r
	}); err != nil {
		return nil, err
	}
	if err := list(roleBindingResource, ns, func(o runtime.Object) {
		p.rbs = append(p.rbs, o.(*rbacv1.RoleBinding))
	}); err != nil {
		return nil, err
	}
	return p, nil
}

// decodedCache keeps the RBAC objects the authorizer last decoded, by store
// key with their stored bytes: every request of a ServiceAccount reads the
// policy, and decoding the default roles (edit and admin are long) costs
// milliseconds where comparing bytes costs microseconds. Cached objects are
// shared between requests and never modified.
type decodedCache struct {
	mu       sync.Mutex
	byPrefix map[string]map[string]decodedObject
}

type decodedObject struct {
	raw []byte
	obj runtime.Object
}

// list reads the objects of res under prefix, decoding only those whose
// stored bytes changed since the last read.
func (c *decodedCache) list(st store.Interface, res *resource, prefix string) ([]runtime.Object, error) {
	kvs, _, err := st.List(prefix)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", res.name, err)
	}
	c.mu.Lock()
	old := c.byPrefix[prefix]
	c.mu.Unlock()
	next := make(map[string]decodedObject, len(kvs))
	out := make([]runtime.Object, 0, len(kvs))
	for _, kv := range kvs {
		if e, ok := old[kv.Key]; ok && bytes.Equal(e.raw, kv.Value) {
			next[kv.Key] = e
			out = append(out, e.obj)
			continue
		}
		obj := res.newObj()
		if err := decodeStored(kv.Value, obj); err != nil {
			return nil, fmt.Errorf("decoding stored %s: %w", kv.Key, err)
		}
		next[kv.Key] = decodedObject{raw: kv.Value, obj: obj}
		out = append(out, obj)
	}
	c.mu.Lock()
	if c.byPrefix == nil {
		c.byPrefix = map[string]map[string]decodedObject{}
	}
	if len(next) == 0 {
		delete(c.byPrefix, prefix)
	} else {
		c.byPrefix[prefix] = next
	}
	c.mu.Unlock()
	return out, nil
}

// roleRefRules are the rules of the role ref names, for a binding in ns.
func (p *policy) roleRefRules(ref rbacv1.RoleRef, ns string) ([]rbacv1.PolicyRule, error) {
	switch ref.Kind {
	case "ClusterRole":
		if cr, ok := p.clusterRoles[ref.Name]; ok {
			return cr.Rules, nil
		}
		return nil, apierrors.NewNotFound(clusterRoleResource.gr(), ref.Name)
	case "Role":
		if r, ok := p.roles[ref.Name]; ok && ns == p.ns {
			return r.Rules, nil
		}
		return nil, apierrors.NewNotFound(roleResource.gr(), ref.Name)
	}
	return nil, fmt.Errorf("unsupported role reference kind: %q", ref.Kind)
}

// visitRules calls visit with every rule u holds in the policy's namespace
// (cluster-wide first), and a description of the binding that grants it,
// until visit returns false. It returns the bindings' unresolvable role
// references.
func (p *policy) visitRules(u user.Info, visit func(source string, rule *rbacv1.PolicyRule) bool) []error {
	var errs []error
	for _, b := range p.crbs {
		i, ok := appliesTo(u, b.Subjects, "")
		if !ok {
			continue
		}
		rules, err := p.roleRefRules(b.RoleRef, "")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		src := fmt.Sprintf("ClusterRoleBinding %q of %s %q to %s", b.Name, b.RoleRef.Kind, b.RoleRef.Name, describeSubject(&b.Subjects[i], ""))
		for j := range rules {
			if !visit(src, &rules[j]) {
				return errs
			}
		}
	}
	for _, b := range p.rbs {
		i, ok := appliesTo(u, b.Subjects, b.Namespace)
		if !ok {
			continue
		}
		rules, err := p.roleRefRules(b.RoleRef, b.Namespace)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		src := fmt.Sprintf("RoleBinding %q of %s %q to %s", b.Name+"/"+b.Namespace, b.RoleRef.Kind, b.RoleRef.Name, describeSubject(&b.Subjects[i], b.Namespace))
		for j := range rules {
			if !visit(src, &rules[j]) {
				return errs
			}
		}
	}
	return errs
}

// rulesFor is every rule u holds in the policy's namespace.
func (p *policy) rulesFor(u user.Info) ([]rbacv1.PolicyRule, []error) {
	var out []rbacv1.PolicyRule
	errs := p.visitRules(u, func(_ string, r *rbacv1.PolicyRule) bool {
		out = append(out, *r)
		return true
	})
	return out, errs
}

// allows is the RBAC authorizer's decision on a, with its reason: which
// binding allowed it, or why rules could not be resolved.
func (p *policy) allows(a authorizer.Attributes) (bool, string) {
	allowed, reason := false, ""
	errs := p.visitRules(a.GetUser(), func(src string, r *rbacv1.PolicyRule) bool {
		if ruleAllows(a, r) {
			allowed, reason = true, "RBAC: allowed by "+src
			return false
		}
		return true
	})
	if !allowed && len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		if len(msgs) == 1 {
			reason = "RBAC: " + msgs[0]
		} else {
			reason = "RBAC: [" + strings.Join(msgs, ", ") + "]"
		}
	}
	return allowed, reason
}

func appliesTo(u user.Info, subjects []rbacv1.Subject, ns string) (int, bool) {
	for i, s := range subjects {
		switch s.Kind {
		case rbacv1.UserKind:
			if u.GetName() == s.Name {
				return i, true
			}
		case rbacv1.GroupKind:
			if slices.Contains(u.GetGroups(), s.Name) {
				return i, true
			}
		case rbacv1.ServiceAccountKind:
			saNS := ns
			if s.Namespace != "" {
				saNS = s.Namespace
			}
			if saNS != "" && serviceaccount.MatchesUsername(saNS, s.Name, u.GetName()) {
				return i, true
			}
		}
	}
	return 0, false
}

func describeSubject(s *rbacv1.Subject, bindingNS string) string {
	if s.Kind == rbacv1.ServiceAccountKind {
		ns := s.Namespace
		if ns == "" {
			ns = bindingNS
		}
		return fmt.Sprintf("%s %q", s.Kind, s.Name+"/"+ns)
	}
	return fmt.Sprintf("%s %q", s.Kind, s.Name)
}

// ruleAllows is the RBAC authorizer's RuleAllows: verbs, API groups,
// resources ("*", "resource/subresource", "*/subresource") and resource
// names for resource requests; verbs and non-resource URLs ("*", or a
// prefix ending in "*") for the others.
func ruleAllows(a authorizer.Attributes, r *rbacv1.PolicyRule) bool {
	if !has(r.Verbs, a.GetVerb()) {
		return false
	}
	if !a.IsResourceRequest() {
		for _, u := range r.NonResourceURLs {
			if u == "*" || u == a.GetPath() || (strings.HasSuffix(u, "*") && strings.HasPrefix(a.GetPath(), strings.TrimSuffix(u, "*"))) {
				return true
			}
		}
		return false
	}
	if !has(r.APIGroups, a.GetAPIGroup()) {
		return false
	}
	res, sub := a.GetResource(), a.GetSubresource()
	if sub != "" {
		res += "/" + sub
	}
	resOK := false
	for _, rr := range r.Resources {
		if rr == rbacv1.ResourceAll || rr == res || (sub != "" && rr == "*/"+sub) {
			resOK = true
			break
		}
	}
	return resOK && (len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, a.GetName()))
}

// has reports whether set holds want or "*".
func has(set []string, want string) bool {
	for _, s := range set {
		if s == "*" || s == want {
			return true
		}
	}
	return false
}

// isMaster reports membership of system:masters, which kube-apiserver
// authorizes for everything before RBAC is asked.
func isMaster(u user.Info) bool {
	return u != nil && slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup)
}

// authorize decides a: system:masters always, everyone else by RBAC.
func (s *Server) authorize(a authorizer.Attributes) (bool, string, error) {
	if isMaster(a.GetUser()) {
		return true, "", nil
	}
	p, err := s.loadPolicy(a.GetNamespace())
	if err != nil {
		return false, "", err
	}
	ok, reason := p.allows(a)
	return ok, reason, nil
}

// escalationCheck returns the check a write of res by u must pass before it
// is stored (nil when there is none): u may grant only what it holds, unless
// it may escalate (roles) or bind (bindings). The policy is read here, before
// the write's transaction, for the check to run inside it without reading
// the store.
func (s *Server) escalationCheck(u user.Info, res *resource, ns string) (func(obj, old runtime.Object) error, error) {
	if u == nil || isMaster(u) || res.gv.Group != rbacv1.GroupName {
		return nil, nil
	}
	p, err := s.loadPolicy(ns)
	if err != nil {
		return nil, err
	}
	owner, errs := p.rulesFor(u)
	confirm := func(name string, rules []rbacv1.PolicyRule) error {
		ok, missing := rbacvalidation.Covers(owner, rules)
		if ok {
			return nil
		}
		descs := map[string]bool{}
		for _, m := range compactRules(missing) {
			descs[compactString(m)] = true
		}
		lines := make([]string, 0, len(descs))
		for d := range descs {
			lines = append(lines, d)
		}
		sort.Strings(lines)
		msg := fmt.Sprintf("user %q (groups=%q) is attempting to grant RBAC permissions not currently held:\n%s", u.GetName(), u.GetGroups(), strings.Join(lines, "\n"))
		if len(errs) > 0 {
			msg += fmt.Sprintf("; resolution errors: %v", errs)
		}
		return apierrors.NewForbidden(res.gr(), name, fmt.Errorf("%s", msg))
	}
	allowedTo := func(verb, resource, name string) bool {
		ok, _ := p.allows(authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: rbacv1.GroupName, APIVersion: "*",
			Resource: resource, Name: name, Namespace: ns, ResourceRequest: true})
		return ok
	}
	return func(obj, old runtime.Object) error {
		if old != nil && onlyGCFieldsChanged(obj, old) {
			return nil
		}
		name := metaOf(obj).GetName()
		switch o := obj.(type) {
		case *rbacv1.Role:
			if allowedTo("escalate", "roles", name) {
				return nil
			}
			return confirm(name, o.Rules)
		case *rbacv1.ClusterRole:
			if allowedTo("escalate", "clusterroles", name) {
				return nil
			}
			if err := confirm(name, o.Rules); err != nil {
				return err
			}
			if o.AggregationRule != nil {
				if ok, _ := rbacvalidation.Covers(owner, fullAuthority); !ok {
					return apierrors.NewForbidden(res.gr(), name, fmt.Errorf("must have cluster-admin privileges to use the aggregationRule"))
				}
			}
			return nil
		case *rbacv1.RoleBinding:
			return checkBind(p, o.RoleRef, o.Namespace, name, allowedTo, confirm)
		case *rbacv1.ClusterRoleBinding:
			return checkBind(p, o.RoleRef, "", name, allowedTo, confirm)
		}
		return nil
	}, nil
}

var fullAuthority = []rbacv1.PolicyRule{
	{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}},
	{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}},
}

func checkBind(p *policy, ref rbacv1.RoleRef, ns, name string, allowedTo func(verb, resource, name string) bool, confirm func(string, []rbacv1.PolicyRule) error) error {
	resource := "clusterroles"
	if ref.Kind == "Role" {
		resource = "roles"
	}
	if allowedTo("bind", resource, ref.Name) {
		return nil
	}
	rules, err := p.roleRefRules(ref, ns)
	if err != nil {
		return err
	}
	return confirm(name, rules)
}

// onlyGCFieldsChanged is upstream's IsOnlyMutatingGCFields: a write that
// changes only ownerReferences and finalizers grants nothing.
func onlyGCFieldsChanged(obj, old runtime.Object) bool {
	o, n := old.DeepCopyObject(), obj.DeepCopyObject()
	for _, m := range []metav1.Object{metaOf(o), metaOf(n)} {
		m.SetOwnerReferences(nil)
		m.SetFinalizers(nil)
		m.SetManagedFields(nil)
		m.SetResourceVersion("")
	}
	return apiequality.Semantic.DeepEqual(o, n)
}

// compactRules merges simple rules (one group, one resource, no names)
// that differ only in their verbs, as upstream's CompactRules.
func compactRules(rules []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	type key struct{ group, resource string }
	var out []rbacv1.PolicyRule
	index := map[key]int{}
	for _, r := range rules {
		if len(r.APIGroups) == 1 && len(r.Resources) == 1 && len(r.ResourceNames) == 0 && len(r.NonResourceURLs) == 0 {
			k := key{r.APIGroups[0], r.Resources[0]}
			if i, ok := index[k]; ok {
				for _, v := range r.Verbs {
					if !slices.Contains(out[i].Verbs, v) {
						out[i].Verbs = append(out[i].Verbs, v)
					}
				}
				continue
			}
			index[k] = len(out)
		}
		out = append(out, *r.DeepCopy())
	}
	return out
}

// compactString is upstream's CompactString of a rule.
func compactString(r rbacv1.PolicyRule) string {
	var parts []string
	add := func(name string, v []string) {
		if len(v) > 0 {
			parts = append(parts, fmt.Sprintf("%s:%q", name, v))
		}
	}
	add("APIGroups", r.APIGroups)
	add("Resources", r.Resources)
	add("NonResourceURLs", r.NonResourceURLs)
	add("ResourceNames", r.ResourceNames)
	add("Verbs", r.Verbs)
	return "{" + strings.Join(parts, ", ") + "}"
}

// aggregateClusterRoles recomputes, inside tx, the rules of every ClusterRole
// with an aggregationRule after changed is written (or deleted), as the
// clusterrole-aggregation controller: the rules of the ClusterRoles each
// selector matches, in name order, without duplicates. Aggregated roles can
// be selected themselves (edit is part of admin), so it repeats until nothing
// changes. changed's own rules are set in place; the others are written.
func (s *Server) aggregateClusterRoles(tx store.Tx, changed *rbacv1.ClusterRole, deleted bool) error {
	roles := map[string]*rbacv1.ClusterRole{}
	for _, kv := range tx.List(clusterRoleResource.prefix("")) {
		var cr rbacv1.ClusterRole
		if err := decodeStored(kv.Value, &cr); err != nil {
			return fmt.Errorf("decoding stored %s: %w", kv.Key, err)
		}
		roles[cr.Name] = &cr
	}
	if deleted {
		delete(roles, changed.Name)
	} else {
		roles[changed.Name] = changed
	}
	names := make([]string, 0, len(roles))
	for n := range roles {
		names = append(names, n)
	}
	sort.Strings(names)
	dirty := map[string]bool{}
	for range len(names) + 1 {
		progress := false
		for _, n := range names {
			cr := roles[n]
			if cr.AggregationRule == nil {
				continue
			}
			rules := aggregatedRules(cr, names, roles)
			if len(rules) == 0 && len(cr.Rules) == 0 || apiequality.Semantic.DeepEqual(rules, cr.Rules) {
				continue
			}
			cr.Rules, dirty[n], progress = rules, true, true
		}
		if !progress {
			break
		}
	}
	for n := range dirty {
		if n == changed.Name {
			continue // the caller writes it
		}
		if err := s.put(tx, clusterRoleResource, clusterRoleResource.key("", n), roles[n]); err != nil {
			return err
		}
	}
	return nil
}

func aggregatedRules(cr *rbacv1.ClusterRole, names []string, roles map[string]*rbacv1.ClusterRole) []rbacv1.PolicyRule {
	var rules []rbacv1.PolicyRule
	for _, sel := range cr.AggregationRule.ClusterRoleSelectors {
		selector, err := metav1.LabelSelectorAsSelector(&sel)
		if err != nil {
			continue
		}
		for _, n := range names {
			other := roles[n]
			if n == cr.Name || !selector.Matches(labels.Set(other.Labels)) {
				continue
			}
			for _, r := range other.Rules {
				if !slices.ContainsFunc(rules, func(x rbacv1.PolicyRule) bool { return apiequality.Semantic.DeepEqual(x, r) }) {
					rules = append(rules, *r.DeepCopy())
				}
			}
		}
	}
	return rules
}

// The bootstrap policy: upstream's own testdata of
// plugin/pkg/auth/authorizer/rbac/bootstrappolicy (k8s.io/kubernetes
// v1.37.2), verbatim. minikit creates the roles that concern what it serves
// or that install manifests commonly bind, and the bindings of those.
var (
	//go:embed rbacdefaults/cluster-roles.yaml
	defaultClusterRolesYAML []byte
	//go:embed rbacdefaults/cluster-role-bindings.yaml
	defaultClusterRoleBindingsYAML []byte
)

var defaultClusterRoleNames = map[string]bool{
	"cluster-admin": true, "admin": true, "edit": true, "view": true,
	"system:aggregate-to-admin": true, "system:aggregate-to-edit": true, "system:aggregate-to-view": true,
	"system:discovery": true, "system:basic-user": true, "system:public-info-viewer": true,
	"system:monitoring": true, "system:auth-delegator": true, "system:service-account-issuer-discovery": true,
}

// defaultRBAC is the default ClusterRoles and ClusterRoleBindings.
func defaultRBAC() ([]*rbacv1.ClusterRole, []*rbacv1.ClusterRoleBinding, error) {
	var roles struct{ Items []*rbacv1.ClusterRole }
	var bindings struct{ Items []*rbacv1.ClusterRoleBinding }
	if err := yaml.Unmarshal(defaultClusterRolesYAML, &roles); err != nil {
		return nil, nil, fmt.Errorf("decoding the default cluster roles: %w", err)
	}
	if err := yaml.Unmarshal(defaultClusterRoleBindingsYAML, &bindings); err != nil {
		return nil, nil, fmt.Errorf("decoding the default cluster role bindings: %w", err)
	}
	var crs []*rbacv1.ClusterRole
	for _, r := range roles.Items {
		if defaultClusterRoleNames[r.Name] {
			r.Kind, r.APIVersion = "", ""
			crs = append(crs, r)
		}
	}
	var crbs []*rbacv1.ClusterRoleBinding
	for _, b := range bindings.Items {
		if defaultClusterRoleNames[b.RoleRef.Name] {
			b.Kind, b.APIVersion = "", ""
			crbs = append(crbs, b)
		}
	}
	return crs, crbs, nil
}

// ensureDefaultRBAC creates the default ClusterRoles and ClusterRoleBindings,
// and reconciles those that exist and keep the
// rbac.authorization.kubernetes.io/autoupdate: "true" annotation as
// kube-apiserver does at every start: missing rules, aggregation selectors
// and subjects are added, nothing is removed (an administrator's additions
// stay). Setting the annotation to "false" keeps one as it is.
func (s *Server) ensureDefaultRBAC() error {
	crs, crbs, err := defaultRBAC()
	if err != nil {
		return err
	}
	for _, want := range crs {
		_, err := s.Create(clusterRoleResource, "", want.DeepCopy())
		if apierrors.IsAlreadyExists(err) {
			_, err = s.Update(clusterRoleResource, "", want.Name, "", func(cur runtime.Object) (runtime.Object, error) {
				cr := cur.(*rbacv1.ClusterRole)
				if cr.Annotations[autoupdateAnnotation] != "true" {
					return cr, nil
				}
				if want.AggregationRule != nil {
					if cr.AggregationRule == nil {
						cr.AggregationRule = &rbacv1.AggregationRule{}
					}
					for _, sel := range want.AggregationRule.ClusterRoleSelectors {
						if !slices.ContainsFunc(cr.AggregationRule.ClusterRoleSelectors, func(x metav1.LabelSelector) bool { return apiequality.Semantic.DeepEqual(x, sel) }) {
							cr.AggregationRule.ClusterRoleSelectors = append(cr.AggregationRule.ClusterRoleSelectors, sel)
						}
					}
					return cr, nil // the rules are the aggregation's
				}
				if ok, missing := rbacvalidation.Covers(cr.Rules, want.Rules); !ok {
					cr.Rules = append(cr.Rules, compactRules(missing)...)
				}
				return cr, nil
			})
		}
		if err != nil {
			return fmt.Errorf("reconciling clusterrole %s: %w", want.Name, err)
		}
	}
	for _, want := range crbs {
		_, err := s.Create(clusterRoleBindingResource, "", want.DeepCopy())
		if apierrors.IsAlreadyExists(err) {
			_, err = s.Update(clusterRoleBindingResource, "", want.Name, "", func(cur runtime.Object) (runtime.Object, error) {
				b := cur.(*rbacv1.ClusterRoleBinding)
				if b.Annotations[autoupdateAnnotation] != "true" || b.RoleRef != want.RoleRef {
					// A binding's roleRef cannot change; kube-apiserver
					// would recreate it, minikit leaves it.
					return b, nil
				}
				for _, sub := range want.Subjects {
					if !slices.Contains(b.Subjects, sub) {
						b.Subjects = append(b.Subjects, sub)
					}
				}
				return b, nil
			})
		}
		if err != nil {
			return fmt.Errorf("reconciling clusterrolebinding %s: %w", want.Name, err)
		}
	}
	return nil
}

const autoupdateAnnotation = "rbac.authorization.kubernetes.io/autoupdate"
