// Package security proves the access rules of a server that listens off
// loopback (DESIGN.md invariant 4): TLS only, a bearer token on every endpoint,
// no secret in answers to strangers nor in the server's logs, no Secret data in
// kubectl's table output.
//
// 127.0.0.0/8 is all loopback to minikit (cluster.isLoopback), so the server
// runs inside a network namespace this test creates, on a veth link with a
// documentation address (192.0.2.1), through `ip netns exec`; the test's
// clients dial from inside the same namespace. Nothing touches the root
// namespace's links, addresses or rules. Needs root.
package security

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/lab"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"
)

const serverAddr = "192.0.2.1" // TEST-NET-1, on a veth link inside the test's namespace

// env is a server running off loopback inside a throwaway namespace.
type env struct {
	t       *testing.T
	ns      string
	dataDir string
	url     string
	token   string
	logs    *testenv.Buffer
	secure  *http.Client // trusts the server's CA, sends no credentials by itself
	plain   *http.Client
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func newEnv(t *testing.T) *env {
	testenv.RequireRoot(t)
	e := &env{t: t, ns: fmt.Sprintf("mksec-%d", os.Getpid()), dataDir: filepath.Join(t.TempDir(), "data"), logs: &testenv.Buffer{}}
	ipCmd(t, "netns", "add", e.ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", e.ns).Run() })
	ipCmd(t, "-n", e.ns, "link", "set", "lo", "up")
	// A veth pair with both ends inside the namespace (the dummy driver is not
	// in every kernel): the server's address is on a link that is not loopback.
	ipCmd(t, "-n", e.ns, "link", "add", "mksec0", "type", "veth", "peer", "name", "mksec1")
	ipCmd(t, "-n", e.ns, "addr", "add", serverAddr+"/24", "dev", "mksec0")
	ipCmd(t, "-n", e.ns, "link", "set", "mksec0", "up")
	ipCmd(t, "-n", e.ns, "link", "set", "mksec1", "up")

	stdout := &testenv.Buffer{}
	cmd := exec.Command("ip", "netns", "exec", e.ns, testenv.Minikit(t), "server", "--data-dir", e.dataDir,
		"--listen", serverAddr+":6443", "--disable-agent", "--log-level", "debug")
	cmd.Stdout, cmd.Stderr = io.MultiWriter(stdout, e.logs), e.logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	ready := regexp.MustCompile(`minikit server ready at (\S+)`)
	testutil.Eventually(t, 60*time.Second, "the server's ready line", func() error {
		select {
		case <-exited:
			t.Fatalf("minikit server exited: %s", e.logs)
		default:
		}
		m := ready.FindStringSubmatch(stdout.String())
		if m == nil {
			return errors.New("no ready line on stdout yet")
		}
		e.url = m[1]
		return nil
	})
	if !strings.HasPrefix(e.url, "https://"+serverAddr+":") {
		t.Fatalf("server URL %q, want https://%s:PORT: off loopback it must serve TLS", e.url, serverAddr)
	}
	tok, err := os.ReadFile(filepath.Join(e.dataDir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	e.token = strings.TrimSpace(string(tok))
	caPEM, err := os.ReadFile(filepath.Join(e.dataDir, "tls", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("tls/ca.crt holds no certificate")
	}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		return lab.DialIn(ctx, e.ns, network, addr)
	}
	e.secure = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: dial, ForceAttemptHTTP2: true,
		TLSClientConfig: &tls.Config{RootCAs: pool}}}
	e.plain = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: dial}}
	t.Cleanup(e.secure.CloseIdleConnections)
	t.Cleanup(e.plain.CloseIdleConnections)
	return e
}

// do sends one request; auth is the Authorization header ("" for none).
func (e *env) do(c *http.Client, method, url, auth, ct string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, nil
}

// admin sends a request with the right token and fails the test unless it succeeds.
func (e *env) admin(method, path string, body string) []byte {
	e.t.Helper()
	code, b, err := e.do(e.secure, method, e.url+path, "Bearer "+e.token, "application/json", []byte(body))
	if err != nil || code >= 300 {
		e.t.Fatalf("%s %s with the token: %d %v %s", method, path, code, err, b)
	}
	return b
}

// endpoint is one request to refuse.
type endpoint struct{ method, path, body string }

