package gateway

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"time"
)

// RequestMirror: a copy of the request, as it goes to the backend (after
// the rule's header filters and URL rewrite), is sent to one ready endpoint
// of each mirror backend whose sample draws it, and the copy's response is
// read and discarded. The copy never delays or fails the original: it is
// sent from its own goroutine with its own deadline, at most
// maxMirrorsInFlight at once per data port (a slow or dead mirror backend
// makes later copies be dropped, not queued), and a mirror without a
// ready endpoint gets nothing.
//
// The body is copied only when the request announces a length of at most
// maxMirroredBody: the original is then read into memory once and replayed
// to both. A larger or streamed body (no Content-Length) is not mirrored,
// since teeing it would tie the original's pace to the mirror's.

const (
	maxMirrorsInFlight = 256
	maxMirroredBody    = 1 << 20
	mirrorTimeout      = 30 * time.Second
)

type mirrorer struct {
	client, h2c *http.Client
	slots       chan struct{}
}

func newMirrorer(dial Dialer) *mirrorer {
	client := func(h2c bool) *http.Client {
		return &http.Client{Transport: backendTransport(dial, h2c), Timeout: mirrorTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	return &mirrorer{client: client(false), h2c: client(true), slots: make(chan struct{}, maxMirrorsInFlight)}
}

// send mirrors r (already modified for the backend) to act's sampled
// mirrors. It may replace r.Body with an in-memory copy of it.
func (m *mirrorer) send(r *http.Request, act *Action, endpoints map[BackendKey][]string) {
	var targets []string
	for _, mr := range act.Mirrors {
		if mr.Backend.Invalid || !mr.Sampled(rand.Int32N(mr.Denominator)) {
			continue
		}
		if eps := endpoints[mr.Backend.Key()]; len(eps) > 0 {
			targets = append(targets, eps[rand.IntN(len(eps))])
		}
	}
	if len(targets) == 0 {
		return
	}
	var body []byte
	switch {
	case r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0:
	case r.ContentLength > 0 && r.ContentLength <= maxMirroredBody:
		b, err := io.ReadAll(io.LimitReader(r.Body, r.ContentLength))
		// The original gets what was read and then the rest, if any; so
		// does a failed read, which the backend then sees as it would have.
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
		if err != nil || int64(len(b)) != r.ContentLength {
			return
		}
		body = b
	default:
		return
	}
	c := m.client
	if act.GRPC {
		c = m.h2c
	}
	for _, ep := range targets {
		select {
		case m.slots <- struct{}{}:
		default:
			continue // too many copies in flight: drop this one
		}
		out := r.Clone(context.Background())
		out.RequestURI = ""
		out.URL.Scheme, out.URL.Host = "http", ep
		out.Host = r.Host
		out.Body, out.ContentLength = http.NoBody, 0
		if body != nil {
			out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		}
		go func() {
			defer func() { <-m.slots }()
			resp, err := c.Do(out)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}()
	}
}
