package controllers

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Every namespace gets its default ServiceAccount and its kube-root-ca.crt
// ConfigMap with the cluster CA; both come back when deleted, and an edited
// ConfigMap is put right.
func TestServiceAccountsAndRootCA(t *testing.T) {
	tc := newTestCluster(t)
	const ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	tc.startControllers(Options{RootCA: []byte(ca)})
	ctx := tc.ctx
	if _, err := tc.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rootCA := func(ns string) func() (bool, string) {
		return func() (bool, string) {
			cm, err := tc.client.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return cm.Data["ca.crt"] == ca && len(cm.Data) == 1, fmt.Sprint(cm.Data)
		}
	}
	defaultSA := func(ns string) func() (bool, string) {
		return func() (bool, string) {
			_, err := tc.client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
			return err == nil, fmt.Sprint(err)
		}
	}
	for _, ns := range []string{"default", "kube-system", "kube-public", "kube-node-lease", "team-a"} {
		eventually(t, "kube-root-ca.crt in "+ns, rootCA(ns))
		eventually(t, "default ServiceAccount in "+ns, defaultSA(ns))
	}
	if err := tc.client.CoreV1().ServiceAccounts("team-a").Delete(ctx, "default", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := tc.client.CoreV1().ConfigMaps("team-a").Delete(ctx, "kube-root-ca.crt", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "default ServiceAccount recreated", defaultSA("team-a"))
	eventually(t, "kube-root-ca.crt recreated", rootCA("team-a"))
	cm, err := tc.client.CoreV1().ConfigMaps("team-a").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{"ca.crt": "tampered", "extra": "x"}
	if _, err := tc.client.CoreV1().ConfigMaps("team-a").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "kube-root-ca.crt repaired", rootCA("team-a"))
}
