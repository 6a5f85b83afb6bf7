package apiserver

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

var nodeResource = lookup("", "v1", "nodes")

// logClient talks to node agents; follow streams have no overall timeout.
var logClient = &http.Client{Transport: &http.Transport{ResponseHeaderTimeout: 10 * time.Second}}

// servePodLog proxies GET pods/NAME/log to the agent of the pod's node, as the
// kube-apiserver proxies to the kubelet, so `kubectl logs` works.
func (s *Server) servePodLog(w http.ResponseWriter, r *http.Request, rq request) error {
	if r.Method != http.MethodGet {
		return apierrors.NewMethodNotSupported(rq.res.gr(), r.Method)
	}
	obj, err := s.get(rq.res, rq.namespace, rq.name)
	if err != nil {
		return err
	}
	pod := obj.(*corev1.Pod)
	q := r.URL.Query()
	ctr := q.Get("container")
	if ctr == "" {
		if len(pod.Spec.Containers) != 1 {
			var names []string
			for _, c := range pod.Spec.Containers {
				names = append(names, c.Name)
			}
			return apierrors.NewBadRequest(fmt.Sprintf("a container name must be specified for pod %s, choose one of: %v", pod.Name, names))
		}
		ctr = pod.Spec.Containers[0].Name
	}
	if pod.Spec.NodeName == "" {
		return apierrors.NewBadRequest(fmt.Sprintf("container %q in pod %q is waiting to start: the pod is not scheduled", ctr, pod.Name))
	}
	host, err := s.agentHost(pod.Spec.NodeName)
	if err != nil {
		return err
	}
	u := url.URL{Scheme: "http", Host: host,
		Path: "/containerLogs/" + pod.Namespace + "/" + pod.Name + "/" + ctr}
	uq := url.Values{}
	for _, k := range []string{"follow", "tailLines"} {
		if v := q.Get(k); v != "" {
			uq.Set(k, v)
		}
	}
	u.RawQuery = uq.Encode()
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.cfg.NodeToken)
	resp, err := logClient.Do(req)
	if err != nil {
		return apierrors.NewServiceUnavailable(fmt.Sprintf("getting logs from node %q: %v", pod.Spec.NodeName, err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return apierrors.NewBadRequest(string(b))
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	// Bounded writes, as for watches: a client that stops reading a followed
	// log is dropped rather than held.
	sw := s.newStreamWriter(w, r)
	defer sw.done()
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := sw.Write(buf[:n]); werr != nil {
				return nil
			}
			if werr := sw.flush(); werr != nil {
				return nil
			}
		}
		if err != nil {
			return nil
		}
	}
}
