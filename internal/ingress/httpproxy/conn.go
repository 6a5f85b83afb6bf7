package httpproxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	mrand "math/rand/v2"
	"net"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/minikit/minikit/internal/ingress/config"
)

// Client connection states, for Shutdown: an idle connection (waiting for the
// next request) is closed at once, an active one finishes its request.
const (
	stateIdle int32 = iota
	stateActive
	stateClosed
)

// bodyInline is the largest request or response body appended to its head and
// sent with it in one write; larger bodies are streamed.
const bodyInline = 16 << 10

// maxMoved bounds the attempts that do not count because their endpoint was
// removed from the configuration while they dialled it.
const maxMoved = 8

// clientConn is one client connection and the buffers its requests reuse.
type clientConn struct {
	p      *Proxy
	c      net.Conn
	tls    bool
	rd     reader
	hs     []header
	out    []byte // the upstream request head
	wb     []byte // the client response head (and small bodies)
	dl     deadlines
	state  atomic.Int32
	n      int // requests served
	rng    *mrand.ChaCha8
	peerIP []byte
	port   []byte // the local port, X-Forwarded-Port
	host   []byte // scratch: the lowercased Host without port
	tried  []*pool
	linger bool // the last answer left request body unread
}

func newClientConn(p *Proxy, c net.Conn, useTLS bool) *clientConn {
	cc := &clientConn{p: p, c: c, tls: useTLS, rd: reader{buf: make([]byte, 8<<10)},
		hs: make([]header, 0, 32), out: make([]byte, 0, 2048), wb: make([]byte, 0, 2048)}
	var seed [32]byte
	rand.Read(seed[:])
	cc.rng = mrand.NewChaCha8(seed)
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		cc.peerIP = []byte(a.IP.String())
	}
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
		cc.port = strconv.AppendInt(nil, int64(a.Port), 10)
	}
	return cc
}

func (cc *clientConn) closeIfIdle() {
	if cc.state.CompareAndSwap(stateIdle, stateClosed) {
		cc.c.Close()
	}
}

// draining reports that the proxy is shutting down: no more keep-alive.
func (cc *clientConn) draining() bool {
	return cc.p.closed.Load()
}

// request is a parsed request head; its slices point into the read buffer and
// are valid until the buffer is next filled.
type request struct {
	method    []byte
	uri       []byte // what goes on the upstream request line (origin-form)
	path      []byte // uri without the query
	query     []byte // after '?', without it; nil when absent
	host      []byte // Host as sent (with a port, if any)
	headLen   int
	http11    bool
	keepAlive bool
	head      bool // HEAD request: the answer has no body
	framing   framing
	length    int64
	upgrade   []byte
	expect    bool // Expect: 100-continue
	requestID []byte
	xff       []byte
}

func (cc *clientConn) serve() {
	defer cc.close()
	var req request
	for {
		err := cc.readRequest(&req)
		if err != nil {
			cc.fail(err)
			return
		}
		cc.n++
		if !cc.handle(&req) {
			return
		}
		if !cc.state.CompareAndSwap(stateActive, stateIdle) || cc.draining() {
			return
		}
	}
}

// close closes the connection. When an answer was sent without reading the
// request's body, the body is read and dropped for a while first (nginx's
// lingering close): closing with unread input would reset the connection, and
// the client would lose the answer (a 413, say) before reading it.
func (cc *clientConn) close() {
	if cc.linger {
		if cw, ok := cc.c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		cc.c.SetReadDeadline(time.Now().Add(lingerTime))
		buf := cc.rd.buf
		for total := 0; total < lingerBytes; {
			n, err := cc.c.Read(buf)
			total += n
			if err != nil {
				break
			}
		}
	}
	cc.c.Close()
}

// lingerTime and lingerBytes bound a lingering close.
const (
	lingerTime  = 2 * time.Second
	lingerBytes = 64 << 20
)

// fail answers a request that could not be read, when there is one to answer.
func (cc *clientConn) fail(err error) {
	var ce *clientError
	switch {
	case errors.As(err, &ce):
		cc.p.log.Debug("bad request", "client", cc.c.RemoteAddr(), "err", err)
		cc.writeError(ce.status, false, false)
	case errors.Is(err, errHeadTooLarge) && bytes.IndexByte(cc.rd.buf[cc.rd.r:cc.rd.w], '\n') < 0:
		// Not even the request line ended: nginx's 414.
		cc.writeError(414, false, false)
	case errors.Is(err, errHeadTooLarge):
		cc.writeError(431, false, false)
	case isTimeout(err) && cc.rd.buffered() > 0:
		cc.writeError(408, false, false)
	}
}

