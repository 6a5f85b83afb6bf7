package apiserver

import (
	"fmt"

	"github.com/minikit/minikit/internal/store"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// Service account identity for pods, as kube-apiserver's ServiceAccount
// admission plugin gives it: every pod runs as a ServiceAccount of its
// namespace ("default" unless named), which must exist, and unless
// automountServiceAccountToken is false on the pod or the account, gets the
// projected volume kube-api-access-XXXXX (a token, the cluster CA and the
// namespace) mounted at /var/run/secrets/kubernetes.io/serviceaccount in every
// container. The node agent materialises the volume (package kubelet).

const (
	defaultSAName = "default"
	// TokenMountPath is where pods find their service account credentials.
	TokenMountPath    = "/var/run/secrets/kubernetes.io/serviceaccount"
	tokenVolumePrefix = "kube-api-access-"
	// tokenVolumeExpiration is kube's WarnOnlyBoundTokenExpirationSeconds: the
	// expiration the admission plugin writes into the projected volume.
	tokenVolumeExpiration int64 = 3607
	rootCAConfigMapName         = "kube-root-ca.crt"
)

var saResource = lookup("", "v1", "serviceaccounts")

// createDefaultServiceAccount writes the namespace's default ServiceAccount in
// the transaction that creates the namespace. Kubernetes leaves this to the
// serviceaccount controller (which minikit also runs, and which recreates the
// account if it is deleted); doing it here too means a pod created right after
// its namespace is not refused for an account the controller has not made yet.
func (s *Server) createDefaultServiceAccount(tx store.Tx, ns string) error {
	key := saResource.key(ns, defaultSAName)
	if _, ok := tx.Get(key); ok {
		return nil
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: defaultSAName, Namespace: ns,
		UID: uuid.NewUUID(), CreationTimestamp: metav1.NewTime(s.now().Truncate(1e9))}}
	return s.put(tx, saResource, key, sa)
}

// admitPod gives a new pod its service account, as the ServiceAccount
// admission plugin does, before defaulting and validation.
func (s *Server) admitPod(pod *corev1.Pod) error {
	if _, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return nil
	}
	if pod.Spec.ServiceAccountName == "" {
		pod.Spec.ServiceAccountName = pod.Spec.DeprecatedServiceAccount
	}
	if pod.Spec.ServiceAccountName == "" {
		pod.Spec.ServiceAccountName = defaultSAName
	}
	pod.Spec.DeprecatedServiceAccount = pod.Spec.ServiceAccountName
	// Namespace lifecycle admission runs first in Kubernetes: a missing
	// namespace is reported as such, not as a missing account.
	if _, err := s.get(nsResource, "", pod.Namespace); err != nil {
		return err
	}
	obj, err := s.get(saResource, pod.Namespace, pod.Spec.ServiceAccountName)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return apierrors.NewForbidden(lookup("", "v1", "pods").gr(), pod.Name,
				// Kubernetes reads the account through a lister, whose
				// NotFound names the resource in the singular.
				fmt.Errorf("error looking up service account %s/%s: serviceaccount %q not found", pod.Namespace, pod.Spec.ServiceAccountName, pod.Spec.ServiceAccountName))
		}
		return err
	}
	sa := obj.(*corev1.ServiceAccount)
	automount := true
	switch {
	case pod.Spec.AutomountServiceAccountToken != nil:
		automount = *pod.Spec.AutomountServiceAccountToken
	case sa.AutomountServiceAccountToken != nil:
		automount = *sa.AutomountServiceAccountToken
	}
	if automount {
		mountServiceAccountToken(pod)
	}
	return nil
}

// mountServiceAccountToken adds the projected token volume and mounts it in
// every container that does not already mount something at TokenMountPath.
func mountServiceAccountToken(pod *corev1.Pod) {
	name := ""
	for _, v := range pod.Spec.Volumes {
		if isTokenVolume(v) {
			name = v.Name
		}
	}
	needed := false
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if !mountsAt(c, TokenMountPath) {
				needed = true
			}
		}
	}
	if !needed {
		return
	}
	if name == "" {
		taken := map[string]bool{}
		for _, v := range pod.Spec.Volumes {
			taken[v.Name] = true
		}
		for name == "" || taken[name] {
			name = tokenVolumePrefix + generateNameSuffix()
		}
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: name,
			VolumeSource: corev1.VolumeSource{Projected: tokenVolumeSource()}})
	}
	mount := corev1.VolumeMount{Name: name, ReadOnly: true, MountPath: TokenMountPath}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if !mountsAt(cs[i], TokenMountPath) {
				cs[i].VolumeMounts = append(cs[i].VolumeMounts, mount)
			}
		}
	}
}

func mountsAt(c corev1.Container, path string) bool {
	for _, m := range c.VolumeMounts {
		if m.MountPath == path {
			return true
		}
	}
	return false
}

// isTokenVolume recognises the volume admission adds (by its name prefix and
// its token projection).
func isTokenVolume(v corev1.Volume) bool {
	if len(v.Name) <= len(tokenVolumePrefix) || v.Name[:len(tokenVolumePrefix)] != tokenVolumePrefix || v.Projected == nil {
		return false
	}
	for _, src := range v.Projected.Sources {
		if src.ServiceAccountToken != nil {
			return true
		}
	}
	return false
}

// tokenVolumeSource is the projected volume Kubernetes' admission adds: the
// bound token, the cluster CA from kube-root-ca.crt, and the namespace.
func tokenVolumeSource() *corev1.ProjectedVolumeSource {
	mode := corev1.ProjectedVolumeSourceDefaultMode
	exp := tokenVolumeExpiration
	return &corev1.ProjectedVolumeSource{
		DefaultMode: &mode,
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &exp}},
			{ConfigMap: &corev1.ConfigMapProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: rootCAConfigMapName},
				Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
			}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{
				Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"},
			}}}},
		},
	}
}
