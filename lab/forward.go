package lab

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
)

// Forward accepts connections on listen (loopback, in the root namespace) and
// splices each to `to`, dialled from inside netns. It runs until ctx ends.
func Forward(ctx context.Context, listen, netns, to string, log *slog.Logger) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go func() {
			defer c.Close()
			u, err := DialIn(ctx, netns, "tcp", to)
			if err != nil {
				log.Warn("forwarding", "to", to, "netns", netns, "err", err)
				return
			}
			defer u.Close()
			var wg sync.WaitGroup
			wg.Add(2)
			pipe := func(dst, src net.Conn) {
				defer wg.Done()
				io.Copy(dst, src)
				if tc, ok := dst.(*net.TCPConn); ok {
					tc.CloseWrite()
				}
			}
			go pipe(u, c)
			go pipe(c, u)
			wg.Wait()
		}()
	}
}