// readRequest reads and parses the next request head.
func (cc *clientConn) readRequest(req *request) error {
	rd := &cc.rd
	now := time.Now()
	if rd.buffered() == 0 {
		// Waiting for a new request on a keep-alive connection: a timeout here
		// closes the connection silently.
		cc.dl.setRead(cc.c, now, cc.p.opts.ClientHeaderTimeout)
	}
	for {
		// Skip the empty lines RFC 9112 lets a client send between requests.
		for rd.buffered() > 0 && (rd.buf[rd.r] == '\r' || rd.buf[rd.r] == '\n') {
			rd.r++
		}
		if rd.buffered() > 0 {
			if cc.state.Load() == stateIdle && !cc.state.CompareAndSwap(stateIdle, stateActive) {
				return errClosed
			}
			if n := headEnd(rd.buf[rd.r:rd.w]); n >= 0 {
				if n > cc.p.opts.MaxHeaderBytes {
					return errHeadTooLarge
				}
				if status := headFits(rd.buf[rd.r:rd.r+n], cc.p.opts.MaxHeaderBytes/headBuffers); status != 0 {
					return &clientError{status: status, msg: "request line or header too long"}
				}
				return cc.parseRequest(req, rd.buf[rd.r:rd.r+n])
			}
			if rd.buffered() >= cc.p.opts.MaxHeaderBytes {
				return errHeadTooLarge
			}
		}
		if err := rd.fill(cc.c, cc.p.opts.MaxHeaderBytes); err != nil {
			return err
		}
	}
}

// nginx reads a request head into a buffer of client_header_buffer_size
// (firstHeadBuffer) and, when a line does not end in it, moves that line to
// one of large_client_header_buffers (headBuffers of MaxHeaderBytes/headBuffers
// bytes, 4 8k by default); a line never spans two buffers.
const (
	firstHeadBuffer = 1 << 10
	headBuffers     = 4
)

// headFits answers whether nginx with these buffers takes head: 0 if it does,
// else nginx's answer, 414 for a request line that does not fit and 431 (its
// 400 "Request Header Or Cookie Too Large") for a header line. Without it a
// request line or header line of up to MaxHeaderBytes would be forwarded that
// nginx refuses.
func headFits(head []byte, large int) int {
	room, used, buffers := firstHeadBuffer, 0, 0
	for i := 0; len(head) > 0; i++ {
		n := bytes.IndexByte(head, '\n') + 1
		if n == 0 {
			n = len(head)
		}
		head = head[n:]
		if used+n <= room {
			used += n
			continue
		}
		if n > large || buffers == headBuffers {
			if i == 0 {
				return 414
			}
			return 431
		}
		buffers++
		room, used = large, n
	}
	return 0
}

func (cc *clientConn) parseRequest(req *request, head []byte) error {
	*req = request{headLen: len(head), length: 0}
	i := bytes.IndexByte(head, '\n')
	line := head[:i]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 {
		return badRequest("malformed request line")
	}
	req.method = line[:sp]
	for _, c := range req.method {
		// nginx's method characters, a subset of RFC 9110's token.
		if (c < 'A' || c > 'Z') && c != '_' && c != '-' {
			return badRequest("invalid method")
		}
	}
	rest := line[sp+1:]
	sp = bytes.LastIndexByte(rest, ' ')
	if sp <= 0 {
		return badRequest("malformed request line")
	}
	uri, proto := rest[:sp], rest[sp+1:]
	switch string(proto) {
	case "HTTP/1.1":
		req.http11 = true
	case "HTTP/1.0":
	default:
		if bytes.HasPrefix(proto, []byte("HTTP/")) {
			return &clientError{status: 505, msg: "unsupported HTTP version " + string(proto)}
		}
		return badRequest("malformed request line")
	}
	for _, c := range uri {
		if c <= ' ' || c == 0x7f {
			return badRequest("invalid request target")
		}
	}
	hs, err := parseHeaders(head[i+1:], cc.hs)
	cc.hs = hs
	if err != nil {
		return badRequest(err.Error())
	}
	hosts := 0
	connClose, connKeep, connUpgrade := false, false, false
	for k := range hs {
		h := &hs[k]
		switch h.kind {
		case hHost:
			hosts++
			req.host = h.value
		case hConnection:
			connClose = connClose || hasToken(h.value, "close")
			connKeep = connKeep || hasToken(h.value, "keep-alive")
			connUpgrade = connUpgrade || hasToken(h.value, "upgrade")
		case hUpgrade:
			req.upgrade = h.value
		case hExpect:
			req.expect = foldEq(h.value, "100-continue")
		case hXRequestID:
			req.requestID = h.value
		case hXForwardedFor:
			req.xff = h.value
		}
	}
	if hosts > 1 {
		return badRequest("more than one Host header")
	}
	switch {
	case len(uri) > 0 && uri[0] == '/':
	case hasPrefixFold(uri, "http://") || hasPrefixFold(uri, "https://"):
		// absolute-form: the authority replaces Host (RFC 9112 §3.2.2).
		auth := uri[bytes.IndexByte(uri, ':')+3:]
		j := bytes.IndexByte(auth, '/')
		if j < 0 {
			req.host, uri = auth, []byte("/")
		} else {
			req.host, uri = auth[:j], auth[j:]
		}
		hosts = 1
	default:
		return badRequest("invalid request target")
	}
	if hosts == 0 && req.http11 {
		return badRequest("HTTP/1.1 request without Host")
	}
	for _, c := range req.host {
		if c == '/' || c == '@' || c == ' ' || c == '\\' {
			return badRequest("invalid Host")
		}
	}
	req.uri = uri
	req.path = uri
	if q := bytes.IndexByte(uri, '?'); q >= 0 {
		req.path, req.query = uri[:q], uri[q+1:]
	}
	if !connUpgrade {
		req.upgrade = nil
	}
	req.keepAlive = !connClose && (req.http11 || connKeep)
	req.head = string(req.method) == "HEAD"
	var ce *clientError
	if req.framing, req.length, ce = requestFraming(hs, req.http11); ce != nil {
		return ce
	}
	return nil
}

