package reliability_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The soak's shape: soakMinutesCI minutes (MINIKIT_SOAK_MINUTES, or
// scripts/soak.sh --minutes N) of requests through a ClusterIP (from a pod), a
// NodePort and the Ingress (from the client host) while web scales and rolls
// every churnEvery.
const (
	soakMinutesCI = 2
	churnEvery    = 4 * time.Second
	loadPause     = 10 * time.Millisecond
	// Leak bounds: generous, these catch growth, not noise.
	maxFDGrowth = 50
	// Memory (anonymous RSS: heap and stacks, not the database's mmap) is
	// compared between a warm sample (warmup into the load, once the heap has
	// grown to its working size) and the end: a leak grows after that.
	warmup          = 20 * time.Second
	maxRSSFactor    = 2
	maxThreadGrowth = 30
	// Goroutines: connections still closing when the load stops are allowed for.
	maxGoroutineFactor = 2
	maxGoroutineGrowth = 100
)

// tally counts one path's requests.
type tally struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	first      []string
}

func (t *tally) fail(msg string) {
	t.failed.Add(1)
	t.mu.Lock()
	if len(t.first) < 10 {
		t.first = append(t.first, time.Now().Format("15:04:05.000")+" "+msg)
	}
	t.mu.Unlock()
}

