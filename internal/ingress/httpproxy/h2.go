package httpproxy

import (
	"crypto/rand"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"github.com/minikit/minikit/internal/ingress/config"
)

// serveH2 answers requests that arrived over HTTP/2 (net/http's server parses
// them). Upstreams are still spoken to over HTTP/1.1 through the same pools, as
// nginx does; gRPC backends get HTTP/2 end to end.
func (p *Proxy) serveH2(w http.ResponseWriter, r *http.Request) {
	t := p.table.Load()
	srv := t.cfg.Server(lowerHost(r.Host))
	path, ok := config.CleanPath(r.URL.EscapedPath())
	if !ok {
		h2Error(w, 400)
		return
	}
	loc := srv.Match(path)
	if loc.Upstream == nil {
		h2Error(w, loc.Status)
		return
	}
	b := t.backend(loc)
	if b == nil || len(b.eps) == 0 {
		h2Error(w, 503)
		return
	}
	if loc.MaxBodySize > 0 && r.ContentLength > loc.MaxBodySize {
		h2Error(w, 413)
		return
	}
	if loc.BackendProtocol == "GRPC" || loc.BackendProtocol == "GRPCS" {
		p.grpc(loc.BackendProtocol == "GRPCS", b).ServeHTTP(w, r)
		return
	}
	if loc.MaxBodySize > 0 {
		r.Body = http.MaxBytesReader(w, r.Body, loc.MaxBodySize)
	}
	hsts := srv.TLS != nil && p.opts.HSTS
	if err := p.exchangeH2(w, r, loc, path, b, hsts); err != nil {
		var ue *upstreamError
		status := 502
		if errors.As(err, &ue) {
			status = ue.status()
		}
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			status = 413
		}
		p.log.Warn("proxying failed", "upstream", b.name, "status", status, "err", err)
		h2Error(w, status)
	}
}

