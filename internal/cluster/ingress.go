package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/minikit/minikit/internal/ingress"
)

// The Ingress controller runs as ingress-nginx does on bare metal with
// hostNetwork: a controller on every node, on the node's ports 10080 and 10443
// (80 and 443 stay free for hostNetwork pods, as on a kubeadm node), and in the API a NodePort Service ingress-nginx/ingress-nginx-controller whose
// endpoints are those listeners (package ingress has the details).
//
// MINIKIT_INGRESS_HTTP_PORT and MINIKIT_INGRESS_HTTPS_PORT move the listeners;
// MINIKIT_INGRESS=off disables the controller on a node.

// startIngressNode starts this node's Ingress controller.
func startIngressNode(ctx context.Context, wg *sync.WaitGroup, nc nodeContext) error {
	if os.Getenv("MINIKIT_INGRESS") == "off" {
		return nil
	}
	httpPort, err := envPort("MINIKIT_INGRESS_HTTP_PORT", ingress.DefaultHTTPPort)
	if err != nil {
		return err
	}
	httpsPort, err := envPort("MINIKIT_INGRESS_HTTPS_PORT", ingress.DefaultHTTPSPort)
	if err != nil {
		return err
	}
	n, err := ingress.NewController(ingress.ControllerConfig{
		Client:    nc.Client,
		NodeName:  nc.NodeName,
		NodeIP:    nc.NodeIP,
		HTTPPort:  httpPort,
		HTTPSPort: httpsPort,
		Dir:       filepath.Join(nc.DataDir, "ingress"),
		Logger:    nc.Logger,
	})
	if err != nil {
		return err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := n.Run(ctx); err != nil && ctx.Err() == nil {
			nc.Logger.Error("ingress controller stopped", "component", "ingress", "err", err)
		}
	}()
	return nil
}

// startIngressServer creates the controller's namespace, IngressClass and
// Service and keeps the Service's endpoints and the Ingresses' status current.
func startIngressServer(ctx context.Context, wg *sync.WaitGroup, sc serverContext) error {
	s, err := ingress.NewControlPlane(ingress.ControlPlaneConfig{Client: sc.Client, Logger: sc.Logger})
	if err != nil {
		return err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := s.Run(ctx); err != nil && ctx.Err() == nil {
			sc.Logger.Error("ingress control plane stopped", "component", "ingress-server", "err", err)
		}
	}()
	return nil
}

func envPort(key string, def int) (int, error) {
	v := os.Getenv(key)
	if v == "" {
		return def, nil
	}
	p, err := strconv.Atoi(v)
	if err != nil || p <= 0 || p > 65535 {
		return 0, fmt.Errorf("%s=%q is not a port", key, v)
	}
	return p, nil
}