func TestSoak(t *testing.T) {
	minutes := envInt(t, "MINIKIT_SOAK_MINUTES", soakMinutesCI)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	l := testenv.NewLab(t, 2)
	c := labClient(t, l, 10*time.Second)
	ctx := context.Background()

	// A longer preStop than the other tests: the endpoint must leave every
	// node's rules (API, endpoints controller, both proxies, the Ingress)
	// while the process still serves, also on a CI machine busy with
	// race-built tests in parallel.
	web := webDeployment("web", 3)
	web.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr(int64(10))
	web.Spec.Template.Spec.Containers[0].Lifecycle.PreStop.Sleep.Seconds = 5
	if _, err := c.AppsV1().Deployments("default").Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*corev1.Service{service("web", "web", corev1.ServiceTypeClusterIP), service("web-np", "web", corev1.ServiceTypeNodePort)} {
		if _, err := c.CoreV1().Services("default").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	prefix := networkingv1.PathTypePrefix
	ing := &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: networkingv1.IngressSpec{
		IngressClassName: ptr("nginx"),
		Rules: []networkingv1.IngressRule{{Host: "web.example", IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
			Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: &prefix, Backend: networkingv1.IngressBackend{
				Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Name: "http"}}}}}}}}}}}
	if _, err := c.NetworkingV1().Ingresses("default").Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Pods("default").Create(ctx, sleeper("loader", "node1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	loader := testenv.WaitPodReady(t, c, "default", "loader")
	if err := waitDeployment(ctx, c, "web", 90*time.Second); err != nil {
		t.Fatal(err)
	}
	svc, err := c.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	np, err := c.CoreV1().Services("default").Get(ctx, "web-np", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ingressNP int32
	testutil.Eventually(t, 30*time.Second, "the ingress controller's NodePort", func() error {
		s, err := c.CoreV1().Services("ingress-nginx").Get(ctx, "ingress-nginx-controller", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, p := range s.Spec.Ports {
			if p.Name == "http" {
				ingressNP = p.NodePort
			}
		}
		if ingressNP == 0 {
			return fmt.Errorf("no http nodePort in %+v", s.Spec.Ports)
		}
		return nil
	})

	podNS := testenv.SandboxName(t, c, loader)
	clientNS := lab.NS(l.Name(), lab.Client)
	type target struct{ name, ns, url, host string }
	targets := []target{
		{"ClusterIP from pod loader", podNS, "http://" + svc.Spec.ClusterIP + "/", ""},
		{"NodePort on node1 from the client", clientNS, fmt.Sprintf("http://%s:%d/", l.Addr("node1"), np.Spec.Ports[0].NodePort), ""},
		{"NodePort on node2 from the client", clientNS, fmt.Sprintf("http://%s:%d/", l.Addr("node2"), np.Spec.Ports[0].NodePort), ""},
		{"Ingress via node2's NodePort from the client", clientNS, fmt.Sprintf("http://%s:%d/", l.Addr("node2"), ingressNP), "web.example"},
	}
	for _, tg := range targets {
		testutil.Eventually(t, 30*time.Second, tg.name+" answers", func() error {
			body, err := httpGet(nsHTTPClient(tg.ns, 5*time.Second), tg.url, tg.host)
			if err == nil && !strings.Contains(body, "pod=web-") {
				err = fmt.Errorf("answered %.100q", body)
			}
			return err
		})
	}

	hosts := []string{"node1", "node2"}
	start := map[string]procStats{}
	for _, h := range hosts {
		s, err := readProcStats(l.PID(h))
		if err != nil {
			t.Fatal(err)
		}
		if s.Goroutines, err = readGoroutines(lab.NS(l.Name(), h)); err != nil {
			t.Fatal(err)
		}
		start[h] = s
		t.Logf("%s minikit (pid %d) at start: %s", h, l.PID(h), s)
	}

	// The load: two workers per path, a new connection per request, as curl loops.
	tallies := make([]*tally, len(targets))
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var wg sync.WaitGroup
	for i, tg := range targets {
		tallies[i] = &tally{}
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				client := nsHTTPClient(tg.ns, 5*time.Second)
				for loadCtx.Err() == nil {
					body, err := httpGet(client, tg.url, tg.host)
					switch {
					case err != nil:
						tallies[i].fail(err.Error())
					case !strings.Contains(body, "pod=web-"):
						tallies[i].fail(fmt.Sprintf("answered %.100q", body))
					default:
						tallies[i].ok.Add(1)
					}
					time.Sleep(loadPause)
				}
			}()
		}
	}

	// The churn: scale, rollout restart, env change, in turn, every churnEvery.
	soakFor := time.Duration(minutes) * time.Minute
	t.Logf("soaking for %v (MINIKIT_SOAK_MINUTES=%d), churn every %v, seed %d", soakFor, minutes, churnEvery, seed)
	began := time.Now()
	var churns []string
	warm := map[string]procStats{}
	for i := 0; time.Since(began) < soakFor; i++ {
		if len(warm) == 0 && time.Since(began) >= warmup {
			for _, h := range hosts {
				s, err := readProcStats(l.PID(h))
				if err == nil {
					s.Goroutines, err = readGoroutines(lab.NS(l.Name(), h))
				}
				if err != nil {
					t.Fatal(err)
				}
				warm[h] = s
				t.Logf("%s minikit (pid %d) after %v of load: %s", h, l.PID(h), warmup, s)
			}
		}
		var what string
		var err error
		switch i % 3 {
		case 0:
			n := int32(2 + rng.IntN(4))
			what = fmt.Sprintf("scale to %d", n)
			err = testenv.Scale(ctx, c, "default", "web", n)
		case 1:
			what = "rollout restart"
			patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
			_, err = c.AppsV1().Deployments("default").Patch(ctx, "web", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		case 2:
			what = "env change"
			patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"echo","env":[{"name":"SOAK_ROUND","value":"%d"}]}]}}}}`, i)
			_, err = c.AppsV1().Deployments("default").Patch(ctx, "web", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		}
		if err != nil {
			t.Errorf("churn %d (%s): %v", i, what, err)
		}
		churns = append(churns, what)
		time.Sleep(churnEvery)
	}
	if err := waitDeployment(ctx, c, "web", 120*time.Second); err != nil {
		t.Error(err)
	}
	stopLoad()
	wg.Wait()
	elapsed := time.Since(began)

	var total, failed int64
	for i, tg := range targets {
		ok, bad := tallies[i].ok.Load(), tallies[i].failed.Load()
		total, failed = total+ok+bad, failed+bad
		t.Logf("%s: %d requests, %d failed", tg.name, ok+bad, bad)
		if bad > 0 {
			t.Errorf("%s: %d of %d requests failed through ready endpoints; first:\n%s", tg.name, bad, ok+bad, strings.Join(tallies[i].first, "\n"))
		}
		if ok == 0 {
			t.Errorf("%s: no request succeeded: not a load", tg.name)
		}
	}
	t.Logf("soak: %d requests, %d failed in %v, %d changes to web (%s)", total, failed, elapsed.Round(time.Second), len(churns), summarize(churns))
	for _, h := range hosts {
		end, err := readProcStats(l.PID(h))
		if err != nil {
			t.Fatal(err)
		}
		if end.Goroutines, err = readGoroutines(lab.NS(l.Name(), h)); err != nil {
			t.Fatal(err)
		}
		s, w := start[h], warm[h]
		t.Logf("%s minikit (pid %d): start %s; warm %s; end %s", h, l.PID(h), s, w, end)
		if end.FDs > s.FDs+maxFDGrowth {
			t.Errorf("%s: open files grew from %d to %d", h, s.FDs, end.FDs)
		}
		if float64(end.AnonKiB) > maxRSSFactor*float64(w.AnonKiB) {
			t.Errorf("%s: anonymous RSS grew from %d KiB after %v of load to %d KiB", h, w.AnonKiB, warmup, end.AnonKiB)
		}
		if end.Threads > s.Threads+maxThreadGrowth {
			t.Errorf("%s: threads grew from %d to %d", h, s.Threads, end.Threads)
		}
		if end.Goroutines > maxGoroutineFactor*w.Goroutines+maxGoroutineGrowth {
			t.Errorf("%s: goroutines grew from %d after %v of load to %d", h, w.Goroutines, warmup, end.Goroutines)
		}
	}
	if os.Getenv("MINIKIT_SOAK_REPORT") != "" {
		f, err := os.OpenFile(os.Getenv("MINIKIT_SOAK_REPORT"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err == nil {
			fmt.Fprintf(f, "soak %v: %d requests, %d failed, %d changes\n", elapsed.Round(time.Second), total, failed, len(churns))
			f.Close()
		}
	}
}

func summarize(list []string) string {
	count := map[string]int{}
	var order []string
	for _, s := range list {
		k := s
		if strings.HasPrefix(s, "scale") {
			k = "scale"
		}
		if count[k] == 0 {
			order = append(order, k)
		}
		count[k]++
	}
	var out []string
	for _, k := range order {
		out = append(out, fmt.Sprintf("%d× %s", count[k], k))
	}
	return strings.Join(out, ", ")
}