// endpoints lists every endpoint of the API: discovery and openapi (not the public
// /healthz, /livez, /readyz and /version),
// and for every resource discovery lists, each verb on its collection and on an
// existing object, its subresources, pods/log and pods/exec.
func (e *env) endpoints() []endpoint {
	t := e.t
	eps := []endpoint{{"GET", "/api", ""}, {"GET", "/apis", ""},
		{"GET", "/openapi/v2", ""}, {"GET", "/openapi/v3", ""}, {"GET", "/metrics", ""}, {"GET", "/", ""}}
	type resList struct {
		GroupVersion string `json:"groupVersion"`
		Resources    []struct {
			Name       string   `json:"name"`
			Namespaced bool     `json:"namespaced"`
			Verbs      []string `json:"verbs"`
		} `json:"resources"`
	}
	var gvs []string
	var api struct {
		Versions []string `json:"versions"`
	}
	json.Unmarshal(e.admin("GET", "/api", ""), &api)
	for _, v := range api.Versions {
		gvs = append(gvs, "/api/"+v)
	}
	var apis struct {
		Groups []struct {
			Name     string `json:"name"`
			Versions []struct {
				GroupVersion string `json:"groupVersion"`
			} `json:"versions"`
		} `json:"groups"`
	}
	json.Unmarshal(e.admin("GET", "/apis", ""), &apis)
	for _, g := range apis.Groups {
		eps = append(eps, endpoint{"GET", "/apis/" + g.Name, ""})
		for _, v := range g.Versions {
			gvs = append(gvs, "/apis/"+v.GroupVersion)
		}
	}
	if len(gvs) < 4 {
		t.Fatalf("discovery lists only %v", gvs)
	}
	nres := 0
	for _, gv := range gvs {
		eps = append(eps, endpoint{"GET", gv, ""})
		var rl resList
		if err := json.Unmarshal(e.admin("GET", gv, ""), &rl); err != nil {
			t.Fatal(err)
		}
		for _, r := range rl.Resources {
			base := gv + "/" + r.Name
			name, sub, _ := strings.Cut(r.Name, "/")
			obj := "secret-holder"
			switch name {
			case "namespaces":
				obj = "default"
			case "nodes":
				obj = "node-x"
			}
			if r.Namespaced {
				base = gv + "/namespaces/default/" + name
			} else {
				base = gv + "/" + name
			}
			if sub != "" {
				for _, m := range []string{"GET", "PUT", "PATCH", "POST"} {
					eps = append(eps, endpoint{m, base + "/" + obj + "/" + sub, "{}"})
				}
				continue
			}
			nres++
			eps = append(eps,
				endpoint{"GET", base, ""},
				endpoint{"GET", base + "?watch=1", ""},
				endpoint{"GET", base + "?watch=true&resourceVersion=0&allowWatchBookmarks=true", ""},
				endpoint{"POST", base, `{"metadata":{"name":"intruder"}}`},
				endpoint{"DELETE", base, ""},
				endpoint{"GET", base + "/" + obj, ""},
				endpoint{"PUT", base + "/" + obj, `{"metadata":{"name":"` + obj + `"}}`},
				endpoint{"PATCH", base + "/" + obj, `{"metadata":{"labels":{"owned":"yes"}}}`},
				endpoint{"DELETE", base + "/" + obj, ""},
			)
			if r.Namespaced {
				eps = append(eps, endpoint{"GET", gv + "/" + name, ""}, endpoint{"GET", gv + "/" + name + "?watch=1", ""})
			}
		}
	}
	if nres < 10 {
		t.Fatalf("discovery lists only %d resources", nres)
	}
	// pods/exec is not served (minikit exec runs on the node), and must not answer
	// strangers either; pods/log is listed by discovery and covered above, and
	// here with kubectl's parameters.
	eps = append(eps,
		endpoint{"GET", "/api/v1/namespaces/default/pods/secret-holder/log?follow=true&tailLines=10", ""},
		endpoint{"POST", "/api/v1/namespaces/default/pods/secret-holder/exec?command=id&stdout=true", ""},
		endpoint{"GET", "/api/v1/namespaces/default/pods/secret-holder/exec?command=id&stdout=true", ""},
		endpoint{"GET", "/api/v1/namespaces/default/pods/secret-holder/attach", ""},
		endpoint{"GET", "/api/v1/namespaces/default/pods/secret-holder/portforward", ""},
		endpoint{"GET", "/api/v1/namespaces/kube-system/secrets", ""},
	)
	return eps
}

