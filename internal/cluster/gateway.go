package cluster

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/minikit/minikit/internal/gateway"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/client-go/rest"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
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

// startGatewayNode runs this node's Gateway data plane once the API serves
// the Gateway API (an agent does not know the server's --gateway-api; it asks
// discovery, again every few seconds until the kinds appear).
// MINIKIT_GATEWAY=off disables it on a node.
func startGatewayNode(ctx context.Context, wg *sync.WaitGroup, nc nodeContext) error {
	if os.Getenv("MINIKIT_GATEWAY") == "off" || nc.RESTConfig == nil {
		return nil
	}
	gw, err := gwclient.NewForConfig(nc.RESTConfig)
	if err != nil {
		return err
	}
	n, err := gateway.NewNode(gateway.NodeConfig{Client: nc.Client, Gateway: gw, NodeName: nc.NodeName, Logger: nc.Logger})
	if err != nil {
		return err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if _, err := nc.Client.Discovery().ServerResourcesForGroupVersion(gatewayv1.GroupVersion.String()); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Second):
			}
		}
		if err := n.Run(ctx); err != nil && ctx.Err() == nil {
			nc.Logger.Error("gateway data plane stopped", "component", "gateway", "err", err)
		}
	}()
	return nil
}