func hasPrefixFold(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && foldEq(b[:len(prefix)], prefix)
}

// hostname is the Host without its port, lowercased, for matching.
func (cc *clientConn) hostname(host []byte) string {
	h := host
	if len(h) > 0 && h[0] == '[' {
		if i := bytes.IndexByte(h, ']'); i > 0 {
			h = h[:i+1]
		}
	} else if i := bytes.LastIndexByte(h, ':'); i >= 0 {
		h = h[:i]
	}
	if len(h) > 0 && h[len(h)-1] == '.' {
		h = h[:len(h)-1]
	}
	lower := true
	for _, c := range h {
		if 'A' <= c && c <= 'Z' {
			lower = false
			break
		}
	}
	if !lower {
		cc.host = append(cc.host[:0], h...)
		for i, c := range cc.host {
			if 'A' <= c && c <= 'Z' {
				cc.host[i] = c + 'a' - 'A'
			}
		}
		h = cc.host
	}
	return bstr(h)
}

// bstr views b as a string without copying; the caller must not keep it past
// the next change to b.
func bstr(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// handle answers one request and reports whether the connection stays open.
func (cc *clientConn) handle(req *request) bool {
	t := cc.p.table.Load()
	srv := t.cfg.Server(cc.hostname(req.host))
	if string(req.uri) == "*" {
		return cc.discardAndError(req, 400)
	}
	path, ok := config.CleanPath(bstr(req.path))
	if !ok {
		return cc.discardAndError(req, 400)
	}
	loc := srv.Match(path)
	switch {
	case loc.SSLRedirect && !cc.tls:
		return cc.redirect(req)
	case loc.Upstream == nil:
		return cc.discardAndError(req, loc.Status)
	case loc.MaxBodySize > 0 && req.framing == lengthBody && req.length > loc.MaxBodySize:
		return cc.discardAndError(req, 413)
	case loc.BackendProtocol == "GRPC" || loc.BackendProtocol == "GRPCS":
		// gRPC needs HTTP/2 end to end: only h2 clients reach a gRPC backend.
		cc.p.log.Debug("HTTP/1 request for a gRPC backend", "upstream", loc.Upstream.Name)
		return cc.discardAndError(req, 502)
	}
	b := t.backend(loc)
	if b == nil || len(b.eps) == 0 {
		return cc.discardAndError(req, 503)
	}
	hsts := cc.tls && srv.TLS != nil && cc.p.opts.HSTS
	return cc.proxy(req, loc, path, b, hsts)
}

// discardAndError answers status without reading the request body; the
// connection is kept only when there is no body to skip.
func (cc *clientConn) discardAndError(req *request, status int) bool {
	keep := req.keepAlive && req.framing == noBody && !cc.draining() && cc.n < cc.p.opts.KeepAliveRequests
	if keep {
		cc.rd.r += req.headLen
	}
	cc.linger = req.framing != noBody
	return cc.writeError(status, keep, req.head) && keep
}

// writeError writes nginx's page for status.
func (cc *clientConn) writeError(status int, keep, head bool) bool {
	pg, ok := pages[status]
	if !ok {
		pg, status = pages[500], 500
	}
	w := append(cc.wb[:0], pg...)
	if !keep {
		w = append(w, "Connection: close\r\n"...)
	}
	w = append(w, "\r\n"...)
	if !head {
		w = append(w, pages[-status]...)
	}
	cc.wb = w
	cc.dl.setWrite(cc.c, time.Now(), cc.p.opts.SendTimeout)
	_, err := cc.c.Write(w)
	return err == nil
}

// redirect answers 308 to the same URL over HTTPS, as ingress-nginx's ssl-redirect.
func (cc *clientConn) redirect(req *request) bool {
	body := errorPage(308)
	host := cc.hostname(req.host)
	w := append(cc.wb[:0], "HTTP/1.1 308 Permanent Redirect\r\nContent-Type: text/html\r\nContent-Length: "...)
	w = strconv.AppendInt(w, int64(len(body)), 10)
	w = append(w, "\r\nLocation: https://"...)
	w = append(w, host...)
	if cc.p.opts.HTTPSPort != 443 {
		w = append(w, ':')
		w = strconv.AppendInt(w, int64(cc.p.opts.HTTPSPort), 10)
	}
	w = append(w, req.uri...)
	w = append(w, "\r\n"...)
	keep := req.keepAlive && req.framing == noBody && !cc.draining() && cc.n < cc.p.opts.KeepAliveRequests
	if !keep {
		w = append(w, "Connection: close\r\n"...)
	}
	w = append(w, "\r\n"...)
	if !req.head {
		w = append(w, body...)
	}
	if keep {
		cc.rd.r += req.headLen
	}
	cc.linger = req.framing != noBody
	cc.wb = w
	cc.dl.setWrite(cc.c, time.Now(), cc.p.opts.SendTimeout)
	_, err := cc.c.Write(w)
	return err == nil && keep
}

// appendRequestID appends 32 hex digits, nginx's $request_id.
func (cc *clientConn) appendRequestID(b []byte) []byte {
	const hexd = "0123456789abcdef"
	var r [16]byte
	binary.LittleEndian.PutUint64(r[:8], cc.rng.Uint64())
	binary.LittleEndian.PutUint64(r[8:], cc.rng.Uint64())
	for _, c := range r {
		b = append(b, hexd[c>>4], hexd[c&15])
	}
	return b
}

// buildHead writes the upstream request head into cc.out: the client's request
// with hop-by-hop headers removed and the X-Forwarded-* set that ingress-nginx
// sends (it replaces, not appends, X-Forwarded-For: use-forwarded-headers is off).
func (cc *clientConn) buildHead(req *request, loc *config.Location, path string) {
	b := append(cc.out[:0], req.method...)
	b = append(b, ' ')
	if loc.RewriteTarget != "" {
		b = append(b, loc.Rewrite(path)...)
		if req.query != nil {
			b = append(b, '?')
			b = append(b, req.query...)
		}
	} else {
		b = append(b, req.uri...)
	}
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, req.host...)
	b = append(b, "\r\n"...)
	for k := range cc.hs {
		h := &cc.hs[k]
		if h.kind != hOther && h.kind != hServer && h.kind != hStrictTransportSecurity {
			continue
		}
		b = append(b, h.name...)
		b = append(b, ": "...)
		b = append(b, h.value...)
		b = append(b, "\r\n"...)
	}
	b = append(b, "X-Request-ID: "...)
	if len(req.requestID) > 0 {
		b = append(b, req.requestID...)
	} else {
		b = cc.appendRequestID(b)
	}
	b = append(b, "\r\nX-Real-IP: "...)
	b = append(b, cc.peerIP...)
	b = append(b, "\r\nX-Forwarded-For: "...)
	b = append(b, cc.peerIP...)
	b = append(b, "\r\nX-Forwarded-Host: "...)
	b = append(b, req.host...)
	b = append(b, "\r\nX-Forwarded-Port: "...)
	b = append(b, cc.port...)
	scheme := "http"
	if cc.tls {
		scheme = "https"
	}
	b = append(b, "\r\nX-Forwarded-Proto: "...)
	b = append(b, scheme...)
	b = append(b, "\r\nX-Forwarded-Scheme: "...)
	b = append(b, scheme...)
	b = append(b, "\r\nX-Scheme: "...)
	b = append(b, scheme...)
	b = append(b, "\r\n"...)
	if len(req.xff) > 0 {
		b = append(b, "X-Original-Forwarded-For: "...)
		b = append(b, req.xff...)
		b = append(b, "\r\n"...)
	}
	if req.upgrade != nil {
		b = append(b, "Connection: upgrade\r\nUpgrade: "...)
		b = append(b, req.upgrade...)
		b = append(b, "\r\n"...)
	}
	switch req.framing {
	case lengthBody:
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, req.length, 10)
		b = append(b, "\r\n"...)
	case chunkedBody:
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	b = append(b, "\r\n"...)
	cc.out = b
}