// TestEveryEndpointRefusesStrangers: with no token, a wrong one, a token of
// another scheme or a truncated one, every endpoint answers 401 with an
// Unauthorized Status and nothing else; plain HTTP reaches nothing; and the
// refusals change nothing.
func TestEveryEndpointRefusesStrangers(t *testing.T) {
	e := newEnv(t)
	secretValue := fmt.Sprintf("s3cr3t-%d-value", time.Now().UnixNano())
	secretB64 := base64.StdEncoding.EncodeToString([]byte(secretValue))
	e.admin("POST", "/api/v1/namespaces/default/secrets",
		`{"metadata":{"name":"secret-holder"},"type":"Opaque","data":{"password":"`+secretB64+`"}}`)
	e.admin("POST", "/api/v1/namespaces/default/configmaps", `{"metadata":{"name":"secret-holder"},"data":{"k":"visible-config"}}`)
	e.admin("POST", "/api/v1/namespaces/default/pods",
		`{"metadata":{"name":"secret-holder"},"spec":{"nodeName":"node-x","containers":[{"name":"c","image":"minikit/sleeper"}]}}`)
	before := e.admin("GET", "/api/v1/namespaces/default/secrets/secret-holder", "")

	wrong := strings.Repeat("0", len(e.token))
	auths := map[string]string{
		"no token":        "",
		"wrong token":     "Bearer " + wrong,
		"truncated token": "Bearer " + e.token[:len(e.token)-1],
		"token prefix":    "Bearer " + e.token[:8],
		"basic scheme":    "Basic " + base64.StdEncoding.EncodeToString([]byte("admin:"+e.token)),
		"lower-case":      "bearer " + wrong,
		"empty bearer":    "Bearer ",
	}
	leaks := []string{secretValue, secretB64, e.token, "visible-config", "secret-holder", "items", "resources", "paths", "gitVersion"}
	eps := e.endpoints()
	for _, ep := range eps {
		for who, auth := range auths {
			code, body, err := e.do(e.secure, ep.method, e.url+ep.path, auth, "application/json", []byte(ep.body))
			what := fmt.Sprintf("%s %s (%s)", ep.method, ep.path, who)
			if err != nil {
				t.Errorf("%s: %v", what, err)
				continue
			}
			if code != http.StatusUnauthorized {
				t.Errorf("%s = %d, want 401: %.300s", what, code, body)
				continue
			}
			var st struct {
				Kind, Status, Reason, Message string
				Code                          int
			}
			if json.Unmarshal(body, &st) != nil || st.Kind != "Status" || st.Reason != "Unauthorized" || st.Code != 401 {
				t.Errorf("%s: 401 body is not an Unauthorized Status: %s", what, body)
			}
			for _, l := range leaks {
				if bytes.Contains(body, []byte(l)) {
					t.Errorf("%s: the 401 body leaks %q: %s", what, l, body)
				}
			}
		}
	}
	t.Logf("%d endpoints x %d credentials refused", len(eps), len(auths))

	// The probes answer anyone, and say nothing but "ok".
	for _, p := range []string{"/healthz", "/livez", "/readyz"} {
		code, body, err := e.do(e.secure, "GET", e.url+p, "", "", nil)
		if err != nil || code != http.StatusOK || string(body) != "ok" {
			t.Errorf("GET %s without a token = %d %q %v, want 200 \"ok\" and nothing more", p, code, body, err)
		}
	}

	// Plain HTTP on the TLS port reaches nothing, with the token or without.
	for _, auth := range []string{"", "Bearer " + e.token} {
		for _, p := range []string{"/api/v1/namespaces/default/secrets", "/api/v1/namespaces", "/version"} {
			code, body, err := e.do(e.plain, "GET", "http://"+strings.TrimPrefix(e.url, "https://")+p, auth, "", nil)
			if err == nil && (code < 400 || bytes.Contains(body, []byte(secretB64)) || bytes.Contains(body, []byte("items"))) {
				t.Errorf("plain HTTP GET %s = %d %s, want a refusal", p, code, body)
			}
		}
	}

	// Nothing the strangers sent changed anything.
	after := e.admin("GET", "/api/v1/namespaces/default/secrets/secret-holder", "")
	if !bytes.Equal(before, after) {
		t.Errorf("the Secret changed under refused requests:\n%s\n%s", before, after)
	}
	for _, p := range []string{"/api/v1/namespaces/default/configmaps/intruder", "/api/v1/namespaces/default/secrets/intruder", "/api/v1/namespaces/intruder"} {
		if code, _, _ := e.do(e.secure, "GET", e.url+p, "Bearer "+e.token, "", nil); code != http.StatusNotFound {
			t.Errorf("GET %s = %d after refused creates, want 404", p, code)
		}
	}

	// kubectl shows no Secret data in its table, only with -o yaml/json.
	kc := filepath.Join(e.dataDir, "kubeconfig")
	kubectl := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("ip", append([]string{"netns", "exec", e.ns, "kubectl", "--kubeconfig", kc}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Fatal("kubectl is not installed (scripts/deps.sh installs it)")
	}
	for _, args := range [][]string{{"get", "secret"}, {"get", "secret", "secret-holder"}, {"get", "secrets", "-A", "-o", "wide"},
		{"describe", "secret", "secret-holder"}} {
		out := kubectl(args...)
		if !strings.Contains(out, "secret-holder") {
			t.Errorf("kubectl %s does not list the Secret: %s", strings.Join(args, " "), out)
		}
		if strings.Contains(out, secretValue) || strings.Contains(out, secretB64) {
			t.Errorf("kubectl %s shows the Secret's data: %s", strings.Join(args, " "), out)
		}
	}
	for _, o := range []string{"yaml", "json"} {
		if out := kubectl("get", "secret", "secret-holder", "-o", o); !strings.Contains(out, secretB64) {
			t.Errorf("kubectl get secret -o %s lacks the data: %s", o, out)
		}
	}
	// The server-side table itself, as kubectl asks for it.
	code, body, err := e.doAccept("/api/v1/namespaces/default/secrets", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
	if err != nil || code != http.StatusOK || !bytes.Contains(body, []byte(`"kind":"Table"`)) {
		t.Fatalf("table of secrets: %d %v %.300s", code, err, body)
	}
	if bytes.Contains(body, []byte(secretB64)) || bytes.Contains(body, []byte(secretValue)) {
		t.Errorf("the server-side table of secrets carries their data: %s", body)
	}

	// No secret in the server's logs, at debug level, after all of the above.
	logs := e.logs.String()
	if !strings.Contains(logs, "level=DEBUG") && !strings.Contains(logs, `"level":"DEBUG"`) {
		t.Errorf("the server logged nothing at debug level; the check below would prove little:\n%.2000s", logs)
	}
	for _, l := range []string{e.token, secretValue, secretB64} {
		if strings.Contains(logs, l) {
			t.Errorf("the server's logs contain a secret (%.12s...)", l)
		}
	}
}

func (e *env) doAccept(path, accept string) (int, []byte, error) {
	req, _ := http.NewRequest("GET", e.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+e.token)
	req.Header.Set("Accept", accept)
	resp, err := e.secure.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, nil
}

// TestAgentJoinNeedsTheToken: an agent with a wrong token, without one, over
// plain HTTP or facing a server its CA file does not vouch for, does not join:
// it exits non-zero saying why, registers no Node, and the server's Node list
// stays as it was. The agent runs inside the test's namespace, so whatever it
// sets up before failing is removed with it.
func TestAgentJoinNeedsTheToken(t *testing.T) {
	e := newEnv(t)
	ca := filepath.Join(e.dataDir, "tls", "ca.crt")
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"wrong token", []string{"--server", e.url, "--token", strings.Repeat("f", len(e.token)), "--ca-file", ca}},
		{"no token", []string{"--server", e.url, "--ca-file", ca}},
		{"plain http", []string{"--server", "http://" + strings.TrimPrefix(e.url, "https://"), "--token", e.token}},
		{"untrusted server", []string{"--server", e.url, "--token", strings.Repeat("e", len(e.token))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := "intruder-" + strings.ReplaceAll(tc.name, " ", "-")
			logs := &testenv.Buffer{}
			args := append([]string{"netns", "exec", e.ns, testenv.Minikit(t), "agent", "--data-dir", filepath.Join(t.TempDir(), "agent"),
				"--node-name", node, "--node-ip", serverAddr, "--disable-dns", "--log-level", "debug"}, tc.args...)
			cmd := exec.Command("ip", args...)
			cmd.Stdout, cmd.Stderr = logs, logs
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			refused := regexp.MustCompile(`(?i)unauthori[sz]ed|401|https://|certificate|token is required`)
			var exitErr error
			done := false
			select {
			case exitErr = <-exited:
				done = true
			case <-time.After(60 * time.Second):
			}
			if !done {
				cmd.Process.Signal(syscall.SIGTERM)
				select {
				case exitErr = <-exited:
				case <-time.After(15 * time.Second):
					cmd.Process.Kill()
					exitErr = <-exited
				}
				t.Errorf("the agent kept running without the right credentials (stopped: %v); it had logged: %.400s", exitErr, logs.String())
			} else if exitErr == nil {
				t.Errorf("the agent exited 0 without the right credentials: %s", logs)
			}
			if !refused.MatchString(logs.String()) {
				t.Errorf("the agent's output does not say why it could not join: %s", logs)
			}
			if code, body, _ := e.do(e.secure, "GET", e.url+"/api/v1/nodes/"+node, "Bearer "+e.token, "", nil); code != http.StatusNotFound {
				t.Errorf("node %s exists after a join %s: %d %s", node, tc.name, code, body)
			}
			if strings.Contains(e.logs.String(), e.token) {
				t.Errorf("the server logged its token")
			}
		})
	}
}
