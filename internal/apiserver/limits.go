package apiserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Limits bound what one slow, stalled or hostile client can hold of the server:
// a connection, a goroutine, a buffer. Every bound ends in a clear answer where
// the protocol still allows one (413, 408, a closed watch), else in a closed
// connection. The request body size is fixed at kube-apiserver's 3 MiB
// (maxBodyBytes); nesting is bounded at 10,000 levels by the JSON decoder and
// by the YAML parser alike (TestDeeplyNestedBodies).
type Limits struct {
	// ReadHeaderTimeout is how long a client has to send its request headers
	// (the slowloris bound). Default 10s.
	ReadHeaderTimeout time.Duration
	// BodyTimeout is how long a client has to send a request body. Default 60s.
	BodyTimeout time.Duration
	// IdleTimeout closes a keep-alive connection with no request. Default 2m.
	IdleTimeout time.Duration
	// StreamWriteTimeout is how long a watch or log stream waits for the client
	// to accept one event; a client that stops reading is dropped. Default 60s.
	StreamWriteTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers. Default 1 MiB.
	MaxHeaderBytes int
}

// DefaultLimits are the limits of a server whose Config leaves them zero.
func DefaultLimits() Limits {
	return Limits{
		ReadHeaderTimeout:  10 * time.Second,
		BodyTimeout:        60 * time.Second,
		IdleTimeout:        2 * time.Minute,
		StreamWriteTimeout: 60 * time.Second,
		MaxHeaderBytes:     1 << 20,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = d.ReadHeaderTimeout
	}
	if l.BodyTimeout <= 0 {
		l.BodyTimeout = d.BodyTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	if l.StreamWriteTimeout <= 0 {
		l.StreamWriteTimeout = d.StreamWriteTimeout
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = d.MaxHeaderBytes
	}
	return l
}

// HTTPServer returns an http.Server for the API with the server's limits. The
// caller adds TLS, a base context and an error log, and serves it.
//
// There is deliberately no ReadTimeout or WriteTimeout: both are per
// connection, and a watch legitimately lasts for an hour. Reading a body is
// bounded per request (bodyDeadline), and writing a stream per event.
func (s *Server) HTTPServer() *http.Server {
	l := s.cfg.Limits
	return &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
	}
}

// connKey carries a request's connection in its context, for setLinger0.
type connKey struct{}

// setLinger0 makes a later close of r's connection a reset (SO_LINGER 0), or
// undoes that (on false). A stream sets it while it runs because net/http
// closes the connection itself, inside the write that timed out: a normal
// close would leave the kernel trickling a full send buffer into the client's
// zero window for minutes, the client none the wiser; a reset frees the buffer
// and tells the client at once. HTTP/2 connections are shared by streams and
// left alone (net/http resets the stream).
func setLinger0(r *http.Request, on bool) {
	if r.ProtoMajor != 1 {
		return
	}
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if tc, ok := c.(*net.TCPConn); ok {
		if on {
			tc.SetLinger(0)
		} else {
			tc.SetLinger(-1)
		}
	}
}

// bodyDeadline bounds the time to read r's body, and lifts the bound once the
// body has been read (a failed read keeps it, see deadlineBody.Read): net/http's
// background read, which watches
// for the client going away during a long response, must not hit it, or it
// would cancel the request. It answers a declared oversized body at once.
func (s *Server) bodyDeadline(w http.ResponseWriter, r *http.Request) error {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	if r.ContentLength > maxBodyBytes {
		return tooLarge()
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(s.cfg.Limits.BodyTimeout)) != nil {
		return nil // not a real connection (a test recorder): nothing to bound
	}
	r.Body = &deadlineBody{ReadCloser: r.Body, clear: func() { rc.SetReadDeadline(time.Time{}) }, timeout: s.cfg.Limits.BodyTimeout}
	return nil
}

// deadlineBody clears the connection's read deadline when the body has been read.
type deadlineBody struct {
	io.ReadCloser
	clear   func()
	done    bool
	timeout time.Duration
}

// Read lifts the deadline at the body's end only. After a failure it stays: net/http
// then fails at once to discard the rest of the body, and closes the connection
// after the error answer instead of waiting for the client.
func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		b.clear()
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = &bodyTimeoutError{timeout: b.timeout, err: err}
	}
	return n, err
}

type bodyTimeoutError struct {
	timeout time.Duration
	err     error
}

func (e *bodyTimeoutError) Error() string {
	return fmt.Sprintf("the request body was not received within %v", e.timeout)
}
func (e *bodyTimeoutError) Unwrap() error { return e.err }

// tooLarge is kube-apiserver's answer to a body over the limit.
func tooLarge() error {
	return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d bytes", maxBodyBytes))
}

// bodyReadError turns a failure to read a request body into a Status: 408 when
// the client was too slow, 400 otherwise.
func bodyReadError(err error) error {
	var te *bodyTimeoutError
	if errors.As(err, &te) {
		return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusRequestTimeout,
			Reason: metav1.StatusReasonTimeout, Message: te.Error()}}
	}
	return apierrors.NewBadRequest(fmt.Sprintf("reading request body: %v", err))
}

// streamWriter bounds each write of a long response (watch events, log lines)
// with a write deadline, so a client that stops reading releases its
// goroutine and connection instead of holding them until the stream's end.
type streamWriter struct {
	w       http.ResponseWriter
	r       *http.Request
	rc      *http.ResponseController
	timeout time.Duration
	now     func() time.Time
	failed  bool // a write failed: the connection is being torn down
}

func (s *Server) newStreamWriter(w http.ResponseWriter, r *http.Request) *streamWriter {
	setLinger0(r, true)
	return &streamWriter{w: w, r: r, rc: http.NewResponseController(w), timeout: s.cfg.Limits.StreamWriteTimeout, now: time.Now}
}

// Write writes p (buffered; a full buffer goes to the client) within the
// write timeout.
func (sw *streamWriter) Write(p []byte) (int, error) {
	sw.rc.SetWriteDeadline(sw.now().Add(sw.timeout))
	n, err := sw.w.Write(p)
	if err != nil {
		sw.failed = true
	}
	return n, err
}

// flush sends what is buffered, within the write timeout, then lifts the
// deadline: an idle stream is not a stalled client, and HTTP/2 resets a
// stream whose write deadline passes even when nothing is being written.
func (sw *streamWriter) flush() error {
	sw.rc.SetWriteDeadline(sw.now().Add(sw.timeout))
	if err := sw.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		sw.failed = true
		return err
	}
	sw.rc.SetWriteDeadline(time.Time{})
	return nil
}

// done bounds the end of the response, which net/http writes after the
// handler returns (the last chunk), by the same timeout: a stream may end for
// another reason (the store dropped a watcher that fell behind) while its
// client has stopped reading.
func (sw *streamWriter) done() {
	if sw.r.ProtoMajor != 1 {
		sw.rc.SetWriteDeadline(time.Time{}) // the stream ends with the handler
		return
	}
	sw.rc.SetWriteDeadline(sw.now().Add(sw.timeout))
	if !sw.failed {
		setLinger0(sw.r, false) // the connection may serve further requests
	}
}
