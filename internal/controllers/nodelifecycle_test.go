package controllers

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/testutil"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNodeLifecycle(t *testing.T) {
	tc := newTestCluster(t)
	tc.createNode("n1", true, nil)
	tc.createNode("n2", true, nil)
	for _, p := range []struct{ name, node string }{{"on-n1", "n1"}, {"on-n2", "n2"}} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: p.node, Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
		if _, err := tc.client.CoreV1().Pods("default").Create(tc.ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tc.setPodStatus("default", p.name, "10.244.0.9", true)
	}
	var mu sync.Mutex
	now := time.Now()
	c := New(tc.client, testutil.Logger(t), Config{})
	c.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	go c.Run(tc.ctx)
	<-c.Ready()

	t.Run("a silent node goes Unknown after the grace period and its pods not ready", func(t *testing.T) {
		c.nl.loop.add("n1")
		testutil.Eventually(t, waitTimeout, "n1's heartbeat observed", func() error {
			c.nl.mu.Lock()
			defer c.nl.mu.Unlock()
			_, ok := c.nl.observed["n1"]
			if !ok {
				return errors.New("not yet")
			}
			return nil
		})
		mu.Lock()
		now = now.Add(nodeMonitorGracePeriod + time.Second)
		mu.Unlock()
		c.nl.loop.add("n1")
		testutil.Eventually(t, waitTimeout, "n1 Unknown and on-n1 not ready", func() error {
			n, err := tc.client.CoreV1().Nodes().Get(tc.ctx, "n1", metav1.GetOptions{})
			if err != nil {
				return err
			}
			p, err := tc.client.CoreV1().Pods("default").Get(tc.ctx, "on-n1", metav1.GetOptions{})
			if err != nil {
				return err
			}
			nodeUnknown, podReady := false, true
			for _, cond := range n.Status.Conditions {
				nodeUnknown = nodeUnknown || (cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionUnknown)
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady {
					podReady = cond.Status == corev1.ConditionTrue
				}
			}
			if !nodeUnknown || podReady {
				return errors.New("node unknown " + boolStr(nodeUnknown) + ", pod ready " + boolStr(podReady))
			}
			return nil
		})
	})
	t.Run("pods of a deleted node are deleted", func(t *testing.T) {
		if err := tc.client.CoreV1().Nodes().Delete(tc.ctx, "n2", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, waitTimeout, "pod on-n2 deleted", func() error {
			_, err := tc.client.CoreV1().Pods("default").Get(tc.ctx, "on-n2", metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				return errors.New("pod still there")
			}
			return nil
		})
	})
}

func boolStr(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
