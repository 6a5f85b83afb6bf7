// Package hellobackend is the backend both proxy benchmarks (scripts/bench-ingress,
// scripts/bench-gateway) put behind the proxies: an HTTP server answering every
// path with nginxdemos/hello's plain-text page (server address and name, date,
// URI, a request ID), as the book's cafe pods do. The checks of both scripts
// read "Server name:" and "URI:" from it.
package hellobackend

import (
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net/http"
	"time"
)

// Run parses args (-addr, default defaultAddr; -name) and serves until it fails.
func Run(args []string, defaultAddr string) {
	fs := flag.NewFlagSet("backend", flag.ExitOnError)
	addr := fs.String("addr", defaultAddr, "listen address")
	name := fs.String("name", "backend", "server name")
	fs.Parse(args)
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/plain")
		h.Set("Cache-Control", "no-cache")
		fmt.Fprintf(w, "Server address: %s\nServer name: %s\nDate: %s\nURI: %s\nRequest ID: %016x%016x\n",
			*addr, *name, time.Now().Format("02/Jan/2006:15:04:05 -0700"), r.URL.RequestURI(), rand.Uint64(), rand.Uint64())
	})
	srv := &http.Server{Addr: *addr, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