func lowerHost(h string) string {
	if strings.HasPrefix(h, "[") {
		if i := strings.IndexByte(h, ']'); i > 0 {
			h = h[:i+1]
		}
	} else if i := strings.LastIndexByte(h, ':'); i >= 0 {
		h = h[:i]
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

func h2Error(w http.ResponseWriter, status int) {
	code := status
	if code == 431 {
		code = 400
	}
	w.Header().Set("Content-Type", "text/html")
	w.WriteHeader(code)
	io.WriteString(w, errorPage(status))
}

// exchangeH2 proxies one HTTP/2 request over an HTTP/1.1 upstream connection.
func (p *Proxy) exchangeH2(w http.ResponseWriter, r *http.Request, loc *config.Location, path string, b *backend, hsts bool) error {
	head := p.h2Head(r, loc, path)
	// Bodies of unknown length go chunked; a body that is already complete is
	// sent with the head so the request can be retried.
	body := r.Body
	replay := r.ContentLength == 0 || body == nil || body == http.NoBody
	idem := idempotent([]byte(r.Method))
	start := b.start()
	var lastErr error
	var tried []*pool
	moved := 0 // as in clientConn.proxy
	for attempt := 0; attempt < 3; {
		if attempt > 0 || moved > 0 {
			b = p.current(b)
		}
		pl, fresh := b.pick(start, tried)
		if !fresh && attempt >= len(b.eps) {
			break
		}
		tried = append(tried, pl)
		uc, reused, err := pl.get(r.Context())
		if err != nil {
			lastErr = err
			if pl.ctx.Err() != nil && r.Context().Err() == nil && moved < maxMoved {
				moved++
				continue
			}
			attempt++
			continue
		}
		uc.dl.setWrite(uc.nc, time.Now(), p.opts.SendUpstreamTimeout)
		_, err = uc.nc.Write(head)
		if err == nil && !replay {
			err = p.h2Body(uc, r)
		}
		var resp response
		got := false
		if err == nil {
			resp, got, err = p.readResponseHead(uc, r.Method == "HEAD", false)
		}
		if err != nil {
			uc.nc.Close()
			lastErr = err
			if !replay || got {
				return err
			}
			if reused && idem {
				pl.dropIdle()
				continue
			}
			if !idem {
				return err
			}
			attempt++
			continue
		}
		if err := p.relayH2(w, uc, &resp, hsts); err != nil {
			uc.nc.Close()
			p.log.Debug("relaying the answer failed", "upstream", uc.pool.key.addr, "err", err)
			return nil
		}
		if resp.keepAlive && resp.framing != closeBody {
			uc.pool.put(uc)
		} else {
			uc.nc.Close()
		}
		return nil
	}
	return lastErr
}

// h2Head is the upstream request head for an HTTP/2 request, with the same
// headers buildHead sets for HTTP/1.
func (p *Proxy) h2Head(r *http.Request, loc *config.Location, path string) []byte {
	b := make([]byte, 0, 1024)
	b = append(b, r.Method...)
	b = append(b, ' ')
	uri := r.URL.RequestURI()
	if loc.RewriteTarget != "" {
		uri = loc.Rewrite(path)
		if r.URL.RawQuery != "" {
			uri += "?" + r.URL.RawQuery
		}
	}
	b = append(b, uri...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, r.Host...)
	b = append(b, "\r\n"...)
	for name, vs := range r.Header {
		if classify([]byte(name)) != hOther {
			continue
		}
		for _, v := range vs {
			b = append(b, name...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	ip, port := r.RemoteAddr, ""
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		ip = h
	}
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if _, pt, err := net.SplitHostPort(la.String()); err == nil {
			port = pt
		}
	}
	id := r.Header.Get("X-Request-ID")
	if id == "" {
		var rb [16]byte
		randomBytes(rb[:])
		const hexd = "0123456789abcdef"
		buf := make([]byte, 0, 32)
		for _, c := range rb {
			buf = append(buf, hexd[c>>4], hexd[c&15])
		}
		id = string(buf)
	}
	for _, kv := range [][2]string{
		{"X-Request-ID", id}, {"X-Real-IP", ip}, {"X-Forwarded-For", ip}, {"X-Forwarded-Host", r.Host},
		{"X-Forwarded-Port", port}, {"X-Forwarded-Proto", "https"}, {"X-Forwarded-Scheme", "https"}, {"X-Scheme", "https"},
		{"X-Original-Forwarded-For", r.Header.Get("X-Forwarded-For")},
	} {
		if kv[1] == "" {
			continue
		}
		b = append(b, kv[0]...)
		b = append(b, ": "...)
		b = append(b, kv[1]...)
		b = append(b, "\r\n"...)
	}
	if r.ContentLength > 0 {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, r.ContentLength, 10)
		b = append(b, "\r\n"...)
	} else if r.ContentLength < 0 && r.Body != nil && r.Body != http.NoBody {
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	return append(b, "\r\n"...)
}

// h2Body streams an HTTP/2 request body upstream (chunked when its length is unknown).
func (p *Proxy) h2Body(uc *upConn, r *http.Request) error {
	buf := make([]byte, 16<<10)
	chunked := r.ContentLength < 0
	var hdr []byte
	for {
		n, rerr := r.Body.Read(buf)
		if n > 0 {
			var out []byte
			if chunked {
				hdr = strconv.AppendInt(hdr[:0], int64(n), 16)
				hdr = append(hdr, "\r\n"...)
				out = append(append(append(out, hdr...), buf[:n]...), "\r\n"...)
			} else {
				out = buf[:n]
			}
			uc.dl.setWrite(uc.nc, time.Now(), p.opts.SendUpstreamTimeout)
			if _, err := uc.nc.Write(out); err != nil {
				return &upstreamError{op: "sending to", addr: uc.pool.key.addr, err: err}
			}
		}
		if rerr == io.EOF {
			if chunked {
				if _, err := uc.nc.Write([]byte("0\r\n\r\n")); err != nil {
					return &upstreamError{op: "sending to", addr: uc.pool.key.addr, err: err}
				}
			}
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

func (p *Proxy) relayH2(w http.ResponseWriter, uc *upConn, resp *response, hsts bool) error {
	h := w.Header()
	for k := range uc.hs {
		hd := &uc.hs[k]
		switch hd.kind {
		case hConnection, hKeepAlive, hProxyConnection, hTransferEncoding, hTE, hTrailer, hUpgrade:
			continue
		case hStrictTransportSecurity:
			if hsts {
				continue
			}
		}
		h.Add(string(hd.name), string(hd.value))
	}
	if hsts {
		h.Set("Strict-Transport-Security", "max-age=31536000; includeSubDomains")
	}
	w.WriteHeader(resp.status)
	rd := &uc.rd
	rd.r += uc.headLen
	fill := func() error {
		uc.dl.setRead(uc.nc, time.Now(), p.opts.ReadTimeout)
		return rd.fill(uc.nc, len(rd.buf))
	}
	switch resp.framing {
	case lengthBody:
		for n := resp.length; n > 0; {
			if rd.buffered() == 0 {
				if err := fill(); err != nil {
					return err
				}
			}
			k := min(int64(rd.buffered()), n)
			if _, err := w.Write(rd.buf[rd.r : rd.r+int(k)]); err != nil {
				return err
			}
			rd.r += int(k)
			n -= k
		}
	case chunkedBody:
		return readChunked(rd, fill, func(data []byte, last bool) error {
			if len(data) > 0 {
				_, err := w.Write(data)
				return err
			}
			return nil
		})
	case closeBody:
		for {
			if rd.buffered() > 0 {
				if _, err := w.Write(rd.buf[rd.r:rd.w]); err != nil {
					return err
				}
				rd.r = rd.w
			}
			if err := fill(); err != nil {
				if err == io.EOF {
					return nil
				}
				return err
			}
		}
	}
	return nil
}

// grpc returns a reverse proxy speaking HTTP/2 to the backend's endpoints, round
// robin: cleartext (h2c) for GRPC, TLS for GRPCS.
func (p *Proxy) grpc(useTLS bool, b *backend) http.Handler {
	tr := p.grpcTransport(useTLS)
	scheme := "http"
	if useTLS {
		scheme = "https"
	}
	return &httputil.ReverseProxy{
		Transport: tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			ep := b.at(b.start(), 0)
			pr.Out.URL.Scheme, pr.Out.URL.Host = scheme, ep.key.addr
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.log.Warn("proxying failed", "upstream", b.name, "status", 502, "err", err)
			h2Error(w, 502)
		},
	}
}

func (p *Proxy) grpcTransport(useTLS bool) *http.Transport {
	i := 0
	if useTLS {
		i = 1
	}
	p.grpcOnce[i].Do(func() {
		var protos http.Protocols
		tr := &http.Transport{
			DialContext:     p.opts.DialUpstream,
			IdleConnTimeout: p.opts.UpstreamIdleTimeout,
		}
		if useTLS {
			protos.SetHTTP2(true)
			tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
		} else {
			protos.SetUnencryptedHTTP2(true)
		}
		tr.Protocols = &protos
		p.grpcTr[i] = tr
	})
	return p.grpcTr[i]
}

func randomBytes(b []byte) { rand.Read(b) }
