package httpproxy

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// FuzzRequestHead feeds arbitrary bytes to the request parser: it must never
// panic, and a head it accepts must have a consistent framing.
func FuzzRequestHead(f *testing.F) {
	for _, s := range []string{
		"GET /tea HTTP/1.1\r\nHost: cafe.example.com\r\n\r\n",
		"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
		"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
		"GET http://h/p?q HTTP/1.0\nConnection: keep-alive\n\n",
		"GET / HTTP/1.1\r\nHost: [::1]:80\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
		"\r\n\r\n",
		"GET  HTTP/1.1\r\n\r\n",
		"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\tchunked\r\nTransfer-Encoding: chunked\r\n\r\n",
		"POST /x HTTP/1.0\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
		"get / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("a", 9000) + "\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n := headEnd(data)
		if n < 0 {
			return
		}
		if n > len(data) {
			t.Fatalf("headEnd %d beyond %d bytes", n, len(data))
		}
		if st := headFits(data[:n], 8192); st != 0 && st != 414 && st != 431 {
			t.Fatalf("headFits answered %d", st)
		}
		cc := &clientConn{}
		var req request
		if err := cc.parseRequest(&req, data[:n]); err != nil {
			var ce *clientError
			if !errors.As(err, &ce) {
				t.Fatalf("non-client error %v", err)
			}
			return
		}
		if req.headLen != n || len(req.method) == 0 || len(req.uri) == 0 || req.uri[0] != '/' {
			t.Fatalf("accepted head with request %+v", req)
		}
		if req.framing == lengthBody && req.length < 0 {
			t.Fatalf("negative length")
		}
		cc.hostname(req.host)
	})
}

// FuzzChunked decodes arbitrary chunked bodies: no panic, no endless loop, and
// the data emitted never exceeds the input.
func FuzzChunked(f *testing.F) {
	for _, s := range []string{"5\r\nhello\r\n0\r\n\r\n", "3;ext=1\r\nabc\r\n0\r\nTrailer: x\r\n\r\n", "zz\r\n", "10\r\nshort",
		" 5\r\nhello\r\n0\r\n\r\n", "5 ;a=\"b\rc\"\r\nhello\r\n0\r\n\r\n", "5\nhello\n0\nX: a\rb\n\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rd := &reader{buf: make([]byte, 64)}
		in := data
		fill := func() error {
			if len(in) == 0 {
				return io.EOF
			}
			if rd.r > 0 {
				n := copy(rd.buf, rd.buf[rd.r:rd.w])
				rd.r, rd.w = 0, n
			}
			if rd.w == len(rd.buf) {
				return errors.New("full")
			}
			k := copy(rd.buf[rd.w:], in)
			rd.w += k
			in = in[k:]
			return nil
		}
		total := 0
		readChunked(rd, fill, func(d []byte, last bool) error {
			total += len(d)
			if total > len(data) {
				t.Fatalf("emitted %d bytes from %d", total, len(data))
			}
			return nil
		})
	})
}
