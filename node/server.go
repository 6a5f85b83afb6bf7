package node

import (
	"bufio"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// KubeletPort is where the agent serves container logs to the API server, like the
// kubelet's port.
const KubeletPort = 10250

// serveLogs serves GET /containerLogs/NS/POD/CONTAINER?follow=true&tailLines=N, the
// kubelet path the API server proxies `kubectl logs` to. Every request must carry
// the cluster's bearer token: the agent runs as root.
func (a *Agent) serveLogs(ctx context.Context, addr string, token string) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/containerLogs/", func(w http.ResponseWriter, r *http.Request) {
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if token == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(token)) != 1 {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/containerLogs/"), "/")
		if len(parts) != 3 {
			http.Error(w, "want /containerLogs/NAMESPACE/POD/CONTAINER", http.StatusBadRequest)
			return
		}
		if err := a.writeLogs(r.Context(), w, parts[0], parts[1], parts[2], r.URL.Query()); err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
		}
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening for log requests on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (a *Agent) writeLogs(ctx context.Context, w http.ResponseWriter, ns, name, ctr string, q map[string][]string) error {
	pod, err := a.pods.Pods(ns).Get(name)
	if err != nil {
		return fmt.Errorf("pod %q not found on node %q", ns+"/"+name, a.cfg.NodeName)
	}
	wk := &podWorker{a: a, uid: pod.UID}
	f, err := os.Open(wk.logPath(ctr))
	if err != nil {
		return fmt.Errorf("container %q in pod %q has no logs yet", ctr, ns+"/"+name)
	}
	defer f.Close()
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	w.Header().Set("Content-Type", "text/plain")
	if n, err := strconv.Atoi(get("tailLines")); err == nil && n >= 0 {
		if err := seekTail(f, n); err != nil {
			return err
		}
	}
	flusher, _ := w.(http.Flusher)
	br := bufio.NewReader(f)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			if _, werr := io.WriteString(w, line); werr != nil {
				return nil
			}
		}
		if err == io.EOF {
			if get("follow") != "true" {
				return nil
			}
			if flusher != nil {
				flusher.Flush()
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			return nil
		}
	}
}

// seekTail positions f at the start of its last n lines.
func seekTail(f *os.File, n int) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	if n == 0 {
		_, err := f.Seek(size, io.SeekStart)
		return err
	}
	buf := make([]byte, 4096)
	count, pos := 0, size
	for pos > 0 {
		step := int64(len(buf))
		if pos < step {
			step = pos
		}
		pos -= step
		if _, err := f.ReadAt(buf[:step], pos); err != nil && err != io.EOF {
			return err
		}
		for i := step - 1; i >= 0; i-- {
			if buf[i] == '\n' && pos+i != size-1 {
				count++
				if count == n {
					_, err := f.Seek(pos+i+1, io.SeekStart)
					return err
				}
			}
		}
	}
	_, err = f.Seek(0, io.SeekStart)
	return err
}
