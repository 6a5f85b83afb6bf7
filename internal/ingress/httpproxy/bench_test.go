package httpproxy

import (
	"bufio"
	"bytes"
	"net"
	"strconv"
	"sync"
	"testing"
)

// rawBackend answers every request with a fixed nginxdemos-like body, parsing
// nothing but the head's end: it allocates nothing, so the benchmark's
// allocations are the proxy's.
func rawBackend(tb testing.TB) *backendServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	body := "Server address: 127.0.0.1:8080\nServer name: raw\nDate: 02/Dec/2026:10:00:00 +0000\nURI: /tea\nRequest ID: 0123456789abcdef0123456789abcdef\n"
	resp := []byte("HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Wed, 02 Dec 2026 10:00:00 GMT\r\nContent-Type: text/plain\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\nConnection: keep-alive\r\nExpires: Wed, 02 Dec 2026 09:59:59 GMT\r\nCache-Control: no-cache\r\n\r\n" + body)
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 16<<10)
				n := 0
				for {
					m, err := c.Read(buf[n:])
					if err != nil {
						return
					}
					n += m
					for {
						i := bytes.Index(buf[:n], []byte("\r\n\r\n"))
						if i < 0 {
							break
						}
						if _, err := c.Write(resp); err != nil {
							return
						}
						copy(buf, buf[i+4:n])
						n -= i + 4
					}
				}
			}()
		}
	}()
	tb.Cleanup(func() { ln.Close() })
	return &backendServer{name: "raw", addr: ln.Addr().String()}
}

// BenchmarkKeepAliveRequest measures one keep-alive request through the proxy
// (loopback client and backend): b.N requests on 8 parallel connections.
func BenchmarkKeepAliveRequest(b *testing.B) {
	o := newObjects()
	o.service("tea-svc", rawBackend(b), rawBackend(b), rawBackend(b))
	o.ingress("cafe-ingress", "cafe.example.com", nil, route{path: "/tea", svc: "tea-svc"})
	r := startProxy(b, o.build(b), Config{KeepAliveRequests: 1 << 30})
	req := []byte("GET /tea HTTP/1.1\r\nHost: cafe.example.com\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n")
	b.ReportAllocs()
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c, err := net.Dial("tcp", r.http)
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		rd := bufio.NewReaderSize(c, 16<<10)
		for pb.Next() {
			if _, err := c.Write(req); err != nil {
				b.Error(err)
				return
			}
			// Read the head, then Content-Length bytes.
			cl := -1
			for {
				line, err := rd.ReadSlice('\n')
				if err != nil {
					b.Error(err)
					return
				}
				if len(line) <= 2 {
					break
				}
				if bytes.HasPrefix(line, []byte("Content-Length: ")) {
					cl, _ = strconv.Atoi(string(bytes.TrimSpace(line[16:])))
				}
			}
			if _, err := rd.Discard(cl); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
