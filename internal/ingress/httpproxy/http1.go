package httpproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
)

// This file is the HTTP/1.x wire format, parsed in place: a message head is
// sliced out of the connection's read buffer and nothing is copied or allocated
// per request. The parser is strict where leniency lets a request mean one thing
// here and another upstream (request smuggling): no whitespace before a colon, no
// obsolete line folding, one Content-Length, one Transfer-Encoding and only
// "chunked", never both. It refuses at least what nginx refuses, with nginx's
// statuses: test/ingress/differential_test.go sends a corpus of smuggling and
// malformed requests to both and fails where minikit is the laxer.

var errHeadTooLarge = errors.New("message head too large")

// reader buffers one connection's input. buf[r:w] is unread.
type reader struct {
	buf  []byte
	r, w int
}

func (rd *reader) buffered() int { return rd.w - rd.r }

// fill reads more input, making room first. It fails with errHeadTooLarge when
// the unread data already fills max bytes.
func (rd *reader) fill(c net.Conn, max int) error {
	if rd.r > 0 && rd.r == rd.w {
		rd.r, rd.w = 0, 0
	}
	if rd.w == len(rd.buf) {
		switch {
		case rd.r > 0:
			n := copy(rd.buf, rd.buf[rd.r:rd.w])
			rd.r, rd.w = 0, n
		case len(rd.buf) < max:
			nb := make([]byte, min(2*len(rd.buf), max))
			copy(nb, rd.buf[:rd.w])
			rd.buf = nb
		default:
			return errHeadTooLarge
		}
	}
	n, err := c.Read(rd.buf[rd.w:])
	rd.w += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// headEnd returns the length of the message head at the start of b (through
// the empty line), or -1 if it is not complete. Lines may end in LF or CRLF.
func headEnd(b []byte) int {
	i := 0
	for {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		i += j + 1
		if i < len(b) && b[i] == '\n' {
			return i + 1
		}
		if i+1 < len(b) && b[i] == '\r' && b[i+1] == '\n' {
			return i + 2
		}
		if i >= len(b)-1 {
			return -1
		}
	}
}

// header is one field of a head, both slices into the read buffer.
type header struct {
	name, value []byte
	kind        hdrKind
	// tab: the value of a Content-Length or Transfer-Encoding had a tab
	// around it, which nginx does not take for whitespace there.
	tab bool
}

type hdrKind uint8

// Headers that the proxy interprets or replaces; everything else is copied.
const (
	hOther hdrKind = iota
	hHost
	hContentLength
	hTransferEncoding
	hConnection
	hKeepAlive
	hProxyConnection
	hUpgrade
	hTE
	hTrailer
	hExpect
	hXRequestID
	hXForwardedFor
	hXRealIP
	hXForwardedHost
	hXForwardedPort
	hXForwardedProto
	hXForwardedScheme
	hXScheme
	hXOriginalForwardedFor
	hProxy
	hServer
	hStrictTransportSecurity
)

// classify names the header kinds the proxy cares about, case-insensitively,
// switching on the length first so most names cost one comparison.
func classify(n []byte) hdrKind {
	switch len(n) {
	case 2:
		if foldEq(n, "te") {
			return hTE
		}
	case 4:
		if foldEq(n, "host") {
			return hHost
		}
	case 5:
		if foldEq(n, "proxy") {
			return hProxy
		}
	case 6:
		if foldEq(n, "expect") {
			return hExpect
		}
		if foldEq(n, "server") {
			return hServer
		}
	case 7:
		if foldEq(n, "upgrade") {
			return hUpgrade
		}
		if foldEq(n, "trailer") {
			return hTrailer
		}
	case 8:
		if foldEq(n, "x-scheme") {
			return hXScheme
		}
	case 9:
		if foldEq(n, "x-real-ip") {
			return hXRealIP
		}
	case 10:
		if foldEq(n, "connection") {
			return hConnection
		}
		if foldEq(n, "keep-alive") {
			return hKeepAlive
		}
	case 12:
		if foldEq(n, "x-request-id") {
			return hXRequestID
		}
	case 14:
		if foldEq(n, "content-length") {
			return hContentLength
		}
	case 15:
		if foldEq(n, "x-forwarded-for") {
			return hXForwardedFor
		}
	case 16:
		if foldEq(n, "x-forwarded-host") {
			return hXForwardedHost
		}
		if foldEq(n, "x-forwarded-port") {
			return hXForwardedPort
		}
		if foldEq(n, "proxy-connection") {
			return hProxyConnection
		}
	case 17:
		if foldEq(n, "transfer-encoding") {
			return hTransferEncoding
		}
		if foldEq(n, "x-forwarded-proto") {
			return hXForwardedProto
		}
	case 18:
		if foldEq(n, "x-forwarded-scheme") {
			return hXForwardedScheme
		}
	case 24:
		if foldEq(n, "x-original-forwarded-for") {
			return hXOriginalForwardedFor
		}
	case 25:
		if foldEq(n, "strict-transport-security") {
			return hStrictTransportSecurity
		}
	}
	return hOther
}

// foldEq compares b with lower-case ASCII s, ignoring case.
func foldEq(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// hasToken reports whether a comma-separated header value lists token.
func hasToken(v []byte, token string) bool {
	for len(v) > 0 {
		var t []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			t, v = v[:i], v[i+1:]
		} else {
			t, v = v, nil
		}
		if foldEq(trimOWS(t), token) {
			return true
		}
	}
	return false
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// tchar is RFC 9110's token character set.
var tchar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// parseHeaders parses header lines (b without the request or status line,
// through the empty line) into hs, reusing its storage.
func parseHeaders(b []byte, hs []header) ([]header, error) {
	hs = hs[:0]
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return hs, errors.New("header line without end")
		}
		line := b[:i]
		b = b[i+1:]
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		if len(line) == 0 {
			return hs, nil
		}
		if line[0] == ' ' || line[0] == '\t' {
			return hs, errors.New("obsolete line folding")
		}
		c := bytes.IndexByte(line, ':')
		if c <= 0 {
			return hs, errors.New("header line without a colon")
		}
		name := line[:c]
		for _, ch := range name {
			if !tchar[ch] {
				return hs, errors.New("invalid header name")
			}
		}
		raw := line[c+1:]
		value := trimOWS(raw)
		for _, ch := range value {
			if ch < ' ' && ch != '\t' || ch == 0x7f {
				return hs, errors.New("invalid header value")
			}
		}
		h := header{name: name, value: value, kind: classify(name)}
		if h.kind == hContentLength || h.kind == hTransferEncoding {
			h.tab = bytes.IndexByte(raw, '\t') >= 0
		}
		hs = append(hs, h)
	}
}