// idempotent is nginx's rule for retrying a request on another endpoint after it
// was sent: everything but POST, LOCK and PATCH.
func idempotent(method []byte) bool {
	switch string(method) {
	case "POST", "LOCK", "PATCH":
		return false
	}
	return true
}

// response is a parsed upstream response head.
type response struct {
	status    int
	line      []byte // "200 OK"
	framing   framing
	length    int64
	keepAlive bool
	upgrade   []byte
}

// proxy forwards a request to an endpoint of b and relays the answer.
func (cc *clientConn) proxy(req *request, loc *config.Location, path string, b *backend, hsts bool) bool {
	cc.buildHead(req, loc, path)
	rd := &cc.rd
	rd.r += req.headLen
	// The head's slices are dead from here on (the buffer may be refilled); keep
	// what is still needed.
	isHead, http11, upgrade, keepReq := req.head, req.http11, req.upgrade != nil, req.keepAlive
	idem := idempotent(req.method)
	// A small body that has fully arrived travels with the head and can be resent.
	bodyLeft := int64(0)
	switch req.framing {
	case lengthBody:
		bodyLeft = req.length
		if req.length <= bodyInline && int64(rd.buffered()) >= req.length {
			cc.out = append(cc.out, rd.buf[rd.r:rd.r+int(req.length)]...)
			rd.r += int(req.length)
			bodyLeft = 0
		}
	case chunkedBody:
		bodyLeft = -1
		complete, err := cc.inlineChunked(loc.MaxBodySize)
		var ce *clientError
		if errors.As(err, &ce) {
			cc.p.log.Debug("bad request body", "client", cc.c.RemoteAddr(), "err", err)
			cc.writeError(ce.status, false, isHead)
			cc.linger = true
			return false
		}
		if complete {
			bodyLeft = 0
		}
	}
	if req.expect && bodyLeft != 0 && http11 && rd.buffered() == 0 {
		cc.dl.setWrite(cc.c, time.Now(), cc.p.opts.SendTimeout)
		if _, err := cc.c.Write([]byte("HTTP/1.1 100 Continue\r\n\r\n")); err != nil {
			return false
		}
	}
	ctx := context.Background()
	start := b.start()
	var (
		uc   *upConn
		resp response
		err  error
	)
	sent := false // a streamed body has (partly) left: no retry from here
	tried := cc.tried[:0]
	moved := 0 // endpoints that left the configuration while we dialled them
	// Up to 3 attempts (proxy_next_upstream_tries), each on an endpoint not
	// tried yet while there is one.
	for attempt := 0; attempt < 3; {
		if attempt > 0 || moved > 0 {
			b = cc.p.current(b)
		}
		pl, fresh := b.pick(start, tried)
		if !fresh && attempt >= len(b.eps) {
			break
		}
		tried = append(tried, pl)
		var reused bool
		uc, reused, err = pl.get(ctx)
		if err != nil {
			if pl.ctx.Err() != nil && moved < maxMoved {
				// Not the endpoint's failure: it was removed from the
				// configuration (its pool closed) under us. Such an attempt does
				// not count; the next one is made on the current table.
				moved++
				cc.p.log.Debug("endpoint left the configuration, retrying", "upstream", b.name, "endpoint", pl.key.addr)
				continue
			}
			cc.p.log.Debug("upstream failed, trying the next", "upstream", b.name, "err", err)
			attempt++
			continue
		}
		var gotBytes bool
		sent, err = cc.send(uc, bodyLeft, loc.MaxBodySize)
		if err == nil {
			resp, gotBytes, err = cc.p.readResponseHead(uc, isHead, true)
		}
		if err == nil {
			break
		}
		uc.nc.Close()
		uc = nil
		var ce *clientError
		if errors.As(err, &ce) {
			if ce.status != 0 && !gotBytes {
				cc.writeError(ce.status, false, isHead)
				cc.linger = ce.status == 413
			}
			return false
		}
		if sent {
			break
		}
		if reused && !gotBytes && idem {
			// A keep-alive connection the endpoint had closed (it restarted, or
			// timed it out): its other idle connections are likely dead too.
			pl.dropIdle()
			cc.p.log.Debug("stale upstream connection, retrying", "upstream", b.name, "err", err)
			continue
		}
		if !idem || gotBytes {
			break
		}
		cc.p.log.Debug("upstream failed, trying the next", "upstream", b.name, "err", err)
		attempt++
	}
	clear(tried)
	cc.tried = tried[:0]
	if uc == nil {
		status := 502
		var ue *upstreamError
		if errors.As(err, &ue) {
			status = ue.status()
		}
		cc.p.log.Warn("proxying failed", "upstream", b.name, "status", status, "err", err)
		keep := keepReq && !sent && bodyLeft == 0 && !cc.draining() && cc.n < cc.p.opts.KeepAliveRequests
		return cc.writeError(status, keep, isHead) && keep
	}
	return cc.relay(uc, &resp, isHead, http11, upgrade, keepReq, hsts)
}

