package ingress_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/ingress"
	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"
	"k8s.io/client-go/kubernetes"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func ptr[T any](v T) *T { return &v }

// webApp creates Deployment, Service and Ingress "web" (host web.example, Prefix /).
func webApp(t *testing.T, l *lab.Lab, replicas int32) {
	t.Helper()
	c := testenv.Client(t, l)
	ctx := context.Background()
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: appsv1.DeploymentSpec{
		Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "web", Image: "nginxdemos/nginx-hello:plain-text", Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
				PeriodSeconds: 1},
		}}}},
	}}
	if _, err := c.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{Selector: labels,
		Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	if _, err := c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: networkingv1.IngressSpec{
		IngressClassName: ptr("nginx"),
		Rules: []networkingv1.IngressRule{{Host: "web.example", IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
			Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: ptr(networkingv1.PathTypePrefix), Backend: networkingv1.IngressBackend{
				Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Name: "http"}}}}}}}}}}}
	if _, err := c.NetworkingV1().Ingresses("default").Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitDeployment(t, c, "web", replicas)
}

// clientHTTP is an HTTP client whose connections are made from the lab's client
// host (its sockets live in that network namespace).
func clientHTTP(l *lab.Lab) *http.Client {
	nsPath := netns.NetNSPath(lab.NS(l.Name(), lab.Client))
	tr := &http.Transport{
		MaxIdleConnsPerHost: 64,
		DisableCompression:  true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := netns.DoPath(nsPath, func() error {
				var err error
				c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// load sends requests from workers until ctx ends and counts the outcome.
type load struct {
	wait       func()
	ok, failed atomic.Int64
	mu         sync.Mutex
	servers    map[string]int
	errors     []string
}

func runLoad(ctx context.Context, client *http.Client, urls []string, host string, workers int) *load {
	ld := &load{servers: map[string]int{}}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		url := urls[w%len(urls)]
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(context.Background(), "GET", url, nil)
				req.Host = host
				resp, err := client.Do(req)
				if err != nil {
					ld.fail(err.Error())
					continue
				}
				body, rerr := io.ReadAll(resp.Body)
				resp.Body.Close()
				if rerr != nil || resp.StatusCode != 200 {
					ld.fail(fmt.Sprintf("status %d: %v %.200s", resp.StatusCode, rerr, body))
					continue
				}
				ld.ok.Add(1)
				ld.mu.Lock()
				ld.servers[serverName(string(body))]++
				ld.mu.Unlock()
			}
		}()
	}
	ld.wait = wg.Wait
	return ld
}

func (ld *load) fail(msg string) {
	ld.failed.Add(1)
	ld.mu.Lock()
	if len(ld.errors) < 10 {
		ld.errors = append(ld.errors, time.Now().Format("15:04:05.000")+" "+msg)
	}
	ld.mu.Unlock()
}

// TestRollingUpdateUnderLoad replaces every backend pod while clients keep
// sending requests (through a NodePort and straight to a node's controller): no
// request may fail. The controller must follow the
// endpoints (new pods in when ready, old ones out when terminating) and retry a
// request whose endpoint went away before it was answered.
func TestRollingUpdateUnderLoad(t *testing.T) {
	l := testenv.NewLab(t, 2)
	c := testenv.Client(t, l)
	webApp(t, l, 3)
	old := podNames(t, c, "web")
	client := clientHTTP(l)
	url := fmt.Sprintf("http://%s:%d/", l.Addr("node1"), ingress.DefaultHTTPPort)
	testutil.Eventually(t, 30*time.Second, "web.example served", func() error {
		req, _ := http.NewRequest("GET", url, nil)
		req.Host = "web.example"
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})

	// Half the clients take the chapter's path (node2's NodePort, DNATed by the
	// service proxy to a node's controller), half go straight to node1's.
	httpNP, _ := nodePorts(t, c)
	npURL := fmt.Sprintf("http://%s:%d/", l.Addr("node2"), httpNP)
	testutil.Eventually(t, 30*time.Second, "web.example served through the NodePort", func() error {
		req, _ := http.NewRequest("GET", npURL, nil)
		req.Host = "web.example"
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	ld := runLoad(ctx, client, []string{url, npURL}, "web.example", 8)
	t.Logf("%s load started", start.Format("15:04:05.000"))
	time.Sleep(3 * time.Second)
	t.Logf("%s rolling out; old pods %v", time.Now().Format("15:04:05.000"), podIPs(t, c, "web"))
	// kubectl rollout restart: a new template, so every pod is replaced.
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339))
	if _, err := c.AppsV1().Deployments("default").Patch(context.Background(), "web", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, "rollout replaced every pod", func() error {
		now := podNames(t, c, "web")
		for _, n := range now {
			if contains(old, n) {
				return fmt.Errorf("old pod %s still there (%v)", n, now)
			}
		}
		d, err := c.AppsV1().Deployments("default").Get(context.Background(), "web", metav1.GetOptions{})
		if err != nil || d.Status.UpdatedReplicas != 3 || d.Status.AvailableReplicas != 3 {
			return fmt.Errorf("deployment status %+v (%v)", d.Status, err)
		}
		return nil
	})
	rolled := time.Since(start)
	t.Logf("%s rolled out; new pods %v", time.Now().Format("15:04:05.000"), podIPs(t, c, "web"))
	<-ctx.Done()
	ld.wait()
	fresh := podNames(t, c, "web")
	var sawOld, sawNew bool
	for name := range ld.servers {
		sawOld = sawOld || contains(old, name)
		sawNew = sawNew || contains(fresh, name)
	}
	t.Logf("%d requests ok, %d failed in 20s; rollout done after %v; answered by %v", ld.ok.Load(), ld.failed.Load(), rolled.Round(time.Millisecond), ld.servers)
	if ld.failed.Load() > 0 {
		t.Errorf("%d requests failed during the rollout, first: %s", ld.failed.Load(), strings.Join(ld.errors, "\n"))
	}
	if !sawOld || !sawNew {
		t.Errorf("answers came from old pods %v, new pods %v; want both (old %v, new %v)", sawOld, sawNew, old, fresh)
	}
	if ld.ok.Load() < 500 {
		t.Errorf("only %d requests in 20s: not a steady load", ld.ok.Load())
	}
}

// podIPs lists an app's pods as name=IP.
func podIPs(t *testing.T, c kubernetes.Interface, app string) []string {
	t.Helper()
	pods, err := c.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		out = append(out, p.Name+"="+p.Status.PodIP)
	}
	return out
}
