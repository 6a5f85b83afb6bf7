package controllers

import (
	"fmt"
	"testing"

	"github.com/minikit/minikit/internal/testutil"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Every namespace gets its default ServiceAccount and its kube-root-ca.crt
// ConfigMap with the cluster CA; both come back when deleted, and an edited
// ConfigMap is put right.
func TestServiceAccountsAndRootCA(t *testing.T) {
	tc := newTestCluster(t)
	const ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	tc.startControllers(Config{RootCA: []byte(ca)})
	ctx := tc.ctx
	if _, err := tc.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rootCA := func(ns string) func() error {
		return func() error {
			cm, err := tc.client.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cm.Data["ca.crt"] != ca || len(cm.Data) != 1 {
				return fmt.Errorf("%v", cm.Data)
			}
			return nil
		}
	}
	defaultSA := func(ns string) func() error {
		return func() error {
			_, err := tc.client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
			return err
		}
	}
	for _, ns := range []string{"default", "kube-system", "kube-public", "kube-node-lease", "team-a"} {
		testutil.Eventually(t, waitTimeout, "kube-root-ca.crt in "+ns, rootCA(ns))
		testutil.Eventually(t, waitTimeout, "default ServiceAccount in "+ns, defaultSA(ns))
	}
	if err := tc.client.CoreV1().ServiceAccounts("team-a").Delete(ctx, "default", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := tc.client.CoreV1().ConfigMaps("team-a").Delete(ctx, "kube-root-ca.crt", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "default ServiceAccount recreated", defaultSA("team-a"))
	testutil.Eventually(t, waitTimeout, "kube-root-ca.crt recreated", rootCA("team-a"))
	cm, err := tc.client.CoreV1().ConfigMaps("team-a").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{"ca.crt": "tampered", "extra": "x"}
	if _, err := tc.client.CoreV1().ConfigMaps("team-a").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "kube-root-ca.crt repaired", rootCA("team-a"))
}
