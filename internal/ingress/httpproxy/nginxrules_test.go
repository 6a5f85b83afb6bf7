package httpproxy

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestRefusesWhatNginxRefuses holds the fixes the differential test against
// nginx (test/ingress/differential_test.go) found: requests minikit forwarded
// and nginx refuses. Each must be answered with nginx's status, and none may
// reach the backend.
func TestRefusesWhatNginxRefuses(t *testing.T) {
	o, tea, _ := cafe(t)
	r := startProxy(t, o.build(t), Config{})
	const post = "POST /tea HTTP/1.1\r\nHost: cafe.example.com\r\n"
	const get = "GET /tea HTTP/1.1\r\nHost: cafe.example.com\r\n"
	var five strings.Builder
	for i := 0; i < 5; i++ {
		five.WriteString("X-H: " + strings.Repeat("h", 5000) + "\r\n")
	}
	for _, tc := range []struct {
		name, req, want string
	}{
		// Transfer-Encoding: exactly "chunked", once, in HTTP/1.1 (the proxy
		// used to take the last coding and drop the others, so a gzip body
		// reached the backend as if it were plain).
		{"coding list ending in chunked", post + "Transfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", "501 Not Implemented"},
		{"tab before chunked", post + "Transfer-Encoding:\tchunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", "501 Not Implemented"},
		{"tab after chunked", post + "Transfer-Encoding: chunked\t\r\n\r\n5\r\nhello\r\n0\r\n\r\n", "501 Not Implemented"},
		{"two Transfer-Encodings", post + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", "400 Bad Request"},
		{"Transfer-Encoding in HTTP/1.0", "POST /tea HTTP/1.0\r\nHost: cafe.example.com\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", "400 Bad Request"},
		// Content-Length: once.
		{"two equal Content-Lengths", post + "Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello", "400 Bad Request"},
		{"tab before Content-Length", post + "Content-Length:\t5\r\n\r\nhello", "400 Bad Request"},
		// Methods: nginx's characters.
		{"lower-case method", "get /tea HTTP/1.1\r\nHost: cafe.example.com\r\n\r\n", "400 Bad Request"},
		// Line lengths: large_client_header_buffers 4 8k.
		{"request line over 8k", "GET /tea/" + strings.Repeat("a", 9000) + " HTTP/1.1\r\nHost: cafe.example.com\r\n\r\n", "414 Request-URI Too Large"},
		{"request line over the whole head size", "GET /tea/" + strings.Repeat("a", 40000), "414 Request-URI Too Large"},
		{"header line over 8k", get + "X-Big: " + strings.Repeat("a", 9000) + "\r\n\r\n", "400 Request Header Or Cookie Too Large"},
		{"five 5k header lines", get + five.String() + "\r\n", "400 Request Header Or Cookie Too Large"},
		// Chunk lines: nginx's syntax.
		{"space before chunk size", post + "Transfer-Encoding: chunked\r\n\r\n 5\r\nhello\r\n0\r\n\r\n", "400 Bad Request"},
		{"bare CR in chunk extension", post + "Transfer-Encoding: chunked\r\n\r\n5;a=b\rc\r\nhello\r\n0\r\n\r\n", "400 Bad Request"},
		{"bare CR in trailer", post + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: a\rb\r\n\r\n", "400 Bad Request"},
		// A chunked body that has arrived whole is checked before anything
		// goes upstream, as nginx buffers it: the backend sees no part of it.
		{"invalid chunked body", post + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n0\r\n\r\n", "400 Bad Request"},
		{"chunk data longer than its size", post + "Transfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n", "400 Bad Request"},
	} {
		got := r.raw(t, tc.req, 5*time.Second)
		// nginx's 400 for long headers has its own page under "400 Bad Request".
		if !strings.HasPrefix(got, "HTTP/1.1 "+tc.want[:4]) || !strings.Contains(got, tc.want) {
			t.Errorf("%s: answer %q, want %q", tc.name, firstLines(got), tc.want)
		}
	}
	for _, b := range tea {
		if n := b.conns.Load(); n != 0 {
			t.Errorf("backend %s was connected to %d times; no request may reach it", b.name, n)
		}
	}
}

// TestAcceptsWhatNginxAccepts: the tightened rules still take what nginx takes.
func TestAcceptsWhatNginxAccepts(t *testing.T) {
	o, _, _ := cafe(t)
	r := startProxy(t, o.build(t), Config{})
	const post = "POST /tea HTTP/1.1\r\nHost: cafe.example.com\r\nConnection: close\r\n"
	var four strings.Builder
	for i := 0; i < 4; i++ {
		four.WriteString("X-H: " + strings.Repeat("h", 5000) + "\r\n")
	}
	for _, tc := range []struct {
		name, req, want string
	}{
		{"upper-case chunked", post + "Transfer-Encoding: CHUNKED\r\n\r\n5\r\nhello\r\n0\r\n\r\n", "Body-Length: 5"},
		{"spaces around chunked", post + "Transfer-Encoding:   chunked  \r\n\r\n5\r\nhello\r\n0\r\n\r\n", "Body-Length: 5"},
		{"space after chunk size, extensions", post + "Transfer-Encoding: chunked\r\n\r\n5 ;a=\"b c\"\r\nhello\r\n6;x\r\n world\r\n0\r\nX-T: 1\r\n\r\n", "Body-Length: 11"},
		{"leading zeros", post + "Content-Length: 005\r\n\r\nhello", "Body-Length: 5"},
		{"request line of 8000 bytes", "GET /tea/" + strings.Repeat("a", 8000) + " HTTP/1.1\r\nHost: cafe.example.com\r\nConnection: close\r\n\r\n", "Server name: tea-"},
		{"four 5k header lines", "GET /tea HTTP/1.1\r\nHost: cafe.example.com\r\nConnection: close\r\n" + four.String() + "\r\n", "Server name: tea-"},
		{"method with - and _", "M-SEARCH_X /tea HTTP/1.1\r\nHost: cafe.example.com\r\nConnection: close\r\n\r\n", "Method: M-SEARCH_X"},
	} {
		got := r.raw(t, tc.req, 5*time.Second)
		if !strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: answer %q, want 200 with %q", tc.name, firstLines(got), tc.want)
		}
	}
}

// TestHeadFits is nginx's header buffer arithmetic: a 1k buffer, then up to 4
// of 8k, a line never split between two.
func TestHeadFits(t *testing.T) {
	line := func(n int) string { return "X: " + strings.Repeat("a", n-5) + "\r\n" }
	for _, tc := range []struct {
		name string
		head string
		want int
	}{
		{"small", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", 0},
		{"request line of exactly 8k", "GET /" + strings.Repeat("a", 8192-16) + " HTTP/1.1\r\n\r\n", 0},
		{"request line of 8k and one byte", "GET /" + strings.Repeat("a", 8192-15) + " HTTP/1.1\r\n\r\n", 414},
		{"header line of exactly 8k", "GET / HTTP/1.1\r\n" + line(8192) + "\r\n", 0},
		{"header line of 8k and one byte", "GET / HTTP/1.1\r\n" + line(8193) + "\r\n", 431},
		{"four 8k lines, then the end in a fifth buffer", "GET / HTTP/1.1\r\n" + strings.Repeat(line(8192), 4) + "\r\n", 431},
		{"four 8k lines, the last holding the end", "GET / HTTP/1.1\r\n" + strings.Repeat(line(8192), 3) + line(8190) + "\r\n", 0},
		{"many short lines pack", "GET / HTTP/1.1\r\n" + strings.Repeat(line(100), 300) + "\r\n", 0},
	} {
		if got := headFits([]byte(tc.head), 8192); got != tc.want {
			t.Errorf("%s: headFits = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestDialUpstream: the proxy reaches endpoints through Config.DialUpstream
// when it is set.
func TestDialUpstream(t *testing.T) {
	o, _, _ := cafe(t)
	var dials atomic.Int64
	r := startProxy(t, o.build(t), Config{DialUpstream: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}})
	if resp, body := r.get(t, "cafe.example.com", "/tea"); resp.StatusCode != 200 {
		t.Fatalf("/tea: %d %s", resp.StatusCode, body)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("DialUpstream called %d times, want 1", n)
	}
}
