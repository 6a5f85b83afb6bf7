package ui_test

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/internal/topology"
	"github.com/minikit/minikit/test/testenv"

	"github.com/chromedp/chromedp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkUI measures the page against a lab of MINIKIT_BENCH_UI_NODES
// nodes (3) running a Deployment of MINIKIT_BENCH_UI_PODS pods (30):
//
//   - first render: the page opened -> every host and pod of the lab drawn;
//   - update: the Deployment scaled up by MINIKIT_BENCH_UI_ADD pods (10) ->
//     all of them drawn with their IPs, and per pod the time from its IP in
//     the API (a watch) to the page drawing it (the ui's own share);
//   - the reference: one full read of the lab (Collector.Collect, what
//     `lab graph` does), which the ui avoids on a pod change.
//
// Run it with scripts/bench-ui.sh.
func BenchmarkUI(b *testing.B) {
	nodes := envInt("MINIKIT_BENCH_UI_NODES", 3)
	pods := envInt("MINIKIT_BENCH_UI_PODS", 30)
	add := envInt("MINIKIT_BENCH_UI_ADD", 10)
	l := testenv.NewLab(b, nodes)
	c := testenv.Client(b, l)
	deploy(b, c, "web", int32(pods))
	testutil.Eventually(b, 10*time.Minute, fmt.Sprintf("%d web pods with IPs", pods), func() error {
		if ps, err := runningPods(c, "web"); err != nil || len(ps) != pods {
			return fmt.Errorf("%d pods: %v", len(ps), err)
		}
		return nil
	})
	all := func() (int, error) {
		pl, err := c.CoreV1().Pods("").List(bg, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		n := 0
		for _, p := range pl.Items {
			if !p.Spec.HostNetwork && p.Status.PodIP != "" && p.DeletionTimestamp == nil {
				n++
			}
		}
		return n, nil
	}
	want, err := all()
	if err != nil {
		b.Fatal(err)
	}

	st, err := lab.Load(l.Name(), l.Dir())
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	g, err := topology.NewCollector(st, c, nil).Collect(bg)
	if err != nil {
		b.Fatal(err)
	}
	collect := time.Since(start)

	url := startUI(b, l)
	ctx := newBrowser(b)
	type counts struct {
		Hosts int `json:"hosts"`
		Pods  int `json:"pods"`
	}
	const countJS = `({hosts: document.querySelectorAll("svg .host").length - document.querySelectorAll("svg .host-pod").length, pods: document.querySelectorAll("svg .host-pod").length})`
	// The browser is started first: its start is not the page's.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		b.Fatal(err)
	}
	start = time.Now()
	if err := chromedp.Do(ctx, chromedp.Navigate(url+"/")); err != nil {
		b.Fatal(err)
	}
	infra := nodes + 3 // underlay, nodes, client, external
	for {
		n, err := chromedp.Run(ctx, chromedp.Evaluate[counts](countJS))
		if err != nil {
			b.Fatal(err)
		}
		if n.Hosts == infra && n.Pods == want {
			break
		}
		if time.Since(start) > 2*time.Minute {
			b.Fatalf("after 2m the page draws %d hosts and %d pods, want %d and %d", n.Hosts, n.Pods, infra, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	first := time.Since(start)
	type render struct {
		End   float64 `json:"end"`
		MS    float64 `json:"ms"`
		Hosts int     `json:"hosts"`
		Pods  int     `json:"pods"`
	}
	renders, err := chromedp.Run(ctx, chromedp.Evaluate[[]render](`window.minikitUI.renders`))
	if err != nil || len(renders) == 0 {
		b.Fatalf("render timings: %v", err)
	}
	// The first render that drew everything, in the page's own clock
	// (milliseconds since the navigation started).
	firstInPage := renders[len(renders)-1]
	for _, r := range renders {
		if r.Pods == want && r.Hosts == infra {
			firstInPage = r
			break
		}
	}

	// The update: a watch notes when each new pod's IP is in the API; the
	// page is polled for when it draws it.
	before, err := runningPods(c, "web")
	if err != nil {
		b.Fatal(err)
	}
	w, err := c.CoreV1().Pods("default").Watch(bg, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	var mu sync.Mutex
	inAPI := map[string]time.Time{} // name/IP -> when
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted || p.Status.PodIP == "" {
				continue
			}
			if _, old := before[p.Name]; old {
				continue
			}
			key := "default/" + p.Name + " " + p.Status.PodIP
			mu.Lock()
			if _, seen := inAPI[key]; !seen {
				inAPI[key] = time.Now()
			}
			mu.Unlock()
		}
	}()
	drawnAt := map[string]time.Time{}
	scaled := time.Now()
	scale(b, c, "web", int32(pods+add))
	for {
		texts, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("svg .host-pod")].map(e => e.querySelector(".name").textContent + " " + e.querySelector(".addr").textContent)`))
		if err != nil {
			b.Fatal(err)
		}
		now := time.Now()
		mu.Lock()
		for _, t := range texts {
			if _, ok := inAPI[t]; ok {
				if _, seen := drawnAt[t]; !seen {
					drawnAt[t] = now
				}
			}
		}
		n := len(inAPI)
		mu.Unlock()
		if n == add && len(drawnAt) == add {
			break
		}
		if time.Since(scaled) > 5*time.Minute {
			b.Fatalf("after 5m: %d new pods in the API, %d drawn", n, len(drawnAt))
		}
		time.Sleep(10 * time.Millisecond)
	}
	update := time.Since(scaled)
	var ui []time.Duration
	mu.Lock()
	for k, d := range drawnAt {
		ui = append(ui, d.Sub(inAPI[k]))
	}
	mu.Unlock()
	slices.Sort(ui)
	renders, _ = chromedp.Run(ctx, chromedp.Evaluate[[]render](`window.minikitUI.renders`))
	var ms []string
	for _, r := range renders {
		ms = append(ms, fmt.Sprintf("%.0f", r.MS))
	}

	b.ReportMetric(float64(first.Milliseconds()), "first-render-ms")
	b.ReportMetric(firstInPage.End, "first-render-in-page-ms")
	b.ReportMetric(float64(update.Milliseconds()), "scale-to-drawn-ms")
	b.ReportMetric(float64(ui[len(ui)/2].Milliseconds()), "api-to-drawn-p50-ms")
	b.ReportMetric(float64(ui[len(ui)-1].Milliseconds()), "api-to-drawn-max-ms")
	b.ReportMetric(float64(collect.Milliseconds()), "collect-ms")
	b.ReportMetric(float64(ui[len(ui)-1])/float64(collect), "max-update/collect")
	b.Logf("lab: %d nodes, %d pods with a network namespace (%d hosts, %d links in the graph); +%d pods", nodes, want, len(g.Hosts), len(g.Links), add)
	b.Logf("first render: page opened -> every host and pod drawn %v as the test polls it; in the page's clock the render that drew them all ended %.0f ms after navigation start and took %.0f ms",
		first.Round(time.Millisecond), firstInPage.End, firstInPage.MS)
	b.Logf("update: scaled by %d -> all drawn %v; a pod's IP in the API -> drawn: p50 %v, max %v (all: %s)",
		add, update.Round(time.Millisecond), ui[len(ui)/2].Round(time.Millisecond), ui[len(ui)-1].Round(time.Millisecond), strings.Trim(fmt.Sprint(ui), "[]"))
	b.Logf("reference: one full read of the lab (Collector.Collect) %v; the slowest update took %.2f of that", collect.Round(time.Millisecond), float64(ui[len(ui)-1])/float64(collect))
	b.Logf("render durations in the page (ms): %s", strings.Join(ms, " "))
}