var errMoreInput = errors.New("more input needed")

// inlineChunked decodes a chunked request body that has fully arrived and
// appends it, re-chunked, to the upstream request in cc.out, as nginx
// (proxy_request_buffering on) reads a body whole before it connects: an
// invalid body is refused (a *clientError) before anything goes upstream, and
// a valid one is sent with the head and can be resent. It reports false, and
// leaves everything as it was, when the body has not all arrived yet: it is
// then streamed, and an error in it aborts the upstream request before its
// last chunk, so the backend never has a complete request.
func (cc *clientConn) inlineChunked(maxBody int64) (bool, error) {
	view := cc.rd
	start := len(cc.out)
	var total int64
	err := readChunked(&view, func() error { return errMoreInput }, func(data []byte, last bool) error {
		if last {
			cc.out = append(cc.out, "0\r\n\r\n"...)
			return nil
		}
		total += int64(len(data))
		if maxBody > 0 && total > maxBody {
			return &clientError{status: 413, msg: "request body too large"}
		}
		cc.out = strconv.AppendInt(cc.out, int64(len(data)), 16)
		cc.out = append(cc.out, "\r\n"...)
		cc.out = append(cc.out, data...)
		cc.out = append(cc.out, "\r\n"...)
		return nil
	})
	var ce *clientError
	switch {
	case err == nil:
		cc.rd.r = view.r
		return true, nil
	case errors.Is(err, errMoreInput):
		cc.out = cc.out[:start]
		return false, nil
	case errors.As(err, &ce):
		return false, err
	}
	return false, &clientError{status: 400, msg: "invalid chunked body: " + err.Error()}
}

