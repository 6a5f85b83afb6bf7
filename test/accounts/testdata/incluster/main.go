// Command incluster is a client-go program the accounts test runs inside a
// pod: it configures itself with rest.InClusterConfig (the mounted token and
// ca.crt, KUBERNETES_SERVICE_HOST/PORT), lists Services, and tries to create
// one, which a service account token may not do. It exits 0 when the list
// worked and the create was refused with 403 Forbidden.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func main() {
	ctx := context.Background()
	cfg, err := rest.InClusterConfig()
	if err != nil {
		fmt.Println("in-cluster config:", err)
		os.Exit(2)
	}
	fmt.Println("host:", cfg.Host)
	fmt.Println("KUBERNETES_PORT_443_TCP_ADDR:", os.Getenv("KUBERNETES_PORT_443_TCP_ADDR"))
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Println("client:", err)
		os.Exit(2)
	}
	ns, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil {
		fmt.Println("namespace file:", err)
		os.Exit(2)
	}
	// Without a binding RBAC refuses the list (the test checks the wording);
	// the create is refused either way.
	svcs, err := cs.CoreV1().Services(string(ns)).List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Println("list:", err)
		if !apierrors.IsForbidden(err) {
			os.Exit(1)
		}
	} else {
		var names []string
		for _, s := range svcs.Items {
			names = append(names, s.Name)
		}
		fmt.Printf("listed services: %s\n", strings.Join(names, ","))
	}
	_, err = cs.CoreV1().Services(string(ns)).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "from-pod"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{})
	fmt.Println("create:", err)
	if !apierrors.IsForbidden(err) {
		os.Exit(1)
	}
}
