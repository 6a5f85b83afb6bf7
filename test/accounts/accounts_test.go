// Package accounts_test checks service accounts and namespace deletion end to
// end in a lab: a client-go program in a pod works with rest.InClusterConfig
// and its token reads once RBAC grants it (the 403 before is kube-apiserver's)
// but cannot write; a controller's install manifest (ServiceAccount, CRD,
// ClusterRole, Deployment) applies with kubectl, and its pod is refused with
// the server's words until the ClusterRoleBinding is applied; kubectl delete ns stops the
// namespace's pods on their nodes before the namespace goes; and a server
// killed with SIGKILL in the middle of a namespace deletion finishes it after
// restart.
package accounts_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/cni"
	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

var ctx = context.Background()

func sleeper(name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "infinity"}}}}}
}

func createNS(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// startPods creates one sleeper per node in ns and returns them Ready with
// their sandboxes.
func startPods(t *testing.T, c kubernetes.Interface, ns string, nodes ...string) map[string]string {
	t.Helper()
	sandboxes := map[string]string{}
	for i, n := range nodes {
		p := sleeper(fmt.Sprintf("s%d", i), n)
		if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		ready := testenv.WaitPodReady(t, c, ns, p.Name)
		sb := testenv.SandboxName(t, c, ready)
		if !netns.ExistsNamed(sb) {
			t.Fatalf("pod %s/%s has no netns %s", ns, p.Name, sb)
		}
		sandboxes[ns+"/"+p.Name] = sb
	}
	return sandboxes
}

// gone checks that the namespace and everything of it is gone, on the API
// and on the nodes.
func gone(c kubernetes.Interface, ns string, sandboxes map[string]string) error {
	if _, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		return fmt.Errorf("namespace %s still there (%v)", ns, err)
	}
	for pod, sb := range sandboxes {
		if netns.ExistsNamed(sb) {
			return fmt.Errorf("netns %s of pod %s still exists", sb, pod)
		}
		if _, err := os.Stat(filepath.Join(cni.PodNSDir, sb)); !os.IsNotExist(err) {
			return fmt.Errorf("mount and UTS namespaces of pod %s still pinned", pod)
		}
	}
	return nil
}

