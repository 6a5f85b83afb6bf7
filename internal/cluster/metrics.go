package cluster

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// withProcessMetrics adds /metrics to the node's debug endpoint: the process
// figures kube-proxy's own /metrics on port 10249 starts with, in Prometheus
// text format, so a student can `curl 127.0.0.1:10249/metrics` on a node and
// the soak test can check that goroutines, threads, open files and memory stay
// flat under load; then what each of more writes (the proxy's kubeproxy_*
// sync, network programming and nfacct counter metrics).
func withProcessMetrics(h http.Handler, more ...func(io.Writer)) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		gauge := func(name, help string, v int64) {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s %d\n", name, help, name, name, v)
		}
		gauge("go_goroutines", "Number of goroutines that currently exist.", int64(runtime.NumGoroutine()))
		threads, _ := runtime.ThreadCreateProfile(nil)
		gauge("go_threads", "Number of OS threads created.", int64(threads))
		if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
			gauge("process_open_fds", "Number of open file descriptors.", int64(len(fds)))
		}
		if rss, ok := residentBytes(); ok {
			gauge("process_resident_memory_bytes", "Resident memory size in bytes.", rss)
		}
		for _, m := range more {
			m(w)
		}
	})
	return mux
}

// residentBytes reads VmRSS from /proc/self/status.
func residentBytes() (int64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kib, err := strconv.ParseInt(f[1], 10, 64)
			return kib << 10, err == nil
		}
	}
	return 0, false
}
