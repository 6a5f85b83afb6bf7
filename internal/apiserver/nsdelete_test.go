package apiserver

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/testutil"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func nsCondition(n *corev1.Namespace, t corev1.NamespaceConditionType) corev1.NamespaceCondition {
	for _, c := range n.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return corev1.NamespaceCondition{}
}

// Deleting a namespace: Terminating with the kubernetes finalizer, content
// deleted (pods gracefully, objects with finalizers held), progress in the
// status conditions, nothing new admitted, and — across a server restart in
// the middle — the namespace goes once its last object has.
func TestNamespaceDeletionConditionsAndRestart(t *testing.T) {
	a := newTestAPI(t)
	a.create(nodesPath, newNode("n1"))
	a.create(namespacesPath, newNamespace("doomed"))
	base := "/api/v1/namespaces/doomed"
	a.create(base+"/configmaps", newConfigMap("plain", nil))
	held := newConfigMap("held", nil)
	held.Finalizers = []string{"example.com/hold"}
	a.create(base+"/configmaps", held)
	a.create(base+"/services", newService("web"))
	a.create(base+"/pods", newPod("web-0", "n1", nil))

	var ns corev1.Namespace
	a.delete(base).mustCode(t, http.StatusOK, &ns)
	if ns.Status.Phase != corev1.NamespaceTerminating || ns.DeletionTimestamp == nil ||
		!slices.Equal(ns.Spec.Finalizers, []corev1.FinalizerName{corev1.FinalizerKubernetes}) {
		t.Fatalf("deleted namespace: phase %s, deletionTimestamp %v, finalizers %v", ns.Status.Phase, ns.DeletionTimestamp, ns.Spec.Finalizers)
	}
	testutil.Eventually(t, waitTimeout, "content deleted but the terminating pod and the held configmap", func() error {
		a.read(base, &ns)
		for _, p := range []string{base + "/configmaps/plain", base + "/services/web", base + "/serviceaccounts/default"} {
			if a.exists(p) {
				return fmt.Errorf("%s still exists", p)
			}
		}
		c := nsCondition(&ns, corev1.NamespaceContentRemaining)
		if c.Status != corev1.ConditionTrue || c.Message != "Some resources are remaining: configmaps has 1 resource instances, pods has 1 resource instances" {
			return fmt.Errorf("content remaining condition %+v", c)
		}
		f := nsCondition(&ns, corev1.NamespaceFinalizersRemaining)
		if f.Status != corev1.ConditionTrue || f.Message != "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances" {
			return fmt.Errorf("finalizers remaining condition %+v", f)
		}
		return nil
	})
	if c := nsCondition(&ns, corev1.NamespaceDeletionContentFailure); c.Status != corev1.ConditionFalse || c.Reason != "ContentDeleted" {
		t.Errorf("content failure condition = %+v", c)
	}
	var pod corev1.Pod
	a.read(base+"/pods/web-0", &pod)
	if pod.DeletionTimestamp == nil || *pod.DeletionGracePeriodSeconds != 30 {
		t.Errorf("pod not terminating gracefully: %v %v", pod.DeletionTimestamp, pod.DeletionGracePeriodSeconds)
	}
	st := a.post(base+"/configmaps", newConfigMap("late", nil)).wantStatus(t, http.StatusForbidden, metav1.StatusReasonForbidden,
		"unable to create new content in namespace doomed because it is being terminated")
	if st.Details == nil || len(st.Details.Causes) == 0 || st.Details.Causes[0].Type != corev1.NamespaceTerminatingCause {
		t.Errorf("refusal has no NamespaceTerminating cause: %+v", st.Details)
	}

	// kill -9 equivalent for the deletion: a new server on the same store.
	a.close()
	a = newTestAPIWith(t, apiOptions{dbPath: a.dbPath})
	a.read(base, &ns)
	if ns.Status.Phase != corev1.NamespaceTerminating {
		t.Fatalf("after restart the namespace is %s", ns.Status.Phase)
	}
	// The node agent has stopped the pod; the finalizer's owner lets go.
	a.do(http.MethodDelete, base+"/pods/web-0?gracePeriodSeconds=0", "", nil).mustCode(t, http.StatusOK, nil)
	a.patch(base+"/configmaps/held", "application/merge-patch+json", `{"metadata":{"finalizers":null}}`).mustCode(t, http.StatusOK, nil)
	testutil.Eventually(t, waitTimeout, "namespace gone", a.gone(base))
	// The name can be used again, with a fresh default account.
	a.create(namespacesPath, newNamespace("doomed"))
	if !a.exists(base + "/serviceaccounts/default") {
		t.Error("recreated namespace has no default ServiceAccount")
	}
}

// A finalizer of someone else's in spec.finalizers keeps the emptied
// namespace until it is removed through the finalize subresource.
func TestNamespaceFinalizeSubresource(t *testing.T) {
	a := newTestAPI(t)
	ns := newNamespace("kept")
	ns.Spec.Finalizers = []corev1.FinalizerName{corev1.FinalizerKubernetes, "example.com/cleanup"}
	a.create(namespacesPath, ns)
	// A plain update cannot change spec.finalizers.
	ns.Spec.Finalizers = nil
	a.put(namespacesPath+"/kept", ns).mustCode(t, http.StatusOK, ns)
	if len(ns.Spec.Finalizers) != 2 {
		t.Fatalf("PUT changed spec.finalizers to %v", ns.Spec.Finalizers)
	}
	a.delete(namespacesPath+"/kept").mustCode(t, http.StatusOK, nil)
	testutil.Eventually(t, waitTimeout, "kubernetes finalizer removed", func() error {
		a.read(namespacesPath+"/kept", ns)
		if !slices.Equal(ns.Spec.Finalizers, []corev1.FinalizerName{"example.com/cleanup"}) {
			return fmt.Errorf("finalizers %v", ns.Spec.Finalizers)
		}
		return nil
	})
	if c := nsCondition(ns, corev1.NamespaceContentRemaining); c.Status != corev1.ConditionFalse || c.Reason != "ContentRemoved" {
		t.Errorf("content remaining condition = %+v", c)
	}
	ns.Spec.Finalizers = nil
	a.put(namespacesPath+"/kept/finalize", ns).mustCode(t, http.StatusOK, nil)
	if a.exists(namespacesPath + "/kept") {
		t.Error("namespace still there after its last finalizer was removed")
	}
	if r := a.delete(namespacesPath + "/default"); r.code != http.StatusForbidden || !strings.Contains(string(r.body), "may not be deleted") {
		t.Errorf("deleting default: %d %s", r.code, r.body)
	}
}