func TestAccountsAndNamespaces(t *testing.T) {
	testenv.RequireRoot(t)
	bin := filepath.Join(t.TempDir(), "incluster")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/incluster").CombinedOutput(); err != nil {
		t.Fatalf("building the in-cluster program: %v: %s", err, out)
	}
	lister := filepath.Join(t.TempDir(), "lister")
	if out, err := exec.Command("go", "build", "-o", lister, "./testdata/lister").CombinedOutput(); err != nil {
		t.Fatalf("building the lister: %v: %s", err, out)
	}
	l := testenv.NewLab(t, 2)
	c := testenv.Client(t, l)

	t.Run("a pod has its service account files and the kubernetes service env", func(t *testing.T) {
		p := sleeper("files", "node2")
		p.Spec.Containers[0].Command = []string{"sh", "-c", "env | grep ^KUBERNETES_ | sort; exec sleep infinity"}
		if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		testenv.WaitPodReady(t, c, "default", p.Name)
		const dir = "/var/run/secrets/kubernetes.io/serviceaccount"
		if out, err := testenv.Exec(t, l, "files", "ls", dir); err != nil || strings.Fields(out) == nil || strings.Join(strings.Fields(out), " ") != "ca.crt namespace token" {
			t.Errorf("ls %s in the pod: %v: %q, want ca.crt namespace token", dir, err, out)
		}
		if out, err := testenv.Exec(t, l, "files", "cat", dir+"/namespace"); err != nil || out != "default" {
			t.Errorf("namespace file: %v: %q", err, out)
		}
		if out, err := testenv.Exec(t, l, "files", "head", "-c", "27", dir+"/ca.crt"); err != nil || out != "-----BEGIN CERTIFICATE-----" {
			t.Errorf("ca.crt: %v: %q", err, out)
		}
		wantEnv := strings.Join([]string{
			"KUBERNETES_PORT=tcp://10.96.0.1:443",
			"KUBERNETES_PORT_443_TCP=tcp://10.96.0.1:443",
			"KUBERNETES_PORT_443_TCP_ADDR=10.96.0.1",
			"KUBERNETES_PORT_443_TCP_PORT=443",
			"KUBERNETES_PORT_443_TCP_PROTO=tcp",
			"KUBERNETES_SERVICE_HOST=10.96.0.1",
			"KUBERNETES_SERVICE_PORT=443",
			"KUBERNETES_SERVICE_PORT_HTTPS=443",
		}, "\n") + "\n"
		testutil.Eventually(t, 10*time.Second, "the container's KUBERNETES_ environment in its log", func() error {
			b, err := c.CoreV1().Pods("default").GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			if err != nil {
				return err
			}
			if string(b) != wantEnv {
				return fmt.Errorf("log %q, want %q", b, wantEnv)
			}
			return nil
		})
		// kubectl exec gets the container's environment, as a runtime's exec does.
		out, err := exec.Command("kubectl", "--kubeconfig", l.Kubeconfig(), "exec", "files", "--",
			"sh", "-c", "env | grep ^KUBERNETES_ | sort").CombinedOutput()
		if err != nil || string(out) != wantEnv {
			t.Errorf("kubectl exec files -- env: %v: %q, want %q", err, out, wantEnv)
		}
		if _, err := os.Stat(dir + "/token"); err == nil {
			t.Errorf("%s/token is visible on the node, outside the pod", dir)
		}
	})

	t.Run("an in-cluster client-go program lists services once bound and may not create one", func(t *testing.T) {
		// Once through the kubernetes Service (10.96.0.1:443, kube-proxy's
		// rules to the server), once at the server's own address (the
		// container's env overrides the injected one, as in Kubernetes).
		// A pod may start before its node's proxy has programmed the Service
		// (as on a real cluster, where the kubelet does not wait for
		// kube-proxy): wait for node2's DNAT to the server first.
		dnat := "--to-destination " + l.Addr("node1").String() + ":6443"
		testutil.Eventually(t, 30*time.Second, "node2's DNAT of 10.96.0.1:443 to the API server", func() error {
			out, err := testenv.Run(l, "node2", "iptables-save", "-t", "nat")
			if err != nil {
				return err
			}
			if !strings.Contains(out, dnat) {
				return fmt.Errorf("no rule with %q", dnat)
			}
			return nil
		})
		// The default account has only what RBAC's defaults give every
		// authenticated user: the list is refused with the server's words.
		runInCluster(t, c, bin, "incluster-unbound", "https://10.96.0.1:443", nil,
			`list: services is forbidden: User "system:serviceaccount:default:default" cannot list resource "services" in API group "" in the namespace "default"`)
		if _, err := c.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "default-view"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "default"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			pod, host string
			env       []corev1.EnvVar
		}{
			{"incluster-vip", "https://10.96.0.1:443", nil},
			{"incluster-direct", "https://" + l.Addr("node1").String() + ":6443",
				[]corev1.EnvVar{{Name: "KUBERNETES_SERVICE_HOST", Value: l.Addr("node1").String()}, {Name: "KUBERNETES_SERVICE_PORT", Value: "6443"}}},
		} {
			runInCluster(t, c, bin, tc.pod, tc.host, tc.env, "listed services: kubernetes")
		}
	})

	t.Run("an install manifest applies; its controller is refused until its ClusterRoleBinding is applied", func(t *testing.T) {
		kubectl := func(stdin string, args ...string) string {
			t.Helper()
			cmd := exec.Command("kubectl", append([]string{"--kubeconfig", l.Kubeconfig()}, args...)...)
			cmd.Stdin = strings.NewReader(stdin)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
			}
			return string(out)
		}
		// What a controller's install YAML carries: its namespace,
		// ServiceAccount, CRD, ClusterRole and Deployment; the binding comes
		// in a second file, applied later.
		out := kubectl(fmt.Sprintf(widgetInstall, lister), "apply", "-f", "-")
		for _, want := range []string{"namespace/widget-system created", "serviceaccount/widget-controller created",
			"customresourcedefinition.apiextensions.k8s.io/widgets.example.com created",
			"clusterrole.rbac.authorization.k8s.io/widget-controller created", "deployment.apps/widget-controller created"} {
			if !strings.Contains(out, want) {
				t.Errorf("kubectl apply said %q, want %q", out, want)
			}
		}
		kubectl("", "wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=30s")
		kubectl("apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\n  namespace: widget-system\n", "apply", "-f", "-")
		logs := func(want string) {
			t.Helper()
			testutil.Eventually(t, 90*time.Second, "the controller's log to say "+want, func() error {
				pods, err := c.CoreV1().Pods("widget-system").List(ctx, metav1.ListOptions{LabelSelector: "app=widget-controller"})
				if err != nil || len(pods.Items) != 1 {
					return fmt.Errorf("controller pods: %v (%d)", err, len(pods.Items))
				}
				b, err := c.CoreV1().Pods("widget-system").GetLogs(pods.Items[0].Name, &corev1.PodLogOptions{}).DoRaw(ctx)
				if err != nil {
					return err
				}
				if !strings.Contains(string(b), want) {
					return fmt.Errorf("log %q", b)
				}
				return nil
			})
		}
		logs(`list: widgets.example.com is forbidden: User "system:serviceaccount:widget-system:widget-controller" cannot list resource "widgets" in API group "example.com" at the cluster scope`)
		kubectl(widgetBinding, "apply", "-f", "-")
		logs("listed widgets: widget-system/w1")
		// The namespace's deletion may take the Deployment before kubectl
		// names it: gone is what is wanted.
		kubectl(fmt.Sprintf(widgetInstall, lister)+"---\n"+widgetBinding, "delete", "-f", "-", "--ignore-not-found", "--timeout=90s")
	})

	t.Run("new namespaces get their default account and kube-root-ca.crt", func(t *testing.T) {
		createNS(t, c, "fresh")
		testutil.Eventually(t, 10*time.Second, "default ServiceAccount and kube-root-ca.crt in fresh", func() error {
			if _, err := c.CoreV1().ServiceAccounts("fresh").Get(ctx, "default", metav1.GetOptions{}); err != nil {
				return err
			}
			cm, err := c.CoreV1().ConfigMaps("fresh").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !strings.HasPrefix(cm.Data["ca.crt"], "-----BEGIN CERTIFICATE-----") {
				return fmt.Errorf("ca.crt = %q", cm.Data["ca.crt"])
			}
			return nil
		})
		testutil.Eventually(t, 30*time.Second, "node leases renewed by their agents", func() error {
			for _, n := range []string{"node1", "node2"} {
				lease, err := c.CoordinationV1().Leases("kube-node-lease").Get(ctx, n, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != n || lease.Spec.RenewTime == nil ||
					time.Since(lease.Spec.RenewTime.Time) > 40*time.Second {
					return fmt.Errorf("lease %s: %+v", n, lease.Spec)
				}
			}
			return nil
		})
	})

	t.Run("kubectl delete ns stops the namespace's pods on their nodes, then removes it", func(t *testing.T) {
		createNS(t, c, "doomed")
		sandboxes := startPods(t, c, "doomed", "node1", "node2")
		out, err := exec.Command("kubectl", "--kubeconfig", l.Kubeconfig(), "delete", "ns", "doomed", "--timeout=90s").CombinedOutput()
		if err != nil || !strings.Contains(string(out), `namespace "doomed" deleted`) {
			t.Fatalf("kubectl delete ns: %v: %s", err, out)
		}
		// kubectl returned once the namespace was gone; so are the pods.
		if err := gone(c, "doomed", sandboxes); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a server killed during a namespace deletion finishes it after restart", func(t *testing.T) {
		createNS(t, c, "crash")
		sandboxes := startPods(t, c, "crash", "node1", "node2")
		for i := range 5 {
			if _, err := c.CoreV1().ConfigMaps("crash").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm%d", i)}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		// A finalizer holds the deletion open, so the kill lands in it.
		if _, err := c.CoreV1().ConfigMaps("crash").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held",
			Finalizers: []string{"example.com/hold"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := c.CoreV1().Namespaces().Delete(ctx, "crash", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := l.Stop("node1", syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if err := l.Start("node1"); err != nil {
			t.Fatal(err)
		}
		if err := l.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 90*time.Second, "the pods and the content gone, the held configmap left", func() error {
			ns, err := c.CoreV1().Namespaces().Get(ctx, "crash", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if ns.Status.Phase != corev1.NamespaceTerminating {
				return fmt.Errorf("namespace is %s", ns.Status.Phase)
			}
			cms, err := c.CoreV1().ConfigMaps("crash").List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			if len(cms.Items) != 1 || cms.Items[0].Name != "held" {
				return fmt.Errorf("%d configmaps left", len(cms.Items))
			}
			for pod, sb := range sandboxes {
				if netns.ExistsNamed(sb) {
					return fmt.Errorf("netns %s of pod %s still exists", sb, pod)
				}
			}
			for _, cond := range ns.Status.Conditions {
				if cond.Type == corev1.NamespaceFinalizersRemaining && cond.Status == corev1.ConditionTrue {
					return nil
				}
			}
			return fmt.Errorf("no NamespaceFinalizersRemaining condition: %+v", ns.Status.Conditions)
		})
		if _, err := c.CoreV1().ConfigMaps("crash").Patch(ctx, "held", "application/merge-patch+json",
			[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 30*time.Second, "namespace crash gone", func() error { return gone(c, "crash", sandboxes) })
		// Nothing of the old namespace survives into a new one of the same name.
		createNS(t, c, "crash")
		cms, err := c.CoreV1().ConfigMaps("crash").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods, err := c.CoreV1().Pods("crash").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, cm := range cms.Items {
			if cm.Name != "kube-root-ca.crt" {
				t.Errorf("configmap %s of the deleted namespace survived", cm.Name)
			}
		}
		if len(pods.Items) != 0 {
			t.Errorf("%d pods of the deleted namespace survived", len(pods.Items))
		}
	})
}

// runInCluster runs the in-cluster program in a pod on node2 and checks what
// it printed: list is what its list of services gives.
// widgetInstall is a controller's install manifest (%q: the controller's
// program on the node); widgetBinding grants its ServiceAccount the
// ClusterRole.
const widgetInstall = `apiVersion: v1
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
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: widget-controller
rules:
- apiGroups: [example.com]
  resources: [widgets]
  verbs: [get, list, watch]
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
        image: busybox
        command: [%q, example.com, v1, widgets]
`

const widgetBinding = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: widget-controller
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: widget-controller
subjects:
- kind: ServiceAccount
  name: widget-controller
  namespace: widget-system
`

func runInCluster(t *testing.T, c kubernetes.Interface, bin, name, host string, env []corev1.EnvVar, list string) {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: "node2", RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{bin}, Env: env}}}}
	if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var phase corev1.PodPhase
	testutil.Eventually(t, 60*time.Second, "the in-cluster program to finish", func() error {
		got, err := c.CoreV1().Pods("default").Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		phase = got.Status.Phase
		if phase != corev1.PodSucceeded && phase != corev1.PodFailed {
			return fmt.Errorf("phase %s", phase)
		}
		return nil
	})
	b, err := c.CoreV1().Pods("default").GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	logs := string(b)
	if phase != corev1.PodSucceeded {
		t.Fatalf("the in-cluster program in %s failed:\n%s", name, logs)
	}
	for _, want := range []string{
		"host: " + host,
		"KUBERNETES_PORT_443_TCP_ADDR: 10.96.0.1",
		list,
		`create: services is forbidden: User "system:serviceaccount:default:default" cannot create resource "services" in API group "" in the namespace "default"`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("%s: program output lacks %q:\n%s", name, want, logs)
		}
	}
	if _, err := c.CoreV1().Services("default").Get(ctx, "from-pod", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the pod's create went through: %v", err)
	}
}
