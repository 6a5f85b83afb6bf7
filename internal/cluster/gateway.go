package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/minikit/minikit/internal/gateway"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/client-go/rest"
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
