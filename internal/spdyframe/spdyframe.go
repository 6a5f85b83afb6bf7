// Package spdyframe sends a SPDY/3.1 byte stream one whole frame per write.
//
// spdystream (under k8s.io/streaming's SPDY connections, so under every
// port-forward and SPDY exec) writes each frame field by field straight to its
// connection: a data frame is three writes (stream id, flags and length,
// payload), so three TCP segments, each crossing netfilter, and on a TLS
// connection three records. A Writer parses the frame headers in the stream it
// is given (every frame, control or data, is an 8-byte header whose last three
// bytes are the payload length) and writes each frame, or every frame complete
// in one Write, in one writev. It never holds back the end of a frame: it
// waits only for the rest of a frame the sender has begun, which the sender
// writes next.
package spdyframe

import (
	"io"
	"net"
	"sync"
)

// headerLen is the size of every SPDY/3.1 frame header.
const headerLen = 8

// Writer coalesces the SPDY frames written to it into whole-frame writes to w.
// The stream must begin at a frame boundary.
type Writer struct {
	w        io.Writer
	vectored bool // w writes net.Buffers in one writev

	mu      sync.Mutex // frames may be written from several goroutines
	pending []byte     // the start of a frame not yet complete (copied)
	hdr     int        // header bytes of the current frame seen so far
	length  [3]byte    // the current frame's payload length, as it arrives
	left    int        // payload bytes of the current frame still to come
}

// NewWriter returns a Writer onto w.
func NewWriter(w io.Writer) *Writer {
	_, tcp := w.(*net.TCPConn)
	return &Writer{w: w, vectored: tcp}
}

// Write takes p, the next bytes of the stream, and writes out every frame it
// completes; the start of an incomplete frame is kept for the next Write.
func (fw *Writer) Write(p []byte) (int, error) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	end := 0 // p[:end] completes the frames begun so far
	for i := 0; i < len(p); {
		if fw.hdr < headerLen {
			if fw.hdr >= headerLen-3 {
				fw.length[fw.hdr-(headerLen-3)] = p[i]
			}
			fw.hdr++
			i++
			if fw.hdr == headerLen {
				fw.left = int(fw.length[0])<<16 | int(fw.length[1])<<8 | int(fw.length[2])
			}
		} else {
			n := min(fw.left, len(p)-i)
			fw.left -= n
			i += n
		}
		if fw.hdr == headerLen && fw.left == 0 {
			fw.hdr = 0
			end = i
		}
	}
	if end > 0 {
		var err error
		switch {
		case len(fw.pending) == 0:
			_, err = fw.w.Write(p[:end])
		case fw.vectored:
			bufs := net.Buffers{fw.pending, p[:end]}
			_, err = bufs.WriteTo(fw.w)
		default:
			// One Write on a TLS connection is one record per 16 KiB.
			fw.pending = append(fw.pending, p[:end]...)
			_, err = fw.w.Write(fw.pending)
		}
		fw.pending = fw.pending[:0]
		if err != nil {
			return 0, err
		}
	}
	fw.pending = append(fw.pending, p[end:]...)
	return len(p), nil
}

// Conn is a net.Conn whose writes go through a Writer.
type Conn struct {
	net.Conn
	w *Writer
}

// NewConn returns c with its writes coalesced into whole frames.
func NewConn(c net.Conn) *Conn { return &Conn{Conn: c, w: NewWriter(c)} }

// Write writes p through the frame-coalescing writer.
func (c *Conn) Write(p []byte) (int, error) { return c.w.Write(p) }

// copyBufferSize is ReadFrom's read size: a TLS record or a WebSocket message
// from the client is at most this, so one read takes any of them whole.
const copyBufferSize = 64 << 10

// ForwardConn is a net.Conn that a proxy copies a SPDY stream into: its
// ReadFrom, which io.Copy uses, writes the copied stream a whole frame at a
// time, so a client's frame that arrives as three TLS records or WebSocket
// messages leaves as one segment. Its Write is untouched, for what precedes the
// SPDY stream on the connection (the HTTP upgrade request).
type ForwardConn struct{ net.Conn }

// ReadFrom copies r, which must begin at a frame boundary, to the connection.
func (c ForwardConn) ReadFrom(r io.Reader) (int64, error) {
	fw := NewWriter(c.Conn)
	buf := make([]byte, copyBufferSize)
	var n int64
	for {
		m, err := r.Read(buf)
		if m > 0 {
			if _, werr := fw.Write(buf[:m]); werr != nil {
				return n, werr
			}
			n += int64(m)
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
