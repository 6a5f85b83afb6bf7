package httpproxy

import (
	"bytes"
	"errors"

	"github.com/minikit/minikit/internal/ingress/config"
)

// maxChunkLine bounds a chunk-size line (with extensions) and a trailer line.
const maxChunkLine = 4096

// readChunked decodes a chunked body from rd, calling emit with each piece of
// chunk data as it is available (a slice of rd's buffer, valid until the next
// fill) and once with last=true at the end; trailers are read and dropped. fill
// must add input to rd or fail.
func readChunked(rd *reader, fill func() error, emit func(data []byte, last bool) error) error {
	line := func() ([]byte, error) {
		for {
			if i := bytes.IndexByte(rd.buf[rd.r:rd.w], '\n'); i >= 0 {
				l := rd.buf[rd.r : rd.r+i]
				rd.r += i + 1
				if len(l) > 0 && l[len(l)-1] == '\r' {
					l = l[:len(l)-1]
				}
				if bytes.IndexByte(l, '\r') >= 0 {
					// nginx takes a CR only right before the LF.
					return nil, errors.New("bare CR in a chunk or trailer line")
				}
				return l, nil
			}
			if rd.buffered() >= maxChunkLine {
				return nil, errors.New("chunk line too long")
			}
			if err := fill(); err != nil {
				return nil, err
			}
		}
	}
	for {
		l, err := line()
		if err != nil {
			return err
		}
		// The size starts the line (nginx refuses whitespace before it);
		// whitespace may follow it, then only an extension, which is dropped.
		n := 0
		for n < len(l) && config.IsHex(l[n]) {
			n++
		}
		if ext := bytes.TrimLeft(l[n:], " \t"); n == 0 || n > 15 || len(ext) > 0 && ext[0] != ';' {
			return errors.New("invalid chunk size")
		}
		var size int64
		for _, c := range l[:n] {
			size = size<<4 | int64(config.Unhex(c))
		}
		if size == 0 {
			for {
				t, err := line()
				if err != nil {
					return err
				}
				if len(t) == 0 {
					return emit(nil, true)
				}
			}
		}
		for size > 0 {
			if rd.buffered() == 0 {
				if err := fill(); err != nil {
					return err
				}
			}
			k := min(int64(rd.buffered()), size)
			if err := emit(rd.buf[rd.r:rd.r+int(k)], false); err != nil {
				return err
			}
			rd.r += int(k)
			size -= k
		}
		l, err = line()
		if err != nil {
			return err
		}
		if len(l) != 0 {
			return errors.New("chunk data longer than its size")
		}
	}
}
