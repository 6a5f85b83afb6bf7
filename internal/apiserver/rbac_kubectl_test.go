package apiserver

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kubectlWithToken is kubectl authenticating with a bearer token. kubectl
// sends tokens only over TLS, so it talks to a's server through a TLS
// listener of its own (certificate not verified), closed with the test.
func kubectlWithToken(t *testing.T, a *testAPI, token string) kubectlCLI {
	t.Helper()
	hs := httptest.NewTLSServer(a.srv.Handler())
	t.Cleanup(hs.Close)
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    insecure-skip-tls-verify: true
contexts:
- name: test
  context:
    cluster: test
    user: test
    namespace: default
users:
- name: test
  user:
    token: %s
current-context: test
`, hs.URL, token)
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubectlCLI{bin: kubectlBinaries(t)[0], kubeconfig: kc, cache: filepath.Join(dir, "cache")}
}

// installManifest is what a controller's install YAML carries: its
// namespace, ServiceAccount, RBAC, CRD and Deployment.
const installManifest = `apiVersion: v1
kind: Namespace
metadata:
  name: widget-system
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: widget-controller
  namespace: widget-system
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  names: {kind: Gadget, listKind: GadgetList, plural: gadgets, singular: gadget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
    subresources: {status: {}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: widget-manager
rules:
- apiGroups: ["example.com"]
  resources: ["gadgets"]
  verbs: ["get", "list", "watch", "update", "patch"]
- apiGroups: ["example.com"]
  resources: ["gadgets/status"]
  verbs: ["get", "update", "patch"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "update", "delete"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: widget-manager
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: widget-manager
subjects:
- kind: ServiceAccount
  name: widget-controller
  namespace: widget-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: leader-election
  namespace: widget-system
rules:
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: leader-election
  namespace: widget-system
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: leader-election
subjects:
- kind: ServiceAccount
  name: widget-controller
  namespace: widget-system
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: widget-controller
  namespace: widget-system
spec:
  replicas: 1
  selector:
    matchLabels: {app: widget-controller}
  template:
    metadata:
      labels: {app: widget-controller}
    spec:
      serviceAccountName: widget-controller
      containers:
      - name: manager
        image: example.com/widget-controller:v1
`

// The real kubectl applies an install manifest with RBAC, a CRD and a
// Deployment; can-i, can-i --list, --as and whoami answer as on a cluster;
// an account without a binding gets kube-apiserver's 403, then succeeds once
// bound.
func TestKubectlRBAC(t *testing.T) {
	a := newTestAPI(t)
	k := newKubectlCLI(t, a, kubectlBinaries(t)[0])
	run := func(args ...string) (string, string, error) {
		t.Helper()
		return k.run(t, args...)
	}
	must := func(args ...string) string {
		t.Helper()
		out, errOut, err := run(args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
		}
		return out
	}
	file := filepath.Join(t.TempDir(), "install.yaml")
	if err := os.WriteFile(file, []byte(installManifest), 0o600); err != nil {
		t.Fatal(err)
	}
	out := must("apply", "-f", file)
	for _, want := range []string{
		"namespace/widget-system created", "serviceaccount/widget-controller created",
		"customresourcedefinition.apiextensions.k8s.io/gadgets.example.com created",
		"clusterrole.rbac.authorization.k8s.io/widget-manager created",
		"clusterrolebinding.rbac.authorization.k8s.io/widget-manager created",
		"role.rbac.authorization.k8s.io/leader-election created",
		"rolebinding.rbac.authorization.k8s.io/leader-election created",
		"deployment.apps/widget-controller created",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl apply output lacks %q:\n%s", want, out)
		}
	}
	// Applying again changes nothing.
	if out := must("apply", "-f", file); strings.Count(out, "unchanged") != 8 {
		t.Errorf("second apply:\n%s", out)
	}
	if out := must("get", "clusterroles", "view", "edit", "admin", "cluster-admin", "-o", "name"); strings.Count(out, "clusterrole.rbac.authorization.k8s.io/") != 4 {
		t.Errorf("default cluster roles:\n%s", out)
	}

	if out := words(must("get", "rolebindings", "-n", "widget-system", "-o", "wide")); !strings.Contains(out,
		"NAME ROLE AGE USERS GROUPS SERVICEACCOUNTS leader-election Role/leader-election") || !strings.Contains(out, "widget-system/widget-controller") {
		t.Errorf("kubectl get rolebindings -o wide:\n%s", out)
	}
	if out := words(must("get", "clusterroles", "widget-manager")); !strings.HasPrefix(out, "NAME CREATED AT widget-manager ") {
		t.Errorf("kubectl get clusterroles:\n%s", out)
	}
	ctl := kubectlWithToken(t, a, a.saToken("widget-system", "widget-controller"))
	runAs := func(k kubectlCLI, args ...string) (string, string, error) {
		t.Helper()
		return k.run(t, args...)
	}
	mustAs := func(k kubectlCLI, args ...string) string {
		t.Helper()
		out, errOut, err := k.run(t, args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
		}
		return out
	}
	for _, c := range []struct {
		k    kubectlCLI
		args []string
		want string
	}{
		{ctl, []string{"auth", "can-i", "create", "leases.coordination.k8s.io", "-n", "widget-system"}, "yes"},
		{ctl, []string{"auth", "can-i", "create", "leases.coordination.k8s.io", "-n", "default"}, "no"},
		{ctl, []string{"auth", "can-i", "patch", "gadgets.example.com/status", "-A"}, "yes"},
		{ctl, []string{"auth", "can-i", "delete", "gadgets.example.com", "-n", "widget-system"}, "no"},
		{ctl, []string{"auth", "can-i", "create", "services", "-n", "default"}, "yes"},
		{ctl, []string{"auth", "can-i", "create", "pods"}, "no"},
		{k, []string{"auth", "can-i", "create", "services", "--as", "system:serviceaccount:widget-system:widget-controller"}, "yes"},
		{k, []string{"auth", "can-i", "create", "pods", "--as", "system:serviceaccount:widget-system:widget-controller"}, "no"},
		{k, []string{"auth", "can-i", "*", "*"}, "yes"},
	} {
		out, errOut, _ := runAs(c.k, c.args...)
		if strings.TrimSpace(out) != c.want {
			t.Errorf("kubectl %s = %q, want %q (stderr %s)", strings.Join(c.args, " "), out, c.want, errOut)
		}
	}
	list := words(mustAs(ctl, "auth", "can-i", "--list", "-n", "widget-system"))
	for _, want := range []string{
		"leases.coordination.k8s.io [] [] [get list watch create update patch delete]",
		"gadgets.example.com/status [] [] [get update patch]",
		"selfsubjectaccessreviews.authorization.k8s.io [] [] [create]",
		"[/api/*] [] [get]",
	} {
		if !strings.Contains(list, want) {
			t.Errorf("can-i --list lacks %q:\n%s", want, list)
		}
	}
	who := words(mustAs(ctl, "auth", "whoami"))
	for _, want := range []string{"Username system:serviceaccount:widget-system:widget-controller",
		"Groups [system:serviceaccounts system:serviceaccounts:widget-system system:authenticated]"} {
		if !strings.Contains(who, want) {
			t.Errorf("whoami lacks %q:\n%s", want, who)
		}
	}
	if who := words(must("auth", "whoami")); !strings.Contains(who, "Username kubernetes-admin") || !strings.Contains(who, "system:masters") {
		t.Errorf("admin whoami:\n%s", who)
	}

	// No binding: 403 with the server's wording; bound to view: allowed.
	unbound := kubectlWithToken(t, a, a.saToken("widget-system", "unbound"))
	_, errOut, err := runAs(unbound, "get", "configmaps", "-n", "widget-system")
	if want := `Error from server (Forbidden): configmaps is forbidden: User "system:serviceaccount:widget-system:unbound" cannot list resource "configmaps" in API group "" in the namespace "widget-system"`; err == nil || !strings.Contains(errOut, want) {
		t.Errorf("unbound get configmaps: %v\n%s\nwant %s", err, errOut, want)
	}
	must("create", "configmap", "settings", "-n", "widget-system", "--from-literal=a=b")
	must("create", "rolebinding", "unbound-view", "-n", "widget-system", "--clusterrole=view", "--serviceaccount=widget-system:unbound")
	if out := mustAs(unbound, "get", "configmaps", "-n", "widget-system", "-o", "name"); !strings.Contains(out, "configmap/settings") {
		t.Errorf("bound get configmaps:\n%s", out)
	}
}
