package envtestcompat_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/minikit/minikit/pkg/minikittest"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// BenchmarkStartAgainstEnvtest is the same small test, start to done, on
// minikittest.StartAPI and on envtest with a real kube-apiserver and etcd:
// start the control plane, install the CRDs of ../testdata/crds, create one
// custom resource, stop. ns/op is that whole test; rss-MiB is the resident
// set the control plane adds: for envtest its two processes', for minikit
// the growth of this process's with its first API (so run each side in a
// fresh process, -bench with one sub-benchmark at a time, as
// scripts/bench-envtest.sh does). The envtest side needs KUBEBUILDER_ASSETS
// (kube-apiserver and etcd, which scripts/bench-envtest.sh builds from
// k8s.io/kubernetes v1.37.2 and go.etcd.io/etcd v3.7.0).
func BenchmarkStartAgainstEnvtest(b *testing.B) {
	b.Run("minikit", func(b *testing.B) {
		rss0 := selfRSS()
		var rss int64
		for b.Loop() {
			t := &iterTB{TB: b, dir: b.TempDir()}
			cfg := minikittest.StartAPI(t, minikittest.WithCRDs("../testdata/crds"))
			createWidget(b, cfg)
			if rss == 0 {
				rss = selfRSS() - rss0
			}
			t.cleanup()
		}
		b.ReportMetric(float64(rss)/(1<<20), "rss-MiB")
	})
	b.Run("envtest", func(b *testing.B) {
		if os.Getenv("KUBEBUILDER_ASSETS") == "" {
			b.Fatal("KUBEBUILDER_ASSETS must name a directory with kube-apiserver and etcd (scripts/bench-envtest.sh)")
		}
		var rss int64
		for b.Loop() {
			env := &envtest.Environment{CRDDirectoryPaths: []string{"../testdata/crds"}, ErrorIfCRDPathMissing: true}
			cfg, err := env.Start()
			if err != nil {
				b.Fatal(err)
			}
			createWidget(b, cfg)
			if rss == 0 {
				rss = childrenRSS()
			}
			if err := env.Stop(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(rss)/(1<<20), "rss-MiB")
	})
}

// iterTB is the TB of one benchmark iteration: StartAPI's cleanups run at
// the iteration's end rather than the benchmark's.
type iterTB struct {
	testing.TB
	dir      string
	cleanups []func()
}

func (t *iterTB) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }
func (t *iterTB) TempDir() string {
	d, err := os.MkdirTemp(t.dir, "")
	if err != nil {
		t.Fatal(err)
	}
	return d
}
func (t *iterTB) cleanup() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	t.cleanups = nil
}

func createWidget(b testing.TB, cfg *rest.Config) {
	b.Helper()
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	w := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": "default"}, "spec": map[string]any{"size": int64(1)}}}
	if err := c.Create(context.Background(), w); err != nil {
		b.Fatal(err)
	}
}

// selfRSS is this process's VmRSS in bytes.
func selfRSS() int64 { return rssOf("self") }

// childrenRSS is the summed VmRSS of this process's children.
func childrenRSS() int64 {
	var sum int64
	me := strconv.Itoa(os.Getpid())
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces: split after ')'.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == me {
			sum += rssOf(filepath.Base(d))
		}
	}
	return sum
}

func rssOf(pid string) int64 {
	b, _ := os.ReadFile("/proc/" + pid + "/status")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}
