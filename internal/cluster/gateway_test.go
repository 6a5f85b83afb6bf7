package cluster

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/gateway"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	gwclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
)

const httproutesCRD = "httproutes.gateway.networking.k8s.io"

func startAPIOnly(t *testing.T, dir string, mod func(*ServerConfig)) (*Server, error) {
	t.Helper()
	cfg := ServerConfig{DataDir: dir, Listen: "127.0.0.1:0", DisableAgent: true, NodeName: "gw",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Version: "test"}
	mod(&cfg)
	s, err := StartServer(cfg)
	if err == nil {
		t.Cleanup(func() { s.Stop(context.Background()) })
	}
	return s, err
}

func routeCRD(t *testing.T, s *Server) (rv, channel string, err error) {
	t.Helper()
	cs, err := apiextensionsclient.NewForConfig(&rest.Config{Host: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	c, err := cs.ApiextensionsV1().CustomResourceDefinitions().Get(context.Background(), httproutesCRD, metav1.GetOptions{})
	if err != nil {
		return "", "", err
	}
	return c.ResourceVersion, c.Annotations[gateway.ChannelAnnotation], nil
}

// A server comes up with the standard bundle and its controller's class Accepted; restarted on the same data, it
// re-applies it without a change; asked for experimental over it, it refuses
// to start, as the bundle's safe-upgrades policy refuses; --gateway-api=false
// installs nothing (and runs no controller); a channel that does not exist is named.
func TestServerInstallsTheGatewayAPIBundle(t *testing.T) {
	dir := t.TempDir()
	s, err := startAPIOnly(t, dir, func(*ServerConfig) {})
	if err != nil {
		t.Fatal(err)
	}
	rv, ch, err := routeCRD(t, s)
	if err != nil || ch != gateway.ChannelStandard {
		t.Fatalf("after start: %s channel %q, %v", httproutesCRD, ch, err)
	}
	// The controller, a singleton of the leader, accepts its class.
	gw, err := gwclient.NewForConfig(&rest.Config{Host: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	poll(t, "GatewayClass minikit Accepted by "+string(gateway.ControllerName), func() bool {
		gc, err := gw.GatewayV1().GatewayClasses().Get(context.Background(), gateway.ClassName, metav1.GetOptions{})
		return err == nil && gc.Spec.ControllerName == gateway.ControllerName && meta.IsStatusConditionTrue(gc.Status.Conditions, "Accepted")
	})
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	s, err = startAPIOnly(t, dir, func(*ServerConfig) {})
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	if rv2, _, err := routeCRD(t, s); err != nil || rv2 != rv {
		t.Errorf("after a restart: resourceVersion %s → %s (%v); re-applying the bundle must be a no-op", rv, rv2, err)
	}
	s.Stop(context.Background())

	_, err = startAPIOnly(t, dir, func(c *ServerConfig) { c.GatewayAPIChannel = gateway.ChannelExperimental })
	if err == nil || !strings.Contains(err.Error(), "experimental CRDs on top of standard channel CRDs is prohibited") {
		t.Errorf("experimental over standard: %v", err)
	}

	s, err = startAPIOnly(t, t.TempDir(), func(c *ServerConfig) { c.DisableGatewayAPI = true })
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := routeCRD(t, s); !apierrors.IsNotFound(err) {
		t.Errorf("--gateway-api=false: %s: %v, want NotFound", httproutesCRD, err)
	}

	_, err = startAPIOnly(t, t.TempDir(), func(c *ServerConfig) { c.GatewayAPIChannel = "beta" })
	if err == nil || !strings.Contains(err.Error(), `--gateway-api-channel: gateway API channel "beta"`) {
		t.Errorf("channel beta: %v", err)
	}
}
