package informer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/testutil"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

func TestObjectUnwrapsTombstones(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}}
	tomb := cache.DeletedFinalStateUnknown{Key: "default/web", Obj: pod}
	for name, tc := range map[string]struct {
		in     any
		want   any
		wantOK bool
	}{
		"an object":                 {pod, pod, true},
		"a tombstone":               {tomb, pod, true},
		"a tombstone of a surprise": {cache.DeletedFinalStateUnknown{Key: "x", Obj: "not a pod"}, "not a pod", false},
		"another type":              {&corev1.Node{}, &corev1.Node{}, false},
	} {
		t.Run(name, func(t *testing.T) {
			if got := Object(tc.in); !equal(got, tc.want) {
				t.Errorf("Object = %#v, want %#v", got, tc.want)
			}
			p, ok := As[*corev1.Pod](tc.in)
			if ok != tc.wantOK || ok && p != pod {
				t.Errorf("As[*Pod] = %v, %v; want the pod: %v", p, ok, tc.wantOK)
			}
		})
	}
}

func equal(a, b any) bool {
	if n, ok := a.(*corev1.Node); ok {
		m, ok := b.(*corev1.Node)
		return ok && n.Name == m.Name
	}
	return a == b
}

func TestOnChangeHearsEveryEvent(t *testing.T) {
	client := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a"}})
	factory := informers.NewSharedInformerFactory(client, 0)
	var changes atomic.Int32
	if err := AddHandler(OnChange(func() { changes.Add(1) }),
		factory.Core().V1().ConfigMaps().Informer(), factory.Core().V1().Secrets().Informer()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); factory.Shutdown() }()
	factory.Start(ctx.Done())
	if err := WaitForSync(ctx, factory); err != nil {
		t.Fatal(err)
	}
	want := int32(1) // the listed ConfigMap's add
	wait := func(what string) {
		t.Helper()
		testutil.Eventually(t, 10*time.Second, what, func() error {
			if n := changes.Load(); n != want {
				return fmt.Errorf("%d changes, want %d", n, want)
			}
			return nil
		})
	}
	wait("the initial add")
	cms := client.CoreV1().ConfigMaps("default")
	secrets := client.CoreV1().Secrets("default")
	steps := []struct {
		what string
		do   func() error
	}{
		{"an update", func() error {
			_, err := cms.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a"}, Data: map[string]string{"k": "v"}}, metav1.UpdateOptions{})
			return err
		}},
		{"a delete", func() error { return cms.Delete(ctx, "a", metav1.DeleteOptions{}) }},
		{"an add on the second informer", func() error {
			_, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "s"}}, metav1.CreateOptions{})
			return err
		}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.what, err)
		}
		want++
		wait(s.what)
	}
}

func TestWaitForSyncNamesTheCacheThatDidNotSync(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("no pods for you")
	})
	factory := informers.NewSharedInformerFactory(client, 0)
	factory.Core().V1().Pods().Informer()
	ctx, cancel := context.WithCancel(context.Background())
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	errc := make(chan error, 1)
	go func() { errc <- WaitForSync(ctx, factory) }()
	cancel()
	err := <-errc
	if err == nil || !strings.Contains(err.Error(), "syncing the *v1.Pod cache") || !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitForSync = %v, want the Pod cache named and context.Canceled", err)
	}
}
