package lab

import (
	"context"
	"log/slog"
	"net"
	"strings"

	"github.com/minikit/minikit/internal/apilb"
)

// Forward accepts connections on listen (loopback, in the root namespace) and
// splices each to the first of to (comma-separated host:port, the lab's API
// servers) that accepts it, dialled from inside netns: with several servers,
// a stopped one is skipped (apilb). It runs until ctx ends.
func Forward(ctx context.Context, listen, netns, to string, log *slog.Logger) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		return DialIn(ctx, netns, network, addr)
	}
	lb, err := apilb.New(strings.Split(to, ","), dial, log)
	if err != nil {
		ln.Close()
		return err
	}
	return lb.Serve(ctx, ln)
}
