package images

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/minikit/minikit/internal/testutil"
)

// agnhost net's nat-closewait pair: the server half-closes the connection it
// accepts; the client sees EOF, keeps its side open and reports it.
func TestAgnhostNetCloseWait(t *testing.T) {
	// The server takes a fixed address, as the spec gives it (:11302).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	server := make(chan once, 1)
	go func() {
		server <- runOnce(t, agnhostImage, []string{"net", "--runner", "nat-closewait-server",
			"--options", fmt.Sprintf(`{"LocalAddr":%q, "PostFinTimeoutSeconds":0}`, addr)}, nil)
	}()
	var client once
	testutil.Eventually(t, waitTimeout, "the client connected", func() error {
		client = runOnce(t, agnhostImage, []string{"net", "--runner", "nat-closewait-client",
			"--options", fmt.Sprintf(`{"RemoteAddr":%q, "PostFinTimeoutSeconds":0, "TimeoutSeconds":5, "LeakConnection":true}`, addr)}, nil)
		return client.err
	})
	if !strings.HasPrefix(client.stdout, "output:\n\n") || !strings.Contains(client.stdout, "Server has half-closed the connection, waiting 0 seconds") {
		t.Errorf("client stdout = %q", client.stdout)
	}
	s := <-server
	if s.err != nil || !strings.Contains(s.stdout, "Server sent FIN") {
		t.Errorf("server: %v, stdout %q", s.err, s.stdout)
	}

	bad := runOnce(t, agnhostImage, []string{"net", "--runner", "nat-closewait-client", "--options", "{"}, nil)
	if exitCode(bad.err) != 1 || !strings.Contains(bad.stderr, "invalid options JSON") {
		t.Errorf("bad options: %v, stderr %q; want exit 1 naming the options", bad.err, bad.stderr)
	}
	if got := runOnce(t, agnhostImage, []string{"net", "--runner", "nope"}, nil); got.err == nil || !strings.Contains(got.err.Error(), `invalid runner: "nope"`) {
		t.Errorf("unknown runner: %v", got.err)
	}
}
