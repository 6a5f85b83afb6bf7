package kubelet

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

// KubeletPort is where the agent serves the API server, like the kubelet's port:
// container logs, exec, attach, port-forward, its health and the node's logs.
const KubeletPort = 10250

// serveLogs serves the kubelet paths the API server proxies to:
// GET /containerLogs/NS/POD/CONTAINER?follow=true&tailLines=N (kubectl logs),
// /exec/NS/POD/CONTAINER, /attach/NS/POD/CONTAINER and /portForward/NS/POD
// (kubectl exec, attach, port-forward; see stream.go), /healthz and /logs/ (the
// node's log directory). Every request must carry the cluster's bearer token:
// the agent runs as root and its port is for the API server only.
func (a *Agent) serveLogs(ctx context.Context, addr string, token string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening for log requests on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: a.kubeletHandler(token), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Kubelet returns the agent's node name and its kubelet endpoints behind the
// token check, for an API server in the same process to call rather than
// dial (apiserver.Server.SetLocalAgent).
func (a *Agent) Kubelet() (nodeName string, h http.Handler) {
	return a.cfg.NodeName, a.kubeletHandler(a.cfg.Token)
}

// kubeletHandler routes the kubelet paths, behind the token check.
func (a *Agent) kubeletHandler(token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/containerLogs/", func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/containerLogs/"), "/")
		if len(parts) != 3 {
			http.Error(w, "want /containerLogs/NAMESPACE/POD/CONTAINER", http.StatusBadRequest)
			return
		}
		if err := a.writeLogs(r.Context(), w, parts[0], parts[1], parts[2], r.URL.Query()); err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
		}
	})
	mux.HandleFunc("/exec/", a.serveExec)
	mux.HandleFunc("/attach/", a.serveAttach)
	mux.HandleFunc("/portForward/", a.servePortForward)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	logDir := a.cfg.LogDir
	if logDir == "" {
		logDir = "/var/log"
	}
	mux.Handle("/logs/", http.StripPrefix("/logs/", http.FileServer(http.Dir(logDir))))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !tokenOK(r, token) {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
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

// tokenOK checks the API server's credential: the bearer token, or the same
// token as the password of basic auth. The latter is how the API server's
// WebSocket-to-SPDY translator (k8s.io/apiserver's StreamTranslatorHandler)
// carries it: that client has no header hook, so the token rides in the agent
// URL's user info, which net/http sends as basic auth.
func tokenOK(r *http.Request, token string) bool {
	if token == "" {
		return false
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		_, got, ok = r.BasicAuth()
	}
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}
