package images

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pb "sigs.k8s.io/gateway-api/conformance/echo-basic/grpcechoserver"
)

const echoBasicImage = "registry.k8s.io/gateway-api/echo-basic:v1.6.0-dev.2"

var podEnv = map[string]string{"POD_NAME": "infra-backend-v1-7d9f8b-x2k4p", "NAMESPACE": "gateway-conformance-infra"}

func withEnv(extra map[string]string) map[string]string {
	env := map[string]string{}
	for k, v := range podEnv {
		env[k] = v
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// The HTTP server echoes each request as the suite parses it, answers its
// special paths, and logs the line the mirror tests read.
func TestEchoBasicHTTP(t *testing.T) {
	r := start(t, echoBasicImage, nil, withEnv(map[string]string{"HTTP_PORT": "0", "H2C_PORT": "0"}))
	r.mu.Lock()
	httpAddr, h2cAddr := r.addrs["tcp"][0].String(), r.addrs["tcp"][1].String()
	r.mu.Unlock()
	get := func(path string, hdr map[string]string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+httpAddr+path, nil)
		req.Host = "foo.example.com"
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := get("/backend//path?x=1", map[string]string{"X-Echo-Set-Header": "X-Foo: bar, X-Baz: 1"})
	var got echoRequest
	if err := json.Unmarshal([]byte(body), &got); err != nil || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("echo: %v, Content-Type %q: %s", err, resp.Header.Get("Content-Type"), body)
	}
	if got.Path != "/backend//path?x=1" || got.Host != "foo.example.com" || got.Method != "GET" || got.Proto != "HTTP/1.1" ||
		got.Pod != podEnv["POD_NAME"] || got.Namespace != podEnv["NAMESPACE"] || got.TLS != nil || got.Headers["X-Echo-Set-Header"] == nil {
		t.Errorf("echo = %+v", got)
	}
	if resp.Header.Get("X-Foo") != "bar" || resp.Header.Get("X-Baz") != "1" {
		t.Errorf("X-Echo-Set-Header gave %v", resp.Header)
	}
	for _, key := range []string{`"path"`, `"host"`, `"method"`, `"proto"`, `"headers"`, `"httpPort"`, `"namespace"`, `"ingress"`, `"service"`, `"pod"`} {
		if !strings.Contains(body, key) {
			t.Errorf("reply lacks %s: %s", key, body)
		}
	}
	if !strings.Contains(r.stdout.String(), "Echoing back request made to /backend//path?x=1 to client (127.0.0.1:") {
		t.Errorf("log = %q", r.stdout.String())
	}
	for path, want := range map[string]int{"/status/418": 418, "/status/abc": 400, "/health": 200} {
		if resp, _ := get(path, nil); resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	// /retry/ fails succeedAfter times with responseCode, then echoes.
	for i, want := range []int{503, 503, 200} {
		if resp, _ := get("/retry/?uuid=u1&succeedAfter=2&responseCode=503", nil); resp.StatusCode != want {
			t.Errorf("retry attempt %d: %d, want %d", i+1, resp.StatusCode, want)
		}
	}
	if resp, body := get("/retry/?succeedAfter=1", nil); resp.StatusCode != 400 || body != "uuid is required" {
		t.Errorf("retry without uuid: %d %q", resp.StatusCode, body)
	}

	// The h2c port refuses HTTP/1.1 and echoes HTTP/2 with prior knowledge.
	resp1, err := http.Get("http://" + h2cAddr + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp1.Body)
	resp1.Body.Close()
	if resp1.StatusCode != 400 || string(b) != "Expected h2c request" {
		t.Errorf("HTTP/1.1 to the h2c port: %d %q", resp1.StatusCode, b)
	}
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	resp2, err := (&http.Client{Transport: tr}).Get("http://" + h2cAddr + "/h2c")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp2.Body)
	resp2.Body.Close()
	if resp2.StatusCode != 200 || !strings.Contains(string(b), `"proto": "HTTP/2.0"`) {
		t.Errorf("h2c: %d %s", resp2.StatusCode, b)
	}

	// /ws echoes WebSocket messages.
	ws, err := websocket.Dial("ws://"+httpAddr+"/ws", "", "http://"+httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if _, err := ws.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, 16)
	if n, err := ws.Read(msg); err != nil || string(msg[:n]) != "ping" {
		t.Errorf("websocket echo: %q, %v", msg[:n], err)
	}
}

// GRPC_ECHO_SERVER serves the suite's GrpcEcho service: Echo and EchoTwo
// answer with the method, authority, metadata and pod; EchoThree is not
// implemented, as in the real one.
func TestEchoBasicGRPC(t *testing.T) {
	r := start(t, echoBasicImage, nil, withEnv(map[string]string{"GRPC_ECHO_SERVER": "1", "HTTP_PORT": "0"}))
	conn, err := grpc.NewClient(r.addr(t, "tcp"), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("grpc.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewGrpcEchoClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := client.EchoTwo(ctx, &pb.EchoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	a := resp.GetAssertions()
	if a.GetFullyQualifiedMethod() != "/gateway_api_conformance.echo_basic.grpcecho.GrpcEcho/EchoTwo" ||
		a.GetAuthority() != "grpc.example.com" || a.GetContext().GetPod() != podEnv["POD_NAME"] || a.GetTlsAssertions() != nil {
		t.Errorf("EchoTwo assertions = %v", a)
	}
	if _, err := client.EchoThree(ctx, &pb.EchoRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("EchoThree: %v, want Unimplemented", err)
	}
}

// TCP_ECHO_SERVER greets, then answers TEST, IS_TLS and PING line by line.
func TestEchoBasicTCP(t *testing.T) {
	r := start(t, echoBasicImage, nil, withEnv(map[string]string{"TCP_ECHO_SERVER": "1", "TCP_PORT": "0"}))
	conn, err := net.Dial("tcp", r.addr(t, "tcp"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rd := bufio.NewReader(conn)
	line := func() string {
		s, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got := line(); got != "Gateway API Test TCP Server\n" {
		t.Errorf("welcome %q", got)
	}
	io.WriteString(conn, "PING\nIS_TLS\nTEST\n")
	if got := line() + line(); got != "PONG\nfalse\n" {
		t.Errorf("PING, IS_TLS: %q", got)
	}
	want := `{"namespace":"gateway-conformance-infra","ingress":"","service":"","pod":"infra-backend-v1-7d9f8b-x2k4p","tcpport":"0","tlsport":"8443","isTLS":false}` + "\n"
	if got := line(); got != want {
		t.Errorf("TEST:\n%s\nwant\n%s", got, want)
	}
}

// UDP_ECHO_SERVER answers a datagram with it and the pod.
func TestEchoBasicUDP(t *testing.T) {
	r := start(t, echoBasicImage, nil, withEnv(map[string]string{"UDP_ECHO_SERVER": "1", "UDP_PORT": "0"}))
	conn, err := net.Dial("udp", r.addr(t, "udp"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	conn.Write([]byte("hello"))
	buf := make([]byte, 1024)
	n, err := conn.Read(buf)
	want := `{"request":"hello","namespace":"gateway-conformance-infra","ingress":"","service":"","pod":"infra-backend-v1-7d9f8b-x2k4p"}`
	if err != nil || string(buf[:n]) != want {
		t.Errorf("reply %q (%v), want %q", buf[:n], err, want)
	}
}
