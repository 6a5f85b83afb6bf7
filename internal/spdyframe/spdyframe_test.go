package spdyframe

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/moby/spdystream/spdy"
)

// writes records every Write it gets.
type writes struct{ got [][]byte }

func (w *writes) Write(p []byte) (int, error) {
	w.got = append(w.got, bytes.Clone(p))
	return len(p), nil
}

// frame is a SPDY frame's bytes as the framer of spdystream writes them, and
// the pieces (the framer's writes).
func frame(t *testing.T, f spdy.Frame) ([]byte, [][]byte) {
	t.Helper()
	var w writes
	fr, err := spdy.NewFramer(&w, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteFrame(f); err != nil {
		t.Fatal(err)
	}
	return bytes.Join(w.got, nil), w.got
}

func TestWriterWholeFrames(t *testing.T) {
	data, dataPieces := frame(t, &spdy.DataFrame{StreamId: 3, Data: []byte("GET / HTTP/1.1\r\n\r\n")})
	fin, finPieces := frame(t, &spdy.DataFrame{StreamId: 3, Flags: spdy.DataFlagFin})
	syn, synPieces := frame(t, &spdy.SynStreamFrame{StreamId: 5, Headers: map[string][]string{"Streamtype": {"data"}, "Port": {"80"}}})
	ping, pingPieces := frame(t, &spdy.PingFrame{Id: 7})
	if len(dataPieces) < 3 || len(synPieces) < 3 {
		t.Fatalf("the framer writes a data frame in %d pieces and SYN_STREAM in %d: this test assumes several", len(dataPieces), len(synPieces))
	}
	for _, tc := range []struct {
		name   string
		pieces [][]byte
		want   [][]byte
	}{
		{"data frame as the framer writes it", dataPieces, [][]byte{data}},
		{"empty data frame with FIN", finPieces, [][]byte{fin}},
		{"SYN_STREAM as the framer writes it", synPieces, [][]byte{syn}},
		{"frames one after another", append(append(append([][]byte{}, synPieces...), dataPieces...), pingPieces...), [][]byte{syn, data, ping}},
		{"several frames in one write", [][]byte{bytes.Join([][]byte{data, fin, ping}, nil)}, [][]byte{bytes.Join([][]byte{data, fin, ping}, nil)}},
		{"a write completing one frame and starting the next",
			[][]byte{data[:5], append(bytes.Clone(data[5:]), ping[:3]...), ping[3:]}, [][]byte{data, ping}},
		{"byte by byte", split(data, 1), [][]byte{data}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w writes
			fw := NewWriter(&w)
			for _, p := range tc.pieces {
				if n, err := fw.Write(p); n != len(p) || err != nil {
					t.Fatalf("Write(%d bytes) = %d, %v", len(p), n, err)
				}
			}
			if len(w.got) != len(tc.want) {
				t.Fatalf("%d writes %q, want %d: %q", len(w.got), w.got, len(tc.want), tc.want)
			}
			for i := range w.got {
				if !bytes.Equal(w.got[i], tc.want[i]) {
					t.Errorf("write %d is %q, want %q", i, w.got[i], tc.want[i])
				}
			}
		})
	}
}

func split(b []byte, n int) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		k := min(n, len(b))
		out = append(out, b[:k])
		b = b[k:]
	}
	return out
}

// TestConnOneSegmentPerFrame checks, over a real TCP connection, that a frame
// the framer writes in pieces reaches the peer in one read, and that nothing
// is held back: every frame written is read whole before the next is written.
func TestConnOneSegmentPerFrame(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	fr, err := spdy.NewFramer(NewConn(server), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, payload := range []string{"a", strings.Repeat("b", 1000), ""} {
		if err := fr.WriteFrame(&spdy.DataFrame{StreamId: 1, Data: []byte(payload)}); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4096)
		n, err := client.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		if n != 8+len(payload) {
			t.Errorf("frame %d: first read got %d bytes, want the whole frame, %d", i, n, 8+len(payload))
		}
	}
}

// TestForwardConn copies a stream of frames, sent in the framer's pieces
// through a pipe, into a ForwardConn and reads them back whole on the peer.
func TestForwardConn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	out, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	pr, pw := io.Pipe()
	go func() {
		fr, _ := spdy.NewFramer(pw, nil)
		for i := range 100 {
			fr.WriteFrame(&spdy.DataFrame{StreamId: spdy.StreamId(2*i + 1), Data: bytes.Repeat([]byte{byte(i)}, i*100)})
		}
		pw.Close()
	}()
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(ForwardConn{out}, pr)
		out.Close()
		done <- err
	}()
	fr, err := spdy.NewFramer(nil, peer)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		d, ok := f.(*spdy.DataFrame)
		if !ok || d.StreamId != spdy.StreamId(2*i+1) || !bytes.Equal(d.Data, bytes.Repeat([]byte{byte(i)}, i*100)) {
			t.Fatalf("frame %d: got %#v", i, f)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