// send writes the request head (with any inline body) and streams the rest of
// the body from the client. sent reports that body bytes read from the client
// went out, so the request cannot be replayed.
func (cc *clientConn) send(uc *upConn, bodyLeft int64, maxBody int64) (sent bool, err error) {
	now := time.Now()
	uc.dl.setWrite(uc.nc, now, cc.p.opts.SendUpstreamTimeout)
	if _, err := uc.nc.Write(cc.out); err != nil {
		return false, &upstreamError{op: "sending to", addr: uc.pool.key.addr, err: err}
	}
	switch {
	case bodyLeft > 0:
		return true, cc.copyBody(uc, bodyLeft)
	case bodyLeft < 0:
		return true, cc.copyChunked(uc, maxBody)
	}
	return false, nil
}

// copyBody streams n body bytes from the client to the upstream.
func (cc *clientConn) copyBody(uc *upConn, n int64) error {
	rd := &cc.rd
	for n > 0 {
		if rd.buffered() == 0 {
			cc.dl.setRead(cc.c, time.Now(), cc.p.opts.ClientBodyTimeout)
			if err := rd.fill(cc.c, len(rd.buf)); err != nil {
				return clientBodyError(err)
			}
		}
		k := min(int64(rd.buffered()), n)
		uc.dl.setWrite(uc.nc, time.Now(), cc.p.opts.SendUpstreamTimeout)
		if _, err := uc.nc.Write(rd.buf[rd.r : rd.r+int(k)]); err != nil {
			return &upstreamError{op: "sending to", addr: uc.pool.key.addr, err: err}
		}
		rd.r += int(k)
		n -= k
	}
	return nil
}

func clientBodyError(err error) error {
	if isTimeout(err) {
		return &clientError{status: 408, msg: "reading request body: " + err.Error()}
	}
	return &clientError{msg: "reading request body: " + err.Error()}
}

// copyChunked streams a chunked request body, re-encoding every chunk (so the
// upstream sees framing this proxy validated, and no trailers).
func (cc *clientConn) copyChunked(uc *upConn, maxBody int64) error {
	var total int64
	var werr error
	w := func(p []byte) {
		if werr == nil {
			uc.dl.setWrite(uc.nc, time.Now(), cc.p.opts.SendUpstreamTimeout)
			if _, err := uc.nc.Write(p); err != nil {
				werr = &upstreamError{op: "sending to", addr: uc.pool.key.addr, err: err}
			}
		}
	}
	var hdr []byte
	err := readChunked(&cc.rd, func() error {
		cc.dl.setRead(cc.c, time.Now(), cc.p.opts.ClientBodyTimeout)
		if err := cc.rd.fill(cc.c, len(cc.rd.buf)); err != nil {
			return clientBodyError(err)
		}
		return nil
	}, func(data []byte, last bool) error {
		total += int64(len(data))
		if maxBody > 0 && total > maxBody {
			return &clientError{status: 413, msg: "request body too large"}
		}
		if last {
			w([]byte("0\r\n\r\n"))
			return werr
		}
		hdr = strconv.AppendInt(hdr[:0], int64(len(data)), 16)
		hdr = append(hdr, "\r\n"...)
		w(hdr)
		w(data)
		w([]byte("\r\n"))
		return werr
	})
	var ce *clientError
	if err != nil && !errors.As(err, &ce) && werr == nil {
		return &clientError{status: 400, msg: "invalid chunked body: " + err.Error()}
	}
	return err
}

