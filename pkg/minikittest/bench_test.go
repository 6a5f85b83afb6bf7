package minikittest

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkStartAPI measures StartAPI from nothing to ready (serving, the
// controllers' caches synced) and its memory: ns/op is the start, and
// heap-MiB/api the live heap that one more running API adds, measured with
// 10 running at once. The API without controllers is the reference for
// what the controllers cost. The first run also logs the resident set of
// the process before and after its first API (run it with -run '^$', so
// that the process is fresh; the resident set only grows, so later runs
// say nothing).
//
//	go test -run '^$' -bench StartAPI -count 5 ./pkg/minikittest
func BenchmarkStartAPI(b *testing.B) {
	if !measuredRSS {
		measuredRSS = true
		rss0 := residentSet()
		a, err := startAPI(filepath.Join(b.TempDir(), "first.db"), apiOptions{logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			b.Fatal(err)
		}
		rss1 := residentSet()
		a.stop()
		b.Logf("resident set of this process: %.1f MiB before its first API (with controllers), %.1f MiB with it running",
			float64(rss0)/(1<<20), float64(rss1)/(1<<20))
	}
	for _, bc := range []struct {
		name string
		o    apiOptions
	}{
		{"api-only", apiOptions{noControllers: true}},
		{"with-controllers", apiOptions{}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			bc.o.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			dir := b.TempDir()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				a, err := startAPI(filepath.Join(dir, strconv.Itoa(i)+".db"), bc.o)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				a.stop()
				b.StartTimer()
			}
			b.StopTimer()
			b.ReportMetric(heapPerAPI(b, dir, bc.o, 10), "heap-MiB/api")
		})
	}
}

var measuredRSS bool

// heapPerAPI starts n APIs and returns the live heap each adds, in MiB.
func heapPerAPI(b *testing.B, dir string, o apiOptions, n int) float64 {
	heap0 := liveHeap()
	var apis []*api
	for i := range n {
		a, err := startAPI(filepath.Join(dir, "mem"+strconv.Itoa(i)+".db"), o)
		if err != nil {
			b.Fatal(err)
		}
		apis = append(apis, a)
	}
	heap1 := liveHeap()
	for _, a := range apis {
		a.stop()
	}
	const mib = 1 << 20
	return float64(heap1-heap0) / mib / float64(n)
}

func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// residentSet is VmRSS of /proc/self/status, in bytes.
func residentSet() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}
