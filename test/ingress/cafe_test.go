// Package ingress_test runs the chapter's Ingress examples in a lab, as a student
// would: manifests applied with minikit's kubectl, requests made with curl from
// the lab's client host, through a node's NodePort (the service proxy DNATs to a
// node's controller, which proxies to a pod) or straight to a node's controller.
package ingress_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/ingress"
	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// kubectl runs minikit's built-in kubectl against the lab, with stdin.
func kubectl(t *testing.T, l *lab.Lab, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(testenv.Minikit(t), append([]string{"--kubeconfig", l.Kubeconfig()}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func applyFile(t *testing.T, l *lab.Lab, path string) string {
	t.Helper()
	out, err := kubectl(t, l, "", "apply", "-f", path)
	if err != nil {
		t.Fatalf("kubectl apply -f %s: %v\n%s", path, err, out)
	}
	return out
}

// cafeSecret is cafe-secret.yaml: a kubernetes.io/tls Secret with a self-signed
// certificate for cafe.example.com.
func cafeSecret(t *testing.T) (yaml string, certPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "cafe.example.com"},
		DNSNames: []string{"cafe.example.com"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(1, 0, 0)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	return fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata:\n  name: cafe-secret\n  namespace: default\ntype: kubernetes.io/tls\ndata:\n  tls.crt: %s\n  tls.key: %s\n",
		base64.StdEncoding.EncodeToString(certPEM), base64.StdEncoding.EncodeToString(keyPEM)), certPEM
}

func waitDeployment(t *testing.T, c kubernetes.Interface, name string, replicas int32) {
	t.Helper()
	testutil.Eventually(t, 90*time.Second, "deployment "+name+" available", func() error {
		d, err := c.AppsV1().Deployments("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas != replicas || d.Status.AvailableReplicas != replicas || d.Status.Replicas != replicas {
			return fmt.Errorf("status %+v", d.Status)
		}
		return nil
	})
}

// nodePorts are the NodePorts of ingress-nginx-controller (http, https).
func nodePorts(t *testing.T, c kubernetes.Interface) (int32, int32) {
	t.Helper()
	var svc *corev1.Service
	testutil.Eventually(t, 30*time.Second, "ingress-nginx-controller service", func() error {
		var err error
		svc, err = c.CoreV1().Services("ingress-nginx").Get(context.Background(), "ingress-nginx-controller", metav1.GetOptions{})
		return err
	})
	var h, s int32
	for _, p := range svc.Spec.Ports {
		switch p.Name {
		case "http":
			h = p.NodePort
		case "https":
			s = p.NodePort
		}
	}
	if svc.Spec.Type != corev1.ServiceTypeNodePort || h == 0 || s == 0 {
		t.Fatalf("ingress-nginx-controller = %+v", svc.Spec)
	}
	return h, s
}

// curl runs curl on the lab's client host and returns the response (head and
// body, with -i) .
func curl(l *lab.Lab, args ...string) (string, error) {
	argv := append([]string{"curl", "-sS", "-i", "--max-time", "5"}, args...)
	return testenv.Run(l, lab.Client, argv...)
}

// podNames lists the pods of an app.
func podNames(t *testing.T, c kubernetes.Interface, app string) []string {
	t.Helper()
	pods, err := c.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	return names
}

func serverName(resp string) string {
	for _, l := range strings.Split(resp, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "Server name: "); ok {
			return v
		}
	}
	return ""
}

func statusCode(resp string) string {
	f := strings.Fields(resp)
	if len(f) > 1 && strings.HasPrefix(f[0], "HTTP/") {
		return f[1]
	}
	return ""
}

func header(resp, name string) string {
	for _, l := range strings.Split(resp, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok && strings.EqualFold(k, name) {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// TestCafe is the chapter's example verbatim: the cafe Deployments and Services,
// cafe-secret, and the extensions/v1beta1 cafe-ingress; then curl from the client
// with --resolve, over HTTPS through a node's NodePort.
func TestCafe(t *testing.T) {
	l := testenv.NewLab(t, 2)
	c := testenv.Client(t, l)
	applyFile(t, l, "testdata/cafe.yaml")
	secretYAML, certPEM := cafeSecret(t)
	secretFile := filepath.Join(t.TempDir(), "cafe-secret.yaml")
	os.WriteFile(secretFile, []byte(secretYAML), 0o600)
	applyFile(t, l, secretFile)
	out := applyFile(t, l, "testdata/cafe-ingress.yaml")
	if !strings.Contains(out, "Warning: extensions/v1beta1 Ingress is deprecated in v1.14+, unavailable in v1.22+; use networking.k8s.io/v1 Ingress") ||
		!strings.Contains(out, "cafe-ingress created") {
		t.Errorf("kubectl apply cafe-ingress.yaml printed %q, want the deprecation warning and created", out)
	}
	waitDeployment(t, c, "tea", 3)
	waitDeployment(t, c, "coffee", 2)
	httpNP, httpsNP := nodePorts(t, c)
	teas, coffees := podNames(t, c, "tea"), podNames(t, c, "coffee")

	// The Ingress gets the nodes' addresses as its status, as kubectl get ingress shows.
	testutil.Eventually(t, 30*time.Second, "cafe-ingress status", func() error {
		out, err := kubectl(t, l, "", "get", "ingress", "cafe-ingress")
		if err != nil || !strings.Contains(out, l.Addr("node1").String()) || !strings.Contains(out, "cafe.example.com") || !strings.Contains(out, "80, 443") {
			return fmt.Errorf("kubectl get ingress: %v\n%s", err, out)
		}
		return nil
	})

	check := func(t *testing.T, node string, httpsPort, httpPort int32) {
		ip := l.Addr(node).String()
		resolve := func(port int32) string { return fmt.Sprintf("cafe.example.com:%d:%s", port, ip) }
		url := func(scheme string, port int32, path string) string {
			return fmt.Sprintf("%s://cafe.example.com:%d%s", scheme, port, path)
		}
		// The first request may race the controllers picking up the objects.
		testutil.Eventually(t, 30*time.Second, "https /tea answers", func() error {
			resp, err := curl(l, "--resolve", resolve(httpsPort), url("https", httpsPort, "/tea"), "--insecure")
			if err != nil || statusCode(resp) != "200" {
				return fmt.Errorf("%v: %s", err, resp)
			}
			return nil
		})
		seen := map[string]bool{}
		for i := 0; i < 6; i++ {
			resp, err := curl(l, "--resolve", resolve(httpsPort), url("https", httpsPort, "/tea"), "--insecure")
			name := serverName(resp)
			if err != nil || statusCode(resp) != "200" || !contains(teas, name) || !strings.Contains(resp, "URI: /tea") {
				t.Fatalf("/tea: %v\n%s\nwant a tea pod (%v)", err, resp, teas)
			}
			seen[name] = true
		}
		if len(seen) < 2 {
			t.Errorf("6 requests to /tea reached only %v; want them spread over the endpoints", seen)
		}
		resp, err := curl(l, "--resolve", resolve(httpsPort), url("https", httpsPort, "/coffee"), "--insecure")
		if err != nil || statusCode(resp) != "200" || !contains(coffees, serverName(resp)) {
			t.Errorf("/coffee: %v\n%s\nwant a coffee pod (%v)", err, resp, coffees)
		}
		resp, err = curl(l, "--resolve", resolve(httpsPort), url("https", httpsPort, "/"), "--insecure")
		if err != nil || statusCode(resp) != "404" || !strings.Contains(resp, "404 Not Found") {
			t.Errorf("/: %v\n%s\nwant 404", err, resp)
		}
		// The certificate is cafe-secret's, picked by SNI.
		caFile := filepath.Join(t.TempDir(), "cafe.crt")
		os.WriteFile(caFile, certPEM, 0o644)
		if resp, err := curl(l, "--resolve", resolve(httpsPort), "--cacert", caFile, url("https", httpsPort, "/tea")); err != nil || statusCode(resp) != "200" {
			t.Errorf("/tea verified against cafe-secret's certificate: %v\n%s", err, resp)
		}
		// Plain HTTP redirects to HTTPS with 308 (ingress-nginx's ssl-redirect), without the NodePort.
		resp, err = curl(l, "--resolve", resolve(httpPort), url("http", httpPort, "/tea"))
		if err != nil || statusCode(resp) != "308" || header(resp, "Location") != "https://cafe.example.com/tea" {
			t.Errorf("http /tea: %v\n%s\nwant 308 to https://cafe.example.com/tea", err, resp)
		}
		// HTTP/2 from the client.
		resp, err = curl(l, "--http2", "--resolve", resolve(httpsPort), url("https", httpsPort, "/coffee"), "--insecure")
		if err != nil || !strings.HasPrefix(resp, "HTTP/2 200") {
			t.Errorf("HTTP/2 /coffee: %v\n%s", err, resp)
		}
	}
	t.Run("straight to each node's controller on 10443", func(t *testing.T) {
		for _, n := range []string{"node1", "node2"} {
			check(t, n, ingress.DefaultHTTPSPort, ingress.DefaultHTTPPort)
		}
	})
	t.Run("through each node's NodePort, as in the chapter", func(t *testing.T) {
		for _, n := range []string{"node1", "node2"} {
			// The proxy's first sync may land after the pods are ready:
			// wait for the NodePort rules themselves, as a student would
			// look for them with iptables-save.
			testutil.Eventually(t, 30*time.Second, n+"'s KUBE-NODEPORTS rules for the controller's NodePorts", func() error {
				out, _ := testenv.Run(l, n, "iptables-save", "-t", "nat")
			ports:
				for _, p := range []int32{httpNP, httpsNP} {
					for _, line := range strings.Split(out, "\n") {
						if strings.HasPrefix(line, "-A KUBE-NODEPORTS ") && strings.Contains(line, fmt.Sprintf("--dport %d ", p)) {
							continue ports
						}
					}
					return fmt.Errorf("no KUBE-NODEPORTS rule for port %d: the service proxy has not synced\n%s", p, out)
				}
				return nil
			})
		}
		for _, n := range []string{"node1", "node2"} {
			check(t, n, httpsNP, httpNP)
		}
	})
	t.Run("nginx.conf on the node", func(t *testing.T) {
		conf, err := os.ReadFile(filepath.Join(l.Dir(), "node1", "ingress", "conf", "nginx.conf"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"upstream default-tea-svc-80 {", "server_name cafe.example.com;", `location "/tea/" {`, "return 308 https://$host$request_uri;"} {
			if !bytes.Contains(conf, []byte(want)) {
				t.Errorf("nginx.conf lacks %q", want)
			}
		}
		if t.Failed() {
			t.Logf("nginx.conf:\n%s", conf)
		}
	})
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