// readResponseHead reads the upstream's answer head, skipping 1xx interim
// answers. A 101 (protocol switch) is the answer when the client's
// connection can switch (HTTP/1.1), an error when it cannot (HTTP/2).
// gotBytes says whether any answer arrived at all.
func (p *Proxy) readResponseHead(uc *upConn, isHead, canSwitch bool) (response, bool, error) {
	rd := &uc.rd
	uc.dl.setRead(uc.nc, time.Now(), p.opts.ReadTimeout)
	got := false
	for {
		if rd.buffered() > 0 {
			got = true
			if n := headEnd(rd.buf[rd.r:rd.w]); n >= 0 {
				resp, err := parseResponse(rd.buf[rd.r:rd.r+n], uc, isHead)
				if err != nil {
					return resp, true, &upstreamError{op: "reading from", addr: uc.pool.key.addr, err: err}
				}
				if resp.status == 101 && !canSwitch {
					return resp, true, &upstreamError{op: "reading from", addr: uc.pool.key.addr, err: errors.New("protocol switch over HTTP/2")}
				}
				if resp.status >= 100 && resp.status < 200 && resp.status != 101 {
					rd.r += n
					continue
				}
				uc.headLen = n
				return resp, true, nil
			}
		}
		if err := rd.fill(uc.nc, 64<<10); err != nil {
			if errors.Is(err, errHeadTooLarge) {
				err = errors.New("upstream sent too big a header")
			}
			return response{}, got, &upstreamError{op: "reading from", addr: uc.pool.key.addr, err: err}
		}
	}
}

func parseResponse(head []byte, uc *upConn, isHead bool) (response, error) {
	var resp response
	i := bytes.IndexByte(head, '\n')
	line := head[:i]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return resp, errors.New("malformed status line")
	}
	http11 := line[7] == '1'
	code := line[9:12]
	for _, c := range code {
		if c < '0' || c > '9' {
			return resp, errors.New("malformed status code")
		}
	}
	resp.status = int(code[0]-'0')*100 + int(code[1]-'0')*10 + int(code[2]-'0')
	resp.line = line[9:]
	hs, err := parseHeaders(head[i+1:], uc.hs)
	uc.hs = hs
	if err != nil {
		return resp, err
	}
	connClose, connKeep := false, false
	for k := range hs {
		switch hs[k].kind {
		case hConnection:
			connClose = connClose || hasToken(hs[k].value, "close")
			connKeep = connKeep || hasToken(hs[k].value, "keep-alive")
		case hUpgrade:
			resp.upgrade = hs[k].value
		}
	}
	resp.keepAlive = !connClose && (http11 || connKeep)
	switch {
	case isHead || resp.status < 200 || resp.status == 204 || resp.status == 304:
		resp.framing = noBody
	default:
		resp.framing, resp.length, err = responseFraming(hs)
		if err != nil {
			return resp, err
		}
	}
	return resp, nil
}

// relay writes the upstream's answer to the client and returns the upstream
// connection to its pool when the exchange completed cleanly.
func (cc *clientConn) relay(uc *upConn, resp *response, isHead, http11, upgrade, keepReq, hsts bool) bool {
	if resp.status == 101 {
		if !upgrade {
			uc.nc.Close()
			cc.writeError(502, false, isHead)
			return false
		}
		return cc.tunnel(uc, resp)
	}
	keep := keepReq && !cc.draining() && cc.n < cc.p.opts.KeepAliveRequests && resp.framing != closeBody
	rechunk := resp.framing == chunkedBody && http11
	w := append(cc.wb[:0], "HTTP/1.1 "...)
	w = append(w, resp.line...)
	w = append(w, "\r\n"...)
	for k := range uc.hs {
		h := &uc.hs[k]
		switch h.kind {
		case hConnection, hKeepAlive, hProxyConnection, hTransferEncoding, hTE, hTrailer, hUpgrade:
			continue
		case hStrictTransportSecurity:
			if hsts {
				continue
			}
		}
		w = append(w, h.name...)
		w = append(w, ": "...)
		w = append(w, h.value...)
		w = append(w, "\r\n"...)
	}
	if rechunk {
		w = append(w, "Transfer-Encoding: chunked\r\n"...)
	}
	if hsts {
		w = append(w, "Strict-Transport-Security: max-age=31536000; includeSubDomains\r\n"...)
	}
	switch {
	case !keep:
		w = append(w, "Connection: close\r\n"...)
	case !http11:
		w = append(w, "Connection: keep-alive\r\n"...)
	}
	w = append(w, "\r\n"...)
	rd := &uc.rd
	rd.r += uc.headLen
	upKeep := resp.keepAlive
	var err error
	switch resp.framing {
	case noBody:
		err = cc.writeClient(w)
	case lengthBody:
		n := resp.length
		if k := min(int64(rd.buffered()), n); k <= bodyInline || k == n {
			w = append(w, rd.buf[rd.r:rd.r+int(k)]...)
			rd.r += int(k)
			n -= k
		}
		if err = cc.writeClient(w); err == nil && n > 0 {
			err = cc.streamLength(uc, n)
		}
	case chunkedBody:
		err = cc.streamChunked(uc, w, rechunk)
	case closeBody:
		upKeep = false
		if err = cc.writeClient(w); err == nil {
			err = cc.streamUntilClose(uc)
		}
	}
	cc.wb = w[:0]
	if err != nil {
		uc.nc.Close()
		cc.p.log.Debug("relaying the answer failed", "upstream", uc.pool.key.addr, "err", err)
		return false
	}
	if upKeep {
		uc.pool.put(uc)
	} else {
		uc.nc.Close()
	}
	return keep
}

