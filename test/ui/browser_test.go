package ui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/topology"
	"github.com/minikit/minikit/test/testenv"

	"github.com/chromedp/chromedp"
)

// chromium is Debian's package chromium (scripts/deps.sh installs it).
const chromium = "/usr/bin/chromium"

// startUI runs `minikit ui` for the lab on a free loopback port and returns
// the page's address; the process is stopped when the test ends.
func startUI(t testing.TB, l *lab.Lab, args ...string) string {
	t.Helper()
	argv := append([]string{"ui", "--lab", l.Name(), "--listen", "127.0.0.1:0"}, args...)
	cmd := exec.Command(testenv.Minikit(t), argv...)
	var stderr testenv.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("minikit ui's log:\n%s", stderr.String())
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	select {
	case line := <-lines:
		m := regexp.MustCompile(`on (http://127\.0\.0\.1:\d+)/`).FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("minikit ui said %q, not where it serves", line)
		}
		return m[1]
	case <-time.After(60 * time.Second):
		t.Fatalf("minikit ui did not start in 60s:\n%s", stderr.String())
	}
	return ""
}

// newBrowser starts a headless Chromium with a fresh profile that talks to
// nothing but the page: no QUIC, no background or component updates, no
// sync, no first-run work.
func newBrowser(t testing.TB) context.Context {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("this test drives Debian's chromium (%s): install it with scripts/deps.sh (apt-get install chromium): %v", chromium, err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1600, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	return ctx
}

// domHost is a host as the page draws it.
type domHost struct {
	ID    string `json:"id"`
	Class string `json:"class"`
	Text  string `json:"text"`
}

// pageHosts lists the hosts drawn on the page.
func pageHosts(ctx context.Context) ([]domHost, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[[]domHost](`[...document.querySelectorAll("svg .host")].map(e => ({id: e.dataset.id, class: e.getAttribute("class"), text: e.textContent}))`))
}

// pagePods lists the Pods panel's entries' text.
func pagePods(ctx context.Context) ([]string, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#pods li")].map(e => e.textContent)`))
}

// pageHops lists the data-id of every element the page marks as a hop.
func pageHops(ctx context.Context) ([]string, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("svg .hop")].map(e => e.dataset.id)`))
}

// graphOf is the lab as the ui's API has it.
func graphOf(t testing.TB, url string) *topology.Graph {
	t.Helper()
	resp, err := http.Get(url + "/api/graph")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var g topology.Graph
	if err := json.NewDecoder(resp.Body).Decode(&g); err != nil {
		t.Fatal(err)
	}
	return &g
}

// artifactDir is where screenshots go: $MINIKIT_ARTIFACTS, else one new
// temporary directory per test binary that outlives the test.
var artifactDir = sync.OnceValues(func() (string, error) {
	if d := os.Getenv("MINIKIT_ARTIFACTS"); d != "" {
		return d, os.MkdirAll(d, 0o755)
	}
	return os.MkdirTemp("", "minikit-ui-artifacts-")
})

func screenshot(t testing.TB, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100 is PNG
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir, err := artifactDir()
	if err != nil {
		t.Fatalf("the artifacts' directory: %v", err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
}

func httpGet(url string, header map[string]string) (int, string, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return 0, "", err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

func hostsByKind(hs []domHost, kind string) []domHost {
	var out []domHost
	for _, h := range hs {
		if strings.Contains(" "+h.Class+" ", " host-"+kind+" ") {
			out = append(out, h)
		}
	}
	return out
}

func describe(hs []domHost) string {
	var b strings.Builder
	for _, h := range hs {
		fmt.Fprintf(&b, "%s [%s] %q\n", h.ID, h.Class, h.Text)
	}
	return b.String()
}
