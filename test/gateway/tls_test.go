package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/gateway"
	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// A TLS passthrough Gateway from the lab's client host: curl opens TLS with
// a server name through the Gateway's address, and the backend that name
// routes to (an exact TLSRoute hostname before a wildcard one) terminates
// the session with its own certificate (curl --cacert with that certificate
// alone verifies it, so the Gateway did not terminate) and reports its pod
// and the server name it was asked for. A name no TLSRoute covers has its
// connection closed during the handshake.
func TestGatewayTLSPassthroughFromTheClientHost(t *testing.T) {
	l := testenv.NewLab(t, 2)
	c := testenv.Client(t, l)
	ctx := context.Background()
	gw := gatewayClient(t, l)
	dir := t.TempDir()
	// Each backend's certificate, in a Secret its pod mounts and in a file
	// curl trusts.
	for name, host := range map[string]string{"abc": "abc.example.com", "wild": "*.example.com"} {
		crt, key := selfSigned(t, host)
		if err := os.WriteFile(filepath.Join(dir, name+".pem"), crt, 0o644); err != nil {
			t.Fatal(err)
		}
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key}}
		if _, err := c.CoreV1().Secrets("default").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		labels := map[string]string{"app": "tls-" + name}
		pod := echoBasicPod("tls-"+name, labels,
			corev1.EnvVar{Name: "TLS_SERVER_CERT", Value: "/etc/tls/crt"}, corev1.EnvVar{Name: "TLS_SERVER_PRIVKEY", Value: "/etc/tls/key"})
		pod.Spec.Volumes = []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name,
			Items: []corev1.KeyToPath{{Key: corev1.TLSCertKey, Path: "crt"}, {Key: corev1.TLSPrivateKeyKey, Path: "key"}}}}}}
		pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "tls", MountPath: "/etc/tls"}}
		if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "tls-" + name},
			Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(8443)}}}}
		if _, err := c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitPodReady(t, c, "default", "tls-abc")
	testenv.WaitPodReady(t, c, "default", "tls-wild")

	mode := gatewayv1.TLSModePassthrough
	host := gatewayv1.Hostname("*.example.com")
	g := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: "default"},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: gateway.ClassName, Listeners: []gatewayv1.Listener{
			{Name: "tls", Port: 443, Protocol: gatewayv1.TLSProtocolType, Hostname: &host, TLS: &gatewayv1.ListenerTLSConfig{Mode: &mode}},
		}}}
	if _, err := gw.GatewayV1().Gateways("default").Create(ctx, g, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	port := gatewayv1.PortNumber(443)
	for name, hostname := range map[string]gatewayv1.Hostname{"abc": "abc.example.com", "wild": "*.example.com"} {
		rt := &gatewayv1.TLSRoute{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: gatewayv1.TLSRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "edge"}}},
				Hostnames: []gatewayv1.Hostname{hostname},
				Rules: []gatewayv1.TLSRouteRule{{BackendRefs: []gatewayv1.BackendRef{{
					BackendObjectReference: gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName("tls-" + name), Port: &port}}}}}}}
		if _, err := gw.GatewayV1().TLSRoutes("default").Create(ctx, rt, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"abc", "wild"} {
		testutil.Eventually(t, 60*time.Second, "TLSRoute "+name+" Accepted and ResolvedRefs", func() error {
			rt, err := gw.GatewayV1().TLSRoutes("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			return acceptedAndResolved(rt.Status.Parents)
		})
	}
	var addr string
	testutil.Eventually(t, 120*time.Second, "Gateway edge Programmed with an address and two routes", func() error {
		g, err := gw.GatewayV1().Gateways("default").Get(ctx, "edge", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c := apimeta.FindStatusCondition(g.Status.Conditions, "Programmed"); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Programmed %+v", c)
		}
		if len(g.Status.Listeners) != 1 || g.Status.Listeners[0].AttachedRoutes != 2 ||
			len(g.Status.Listeners[0].SupportedKinds) != 1 || g.Status.Listeners[0].SupportedKinds[0].Kind != "TLSRoute" {
			return fmt.Errorf("listeners %+v", g.Status.Listeners)
		}
		if len(g.Status.Addresses) == 0 {
			return fmt.Errorf("no address")
		}
		addr = g.Status.Addresses[0].Value
		return nil
	})
	curl := func(name, ca string) (string, error) {
		out, err := testenv.Run(l, lab.Client, "curl", "-sS", "--max-time", "3", "--resolve", name+":443:"+addr, "--cacert", filepath.Join(dir, ca),
			"https://"+name+"/sni")
		if err != nil {
			return "", fmt.Errorf("curl https://%s: %v: %s", name, err, out)
		}
		return out, nil
	}
	for _, tc := range []struct{ name, ca, pod string }{
		{"abc.example.com", "abc.pem", "tls-abc"},     // the exact hostname wins over the wildcard
		{"other.example.com", "wild.pem", "tls-wild"}, // only the wildcard covers it
	} {
		testutil.Eventually(t, 60*time.Second, "https://"+tc.name+" reaches "+tc.pod+" with its own certificate", func() error {
			out, err := curl(tc.name, tc.ca)
			if err != nil {
				return err
			}
			var reply struct {
				Pod, Path string
				TLS       *struct{ ServerName string }
			}
			if err := json.Unmarshal([]byte(out), &reply); err != nil {
				return fmt.Errorf("reply %q: %v", out, err)
			}
			if reply.Pod != tc.pod || reply.Path != "/sni" || reply.TLS == nil || reply.TLS.ServerName != tc.name {
				return fmt.Errorf("reply %s", out)
			}
			return nil
		})
	}
	if out, err := curl("tea.example.org", "wild.pem"); err == nil {
		t.Errorf("a server name no TLSRoute covers was answered: %s", out)
	}
}