func (cc *clientConn) writeClient(b []byte) error {
	cc.dl.setWrite(cc.c, time.Now(), cc.p.opts.SendTimeout)
	_, err := cc.c.Write(b)
	return err
}

// streamLength relays n more body bytes from the upstream.
func (cc *clientConn) streamLength(uc *upConn, n int64) error {
	rd := &uc.rd
	for n > 0 {
		if rd.buffered() == 0 {
			uc.dl.setRead(uc.nc, time.Now(), cc.p.opts.ReadTimeout)
			if err := rd.fill(uc.nc, len(rd.buf)); err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return err
			}
		}
		k := min(int64(rd.buffered()), n)
		if err := cc.writeClient(rd.buf[rd.r : rd.r+int(k)]); err != nil {
			return err
		}
		rd.r += int(k)
		n -= k
	}
	return nil
}

// streamUntilClose relays a body delimited by the upstream closing.
func (cc *clientConn) streamUntilClose(uc *upConn) error {
	rd := &uc.rd
	for {
		if rd.buffered() > 0 {
			if err := cc.writeClient(rd.buf[rd.r:rd.w]); err != nil {
				return err
			}
			rd.r = rd.w
		}
		uc.dl.setRead(uc.nc, time.Now(), cc.p.opts.ReadTimeout)
		if err := rd.fill(uc.nc, len(rd.buf)); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

// streamChunked relays a chunked body, re-chunked for HTTP/1.1 clients or as
// plain bytes (closing the connection) for HTTP/1.0 ones. Output gathers in w
// and is written when the upstream's buffered input is used up, so a small body
// goes out with its head in one write.
func (cc *clientConn) streamChunked(uc *upConn, w []byte, rechunk bool) error {
	var werr error
	flush := func() {
		if werr == nil && len(w) > 0 {
			werr = cc.writeClient(w)
		}
		w = w[:0]
	}
	err := readChunked(&uc.rd, func() error {
		flush()
		if werr != nil {
			return werr
		}
		uc.dl.setRead(uc.nc, time.Now(), cc.p.opts.ReadTimeout)
		return uc.rd.fill(uc.nc, len(uc.rd.buf))
	}, func(data []byte, last bool) error {
		if rechunk {
			if last {
				w = append(w, "0\r\n\r\n"...)
				return nil
			}
			w = strconv.AppendInt(w, int64(len(data)), 16)
			w = append(w, "\r\n"...)
		}
		w = append(w, data...)
		if rechunk {
			w = append(w, "\r\n"...)
		}
		if len(w) >= 32<<10 {
			flush()
		}
		return werr
	})
	if err == nil {
		flush()
		err = werr
	}
	cc.wb = w
	return err
}

// tunnel relays an upgraded connection (WebSocket) both ways until either side
// closes or stays silent for the read timeout.
func (cc *clientConn) tunnel(uc *upConn, resp *response) bool {
	w := append(cc.wb[:0], "HTTP/1.1 "...)
	w = append(w, resp.line...)
	w = append(w, "\r\n"...)
	for k := range uc.hs {
		h := &uc.hs[k]
		switch h.kind {
		case hConnection, hKeepAlive, hProxyConnection, hTransferEncoding, hTE, hTrailer, hUpgrade:
			continue
		}
		w = append(w, h.name...)
		w = append(w, ": "...)
		w = append(w, h.value...)
		w = append(w, "\r\n"...)
	}
	w = append(w, "Connection: upgrade\r\nUpgrade: "...)
	w = append(w, resp.upgrade...)
	w = append(w, "\r\n\r\n"...)
	uc.rd.r += uc.headLen
	w = append(w, uc.rd.buf[uc.rd.r:uc.rd.w]...)
	uc.rd.r = uc.rd.w
	defer uc.nc.Close()
	if err := cc.writeClient(w); err != nil {
		return false
	}
	cc.c.SetWriteDeadline(time.Time{})
	uc.nc.SetWriteDeadline(time.Time{})
	idle := cc.p.opts.ReadTimeout
	done := make(chan struct{})
	go func() {
		defer close(done)
		if cc.rd.buffered() > 0 {
			if _, err := uc.nc.Write(cc.rd.buf[cc.rd.r:cc.rd.w]); err != nil {
				return
			}
			cc.rd.r = cc.rd.w
		}
		copyIdle(uc.nc, cc.c, idle)
		if cw, ok := uc.nc.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
	}()
	copyIdle(cc.c, uc.nc, idle)
	cc.c.Close()
	uc.nc.Close()
	<-done
	return false
}

// copyIdle copies src to dst until EOF, an error, or idle without input.
func copyIdle(dst, src net.Conn, idle time.Duration) {
	buf := make([]byte, 16<<10)
	for {
		src.SetReadDeadline(time.Now().Add(idle))
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
