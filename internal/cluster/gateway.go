package cluster

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/minikit/minikit/internal/gateway"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/client-go/rest"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
)

// installGatewayAPI applies the Gateway API CRD bundle (package gateway) unless
// cfg.DisableGatewayAPI. Every server does it at start, before its
// components, so a server that is up serves the Gateway API kinds; a restart
// re-applies the same bundle as a no-op.
func installGatewayAPI(rc *rest.Config, cfg ServerConfig) error {
	if cfg.DisableGatewayAPI {
		return nil
	}
	channel := cfg.GatewayAPIChannel
	if channel == "" {
		channel = gateway.ChannelStandard
	}
	if _, err := gateway.Bundle(channel); err != nil {
		return fmt.Errorf("--gateway-api-channel: %w", err)
	}
	cs, err := apiextensionsclient.NewForConfig(rc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := gateway.Install(ctx, cs.ApiextensionsV1().CustomResourceDefinitions(), channel, cfg.Logger); err != nil {
		return fmt.Errorf("installing the Gateway API %s CRDs (--gateway-api=false leaves them out): %w", gateway.BundleVersion, err)
	}
	return nil
}

// startGatewayServer runs the Gateway controller's control plane (package
// gateway) when the Gateway API is installed.
func startGatewayServer(ctx context.Context, wg *sync.WaitGroup, sc serverContext) error {
	if !sc.GatewayAPI {
		return nil
	}
	gw, err := gwclient.NewForConfig(sc.RESTConfig)
	if err != nil {
		return err
	}
	cp, err := gateway.NewControlPlane(gateway.ControlPlaneConfig{Client: sc.Client, Gateway: gw, Logger: sc.Logger})
	if err != nil {
		return err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := cp.Run(ctx); err != nil && ctx.Err() == nil {
			sc.Logger.Error("gateway control plane stopped", "component", "gateway-server", "err", err)
		}
	}()
	return nil
}
