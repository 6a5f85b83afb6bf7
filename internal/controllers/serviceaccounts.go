package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// The service account loop does what kube-controller-manager's serviceaccount
// and root-ca-cert-publisher controllers do: every active namespace has a
// ServiceAccount named "default" and a ConfigMap "kube-root-ca.crt" whose
// ca.crt is the CA that signs the API server's serving certificate, both
// recreated (or repaired) if deleted or edited. Pods mount that ca.crt to
// verify the API they reach at the kubernetes Service. A server on loopback
// plain HTTP has no CA: its ConfigMaps carry an empty ca.crt.
const (
	defaultServiceAccount = "default"
	rootCAConfigMap       = "kube-root-ca.crt"
	rootCAKey             = "ca.crt"
)

type serviceAccounts struct {
	c    *Controllers
	loop *loop
	nss  corelisters.NamespaceLister
	sas  corelisters.ServiceAccountLister
	cms  corelisters.ConfigMapLister
	seen *freshness
}

func newServiceAccounts(c *Controllers) *serviceAccounts {
	s := &serviceAccounts{c: c, seen: newFreshness(),
		nss: c.factory.Core().V1().Namespaces().Lister(),
		sas: c.factory.Core().V1().ServiceAccounts().Lister(),
		cms: c.factory.Core().V1().ConfigMaps().Lister(),
	}
	s.loop = c.newLoop("serviceaccounts", 1, s.sync)
	nsInf := c.factory.Core().V1().Namespaces().Informer()
	nsInf.AddEventHandler(handlers(
		func(obj any) { s.loop.add(obj.(*corev1.Namespace).Name) },
		func(_, cur any) { s.loop.add(cur.(*corev1.Namespace).Name) },
		func(any) {},
	))
	byNamespace := func(obj any) {
		if m, ok := obj.(metav1.Object); ok {
			s.loop.add(m.GetNamespace())
		}
	}
	saInf := c.factory.Core().V1().ServiceAccounts().Informer()
	saInf.AddEventHandler(handlers(byNamespace, func(_, cur any) { byNamespace(cur) }, byNamespace))
	cmInf := c.factory.Core().V1().ConfigMaps().Informer()
	cmOnly := func(obj any) {
		if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name == rootCAConfigMap {
			s.loop.add(cm.Namespace)
		}
	}
	cmInf.AddEventHandler(handlers(cmOnly, func(_, cur any) { cmOnly(cur) }, cmOnly))
	c.synced = append(c.synced, nsInf.HasSynced, saInf.HasSynced, cmInf.HasSynced)
	return s
}

func (s *serviceAccounts) sync(ctx context.Context, ns string) error {
	n, err := s.nss.Get(ns)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if n.Status.Phase == corev1.NamespaceTerminating || n.DeletionTimestamp != nil {
		return nil // nothing new may be created in it
	}
	if err := s.ensureDefaultSA(ctx, ns); err != nil {
		return err
	}
	return s.ensureRootCA(ctx, ns)
}

func (s *serviceAccounts) ensureDefaultSA(ctx context.Context, ns string) error {
	key := "sa/" + ns
	cur, err := s.sas.ServiceAccounts(ns).Get(defaultServiceAccount)
	if err == nil {
		s.seen.stale(key, cur)
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return err
	}
	if s.seen.stale(key, nil) {
		return errStale
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: defaultServiceAccount, Namespace: ns}}
	created, err := s.c.client.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) || isTerminating(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating serviceaccount %s/default: %w", ns, err)
	}
	s.seen.wrote(key, created)
	return nil
}

func (s *serviceAccounts) ensureRootCA(ctx context.Context, ns string) error {
	key := "cm/" + ns
	want := map[string]string{rootCAKey: string(s.c.opts.RootCA)}
	cur, err := s.cms.ConfigMaps(ns).Get(rootCAConfigMap)
	if err == nil {
		if s.seen.stale(key, cur) {
			return errStale
		}
		if len(cur.Data) == 1 && cur.Data[rootCAKey] == want[rootCAKey] && len(cur.BinaryData) == 0 {
			return nil
		}
		cm := cur.DeepCopy()
		cm.Data, cm.BinaryData = want, nil
		updated, err := s.c.client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("updating configmap %s/%s: %w", ns, rootCAConfigMap, err)
		}
		s.seen.wrote(key, updated)
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return err
	}
	if s.seen.stale(key, nil) {
		return errStale
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: rootCAConfigMap, Namespace: ns,
			Annotations: map[string]string{"kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}},
		Data: want,
	}
	created, err := s.c.client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) || isTerminating(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating configmap %s/%s: %w", ns, rootCAConfigMap, err)
	}
	s.seen.wrote(key, created)
	return nil
}

// isTerminating is the API's refusal to create content in a namespace being deleted.
func isTerminating(err error) bool {
	return apierrors.IsForbidden(err) && apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause)
}
