package gateway_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
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
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"
)

// selfSigned is a PEM certificate for names and its key.
func selfSigned(t *testing.T, names ...string) (crt, key []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
}

// An HTTPS Gateway from the lab's client host, as a student's curl
// --resolve reaches it: each listener's hostname gets its own certificate by
// SNI (curl --cacert with that certificate alone verifies it), the request
// is routed after termination; a Secret made malformed turns the listener's
// ResolvedRefs False/InvalidCertificateRef and Programmed False while the
// HTTP listener beside it keeps serving; a cross-namespace certificateRef is
// RefNotPermitted until a ReferenceGrant allows it; and a renewed Secret is
// served on the next connection, with no restart.
func TestGatewayHTTPSFromTheClientHost(t *testing.T) {
	l := testenv.NewLab(t, 2)
	c := testenv.Client(t, l)
	ctx := context.Background()
	gw := gatewayClient(t, l)
	dir := t.TempDir()
	secret := func(ns, name, file string, names ...string) *corev1.Secret {
		crt, key := selfSigned(t, names...)
		if err := os.WriteFile(filepath.Join(dir, file), crt, 0o644); err != nil {
			t.Fatal(err)
		}
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key}}
	}
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "certs"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*corev1.Secret{secret("default", "cafe", "cafe.pem", "cafe.example.com"), secret("certs", "tea", "tea.pem", "*.tea.example.com")} {
		if _, err := c.CoreV1().Secrets(s.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	labels := map[string]string{"app": "echo"}
	pod := echoBasicPod("echo-1", labels)
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitPodReady(t, c, "default", "echo-1")
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 8080, TargetPort: intstr.FromInt32(3000)}}}}
	if _, err := c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ref := func(ns, name string) gatewayv1.SecretObjectReference {
		r := gatewayv1.SecretObjectReference{Name: gatewayv1.ObjectName(name)}
		if ns != "" {
			r.Namespace = (*gatewayv1.Namespace)(&ns)
		}
		return r
	}
	host := func(h string) *gatewayv1.Hostname { return (*gatewayv1.Hostname)(&h) }
	g := &gatewayv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "cafe", Namespace: "default"},
		Spec: gatewayv1.GatewaySpec{GatewayClassName: gateway.ClassName, Listeners: []gatewayv1.Listener{
			{Name: "http", Port: 80, Protocol: gatewayv1.HTTPProtocolType},
			{Name: "cafe", Port: 443, Protocol: gatewayv1.HTTPSProtocolType, Hostname: host("cafe.example.com"),
				TLS: &gatewayv1.ListenerTLSConfig{CertificateRefs: []gatewayv1.SecretObjectReference{ref("", "cafe")}}},
			{Name: "tea", Port: 443, Protocol: gatewayv1.HTTPSProtocolType, Hostname: host("*.tea.example.com"),
				TLS: &gatewayv1.ListenerTLSConfig{CertificateRefs: []gatewayv1.SecretObjectReference{ref("certs", "tea")}}},
		}}}
	if _, err := gw.GatewayV1().Gateways("default").Create(ctx, g, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	port := gatewayv1.PortNumber(8080)
	rt := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Name: "all", Namespace: "default"},
		Spec: gatewayv1.HTTPRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "cafe"}}},
			Rules: []gatewayv1.HTTPRouteRule{{BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
				BackendObjectReference: gatewayv1.BackendObjectReference{Name: "echo", Port: &port}}}}}}}}
	if _, err := gw.GatewayV1().HTTPRoutes("default").Create(ctx, rt, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// listener is "Status/Reason" of a listener's condition.
	listener := func(name gatewayv1.SectionName, typ string) (string, string, error) {
		g, err := gw.GatewayV1().Gateways("default").Get(ctx, "cafe", metav1.GetOptions{})
		if err != nil {
			return "", "", err
		}
		for _, ls := range g.Status.Listeners {
			if ls.Name == name {
				if c := apimeta.FindStatusCondition(ls.Conditions, typ); c != nil {
					return string(c.Status) + "/" + c.Reason, c.Message, nil
				}
			}
		}
		return "", "", fmt.Errorf("listener %s has no %s condition yet", name, typ)
	}
	waitListener := func(name gatewayv1.SectionName, typ, want string) {
		t.Helper()
		testutil.Eventually(t, 60*time.Second, fmt.Sprintf("listener %s %s %s", name, typ, want), func() error {
			got, msg, err := listener(name, typ)
			if err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("%s: %s", got, msg)
			}
			return nil
		})
	}
	// The tea certificate is in another namespace: not permitted yet.
	waitListener("tea", "ResolvedRefs", "False/RefNotPermitted")
	waitListener("tea", "Programmed", "False/Invalid")
	waitListener("cafe", "Programmed", "True/Programmed")
	var addr string
	testutil.Eventually(t, 120*time.Second, "Gateway cafe Programmed with an address", func() (err error) {
		addr, err = programmedAddress(ctx, gw, "cafe")
		return err
	})
	// curl verifies the server's certificate against one file: the listener's own.
	curlHTTPS := func(name, ca string) (string, error) {
		out, err := testenv.Run(l, lab.Client, "curl", "-sS", "--max-time", "3", "--resolve", name+":443:"+addr, "--cacert", filepath.Join(dir, ca),
			"https://"+name+"/coffee")
		if err != nil {
			return "", fmt.Errorf("curl https://%s: %v: %s", name, err, out)
		}
		var reply struct{ Pod, Path, Host string }
		if err := json.Unmarshal([]byte(out), &reply); err != nil {
			return "", fmt.Errorf("reply %q: %v", out, err)
		}
		if reply.Pod != "echo-1" || reply.Path != "/coffee" || reply.Host != name {
			return "", fmt.Errorf("reply %s", out)
		}
		return out, nil
	}
	eventually := func(what string, f func() error) {
		t.Helper()
		testutil.Eventually(t, 60*time.Second, what, f)
	}
	eventually("https://cafe.example.com served with the cafe certificate", func() error { _, err := curlHTTPS("cafe.example.com", "cafe.pem"); return err })
	if _, err := curlHTTPS("green.tea.example.com", "tea.pem"); err == nil {
		t.Errorf("the tea listener is served before a ReferenceGrant allows its certificate")
	}

	// A ReferenceGrant as v1beta1, the version most manifests still use.
	grant := &gatewayv1beta1.ReferenceGrant{ObjectMeta: metav1.ObjectMeta{Name: "gateways-from-default", Namespace: "certs"},
		Spec: gatewayv1beta1.ReferenceGrantSpec{From: []gatewayv1beta1.ReferenceGrantFrom{{Group: gatewayv1.GroupName, Kind: "Gateway", Namespace: "default"}},
			To: []gatewayv1beta1.ReferenceGrantTo{{Kind: "Secret"}}}}
	if _, err := gw.GatewayV1beta1().ReferenceGrants("certs").Create(ctx, grant, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitListener("tea", "ResolvedRefs", "True/ResolvedRefs")
	eventually("https://green.tea.example.com served with the wildcard certificate", func() error {
		_, err := curlHTTPS("green.tea.example.com", "tea.pem")
		return err
	})

	// A malformed Secret: the cafe listener is not valid, HTTP still is.
	bad := secret("default", "cafe", "unused.pem", "cafe.example.com")
	bad.Data[corev1.TLSCertKey] = []byte("Hello world\n")
	if _, err := c.CoreV1().Secrets("default").Update(ctx, bad, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitListener("cafe", "ResolvedRefs", "False/InvalidCertificateRef")
	waitListener("cafe", "Programmed", "False/Invalid")
	eventually("https://cafe.example.com refused", func() error {
		if out, err := curlHTTPS("cafe.example.com", "cafe.pem"); err == nil {
			return fmt.Errorf("still served: %s", out)
		}
		return nil
	})
	if out, err := testenv.Run(l, lab.Client, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "3", "-H", "Host: cafe.example.com",
		"http://"+addr+"/coffee"); err != nil || out != "200" {
		t.Errorf("the HTTP listener beside an invalid HTTPS one: %q %v, want 200", out, err)
	}

	// A renewed certificate is served on the next connection.
	if _, err := c.CoreV1().Secrets("default").Update(ctx, secret("default", "cafe", "renewed.pem", "cafe.example.com"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitListener("cafe", "ResolvedRefs", "True/ResolvedRefs")
	eventually("https://cafe.example.com served with the renewed certificate", func() error {
		_, err := curlHTTPS("cafe.example.com", "renewed.pem")
		return err
	})
}
