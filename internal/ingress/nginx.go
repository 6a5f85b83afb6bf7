package ingress

import (
	"context"
	"fmt"

	"github.com/minikit/minikit/internal/ingress/config"
	"github.com/minikit/minikit/internal/ingress/httpproxy"
	"github.com/minikit/minikit/internal/ingress/nginxconf"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// NginxConf renders the nginx.conf an nginx Ingress controller would run for
// the cluster's current Ingresses of class (zero: ingress-nginx's), as
// `minikit ingress nginx-conf` prints it. Without a default certificate in
// opts, a fresh fake one is generated. Nodes keep the same file, always
// current, under their data directory (ingress/conf/nginx.conf).
func NginxConf(ctx context.Context, client kubernetes.Interface, class config.Class, opts nginxconf.Config) (*nginxconf.Output, error) {
	if class == (config.Class{}) {
		class = config.DefaultClass
	}
	in := config.Input{Class: class}
	ings, err := client.NetworkingV1().Ingresses("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing ingresses: %w", err)
	}
	classes, err := client.NetworkingV1().IngressClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing ingress classes: %w", err)
	}
	svcs, err := client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing services: %w", err)
	}
	slices, err := client.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing endpointslices: %w", err)
	}
	secrets, err := client.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing secrets: %w", err)
	}
	in.Ingresses = pointers[networkingv1.Ingress](ings.Items)
	in.IngressClasses = pointers[networkingv1.IngressClass](classes.Items)
	in.Services = pointers[corev1.Service](svcs.Items)
	in.EndpointSlices = pointers[discoveryv1.EndpointSlice](slices.Items)
	in.Secrets = pointers[corev1.Secret](secrets.Items)
	if len(opts.DefaultCertPEM) == 0 {
		_, c, k, err := httpproxy.NewFakeCertificate()
		if err != nil {
			return nil, err
		}
		opts.DefaultCertPEM, opts.DefaultKeyPEM = c, k
	}
	return nginxconf.Render(config.Build(in), opts)
}

func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}

// ClassNone asks for the default class (ingress-nginx's).
var ClassNone config.Class
