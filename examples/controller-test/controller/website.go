// Package controller is the website controller: for each Website it applies
// a Deployment and a Service (server-side apply, owned by the Website, so
// that deleting the Website collects them) and applies the Website's status
// through the status subresource.
package controller

import (
	"context"
	"fmt"

	webv1 "example.com/controller-test/api/v1"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
)

// FieldOwner is the controller's field manager.
const FieldOwner = "website-controller"

// Reconciler reconciles Websites.
type Reconciler struct {
	client.Client
}

// SetupWithManager registers the controller: Websites, and the Deployments
// and Services they own.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&webv1.Website{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		// Tests start one manager each in the same process.
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		Complete(r)
}

// Reconcile applies the Website's Deployment and Service, then its status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var w webv1.Website
	if err := r.Get(ctx, req.NamespacedName, &w); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	port := w.Spec.Port
	if port == 0 {
		port = 8080
	}
	labels := map[string]string{"app.kubernetes.io/name": w.Name, "app.kubernetes.io/managed-by": FieldOwner}
	owner := metav1ac.OwnerReference().WithAPIVersion(webv1.GroupVersion.String()).WithKind("Website").
		WithName(w.Name).WithUID(w.UID).WithController(true).WithBlockOwnerDeletion(true)

	dep := appsv1ac.Deployment(w.Name, w.Namespace).WithLabels(labels).WithOwnerReferences(owner).
		WithSpec(appsv1ac.DeploymentSpec().WithReplicas(ptr.Deref(w.Spec.Replicas, 1)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(labels)).
			WithTemplate(corev1ac.PodTemplateSpec().WithLabels(labels).
				WithSpec(corev1ac.PodSpec().WithContainers(corev1ac.Container().WithName("web").
					WithImage(w.Spec.Image).WithArgs(w.Spec.Args...).
					WithPorts(corev1ac.ContainerPort().WithName("http").WithContainerPort(port)).
					WithReadinessProbe(corev1ac.Probe().WithHTTPGet(corev1ac.HTTPGetAction().WithPath("/").WithPort(intstr.FromString("http"))))))))
	if err := r.Apply(ctx, dep, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying the Deployment of website %s/%s: %w", w.Namespace, w.Name, err)
	}
	svc := corev1ac.Service(w.Name, w.Namespace).WithLabels(labels).WithOwnerReferences(owner).
		WithSpec(corev1ac.ServiceSpec().WithSelector(labels).
			WithPorts(corev1ac.ServicePort().WithName("http").WithPort(80).WithTargetPort(intstr.FromString("http"))))
	if err := r.Apply(ctx, svc, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying the Service of website %s/%s: %w", w.Namespace, w.Name, err)
	}

	var cur appsv1.Deployment
	if err := r.Get(ctx, req.NamespacedName, &cur); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	// The status as an apply configuration of its own: only the fields this
	// manager owns, written through the status subresource.
	status := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": webv1.GroupVersion.String(), "kind": "Website",
		"metadata": map[string]any{"name": w.Name, "namespace": w.Namespace},
		"status": map[string]any{
			"observedGeneration": w.Generation,
			"readyReplicas":      int64(cur.Status.ReadyReplicas),
			"url":                fmt.Sprintf("http://%s.%s.svc.cluster.local", w.Name, w.Namespace),
		},
	}}
	if err := r.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(status), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying the status of website %s/%s: %w", w.Namespace, w.Name, err)
	}
	return ctrl.Result{}, nil
}