// parseContentLength reads a Content-Length value: digits only.
func parseContentLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// framing is how a message body is delimited.
type framing uint8

const (
	noBody framing = iota
	lengthBody
	chunkedBody
	closeBody // until the connection closes (responses only)
)

// requestFraming is how a request's body is delimited, by nginx's rules, which
// are RFC 9112 §6.3 at its strictest: at most one Content-Length, of digits
// only; at most one Transfer-Encoding, in HTTP/1.1 only, and then exactly
// "chunked" (any other coding, a list included, is 501 Not Implemented: the
// proxy would have to decode it); never both. Everything else is 400.
func requestFraming(hs []header, http11 bool) (framing, int64, *clientError) {
	var cl int64 = -1
	var te *header
	for k := range hs {
		h := &hs[k]
		switch h.kind {
		case hContentLength:
			n, ok := parseContentLength(h.value)
			if !ok || h.tab || cl >= 0 {
				return 0, 0, &clientError{status: 400, msg: "invalid Content-Length"}
			}
			cl = n
		case hTransferEncoding:
			if te != nil {
				return 0, 0, &clientError{status: 400, msg: "more than one Transfer-Encoding"}
			}
			te = h
		}
	}
	switch {
	case te == nil && cl > 0:
		return lengthBody, cl, nil
	case te == nil:
		return noBody, 0, nil
	case !http11:
		return 0, 0, &clientError{status: 400, msg: "HTTP/1.0 request with Transfer-Encoding"}
	case te.tab || !foldEq(te.value, "chunked"):
		return 0, 0, &clientError{status: 501, msg: "unknown Transfer-Encoding " + strconv.Quote(string(te.value))}
	case cl >= 0:
		return 0, 0, &clientError{status: 400, msg: "both Transfer-Encoding and Content-Length"}
	}
	return chunkedBody, -1, nil
}

// responseFraming applies RFC 9112 §6.3 to the headers of a response:
// chunked if it is the final transfer coding, else Content-Length, else until
// close. Conflicting Content-Lengths are an error.
func responseFraming(hs []header) (framing, int64, error) {
	var cl int64 = -1
	te := false
	chunked := false
	for _, h := range hs {
		switch h.kind {
		case hContentLength:
			n, ok := parseContentLength(h.value)
			if !ok || (cl >= 0 && n != cl) {
				return 0, 0, errors.New("invalid Content-Length")
			}
			cl = n
		case hTransferEncoding:
			te = true
			// Only the last coding matters; "gzip, chunked" is chunked.
			v := h.value
			if i := bytes.LastIndexByte(v, ','); i >= 0 {
				v = v[i+1:]
			}
			chunked = foldEq(trimOWS(v), "chunked")
		}
	}
	switch {
	case te && chunked:
		return chunkedBody, -1, nil
	case te:
		return closeBody, -1, nil
	case cl >= 0:
		return lengthBody, cl, nil
	}
	return closeBody, -1, nil
}
