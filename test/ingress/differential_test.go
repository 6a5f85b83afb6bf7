package ingress_test

// The differential test of the hand-written HTTP/1.1 data path
// (internal/ingress/httpproxy), which stays only with it (issue 23): a corpus of
// request-smuggling and malformed-request cases, sent as raw bytes to Debian's
// nginx running the nginx.conf minikit renders (internal/ingress/nginxconf)
// and to minikit's proxy serving the same Ingress, both in front of one backend
// that parses strictly and records every request that reaches it, raw. All of
// it runs on 127.0.0.1 inside a network namespace of the test's own (mkhd-*).
//
// For each case the test compares the answers on the client connection and
// the requests that reached the backend (method, target, body):
//   - minikit must forward the same requests as nginx, or stop earlier
//     (reject where nginx forwards): "same" or "stricter"; forwarding what
//     nginx refuses fails the test, unless the case says why it is harmless;
//   - whatever nginx does, minikit must never forward a request the client
//     did not send as a request of its own (the case's intent): no smuggling;
//   - a request minikit began to stream and cut off (closing the upstream
//     connection before its end, when the body turned out invalid after it
//     had started to forward it) is counted as aborted, not forwarded: the
//     backend never had a complete request. (A chunked body that arrives
//     whole is checked before anything goes upstream, as nginx does.)
//
// The run ends with the table and the line
// "differential HTTP cases: N (nginx vs minikit): X same, Y stricter".

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minikit/minikit/internal/ingress/config"
	"github.com/minikit/minikit/internal/ingress/httpproxy"
	"github.com/minikit/minikit/internal/ingress/nginxconf"
	"github.com/minikit/minikit/internal/netns"
	"github.com/minikit/minikit/internal/testutil"
	"github.com/minikit/minikit/test/testenv"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Addresses inside the test's own network namespace, where nothing else listens.
const (
	diffBackendAddr = "127.0.0.1:9000"
	diffNginxAddr   = "127.0.0.1:8080"
	diffNginxTLS    = "127.0.0.1:8443"
	diffMinikitAddr = "127.0.0.1:8081"
	// diffIdle is both proxies' client header, body and keep-alive timeout:
	// every connection ends with the proxy closing it, at the latest this
	// long after the client's last byte, so a case is over when its
	// connection is closed.
	diffIdle = 2 * time.Second
)

// diffCase is one client connection's bytes. "{P}" in parts and intent is the
// case's own path prefix (/cNN), which is how the backend's records are told
// apart when all cases run at once.
type diffCase struct {
	name string
	// parts are written in order; a part after the first only once the proxy
	// answered "100 Continue" (or closed).
	parts []string
	// intent is what a correct parser makes of the client's bytes: the
	// separate requests it sent, in order, as fwd(method, target, body). A
	// proxy may stop forwarding anywhere (reject), never forward anything
	// else.
	intent []string
	// harmless, when set, says why minikit may forward what nginx rejects.
	harmless string
}

// fwd is how a request that reached the backend is compared.
func fwd(method, target, body string) string { return fmt.Sprintf("%s %s %q", method, target, body) }

const hostHdr = "Host: diff.test\r\n"

func get(path string) string { return "GET " + path + " HTTP/1.1\r\n" + hostHdr + "\r\n" }

// diffCorpus is the corpus. Each entry names what it probes.
func diffCorpus() []diffCase {
	post := "POST {P}/a HTTP/1.1\r\n" + hostHdr
	smuggled := "GET {P}/smuggled HTTP/1.1\r\n" + hostHdr + "\r\n"
	big := strings.Repeat("a", 9000)
	var trailers strings.Builder
	for i := 0; i < 200; i++ {
		fmt.Fprintf(&trailers, "X-T%d: %s\r\n", i, strings.Repeat("t", 100))
	}
	var fiveHeaders strings.Builder
	for i := 0; i < 5; i++ {
		fmt.Fprintf(&fiveHeaders, "X-F%d: %s\r\n", i, strings.Repeat("f", 5000))
	}
	var hugeHead strings.Builder
	for i := 0; i < 6; i++ {
		fmt.Fprintf(&hugeHead, "X-H%d: %s\r\n", i, strings.Repeat("h", 7000))
	}
	none := []string(nil)
	return []diffCase{
		// Baselines: what every proxy forwards.
		{name: "get", parts: []string{get("{P}/a")}, intent: []string{fwd("GET", "{P}/a", "")}},
		{name: "post content-length", parts: []string{post + "Content-Length: 5\r\n\r\nhello"}, intent: []string{fwd("POST", "{P}/a", "hello")}},
		{name: "post chunked", parts: []string{post + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"}, intent: []string{fwd("POST", "{P}/a", "hello")}},
		{name: "leading empty lines", parts: []string{"\r\n\r\n" + get("{P}/a")}, intent: []string{fwd("GET", "{P}/a", "")}},

		// Content-Length and Transfer-Encoding together (RFC 9112 §6.1: chunked
		// wins, and the connection must close after the answer).
		{name: "CL.TE classic", parts: []string{post + "Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nG"},
			intent: []string{fwd("POST", "{P}/a", "")}},
		{name: "TE.CL classic", parts: []string{post + "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n8\r\nSMUGGLED\r\n0\r\n\r\n"},
			intent: []string{fwd("POST", "{P}/a", "SMUGGLED")}},
		{name: "CL.TE smuggled GET after the chunked end", parts: []string{post + "Transfer-Encoding: chunked\r\nContent-Length: " +
			strconv.Itoa(5+len(smuggled)) + "\r\n\r\n0\r\n\r\n" + smuggled}, intent: []string{fwd("POST", "{P}/a", "")}},
		{name: "TE.CL smuggled GET inside a chunk", parts: []string{post + "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" +
			strconv.FormatInt(int64(len(smuggled)), 16) + "\r\n" + smuggled + "\r\n0\r\n\r\n"}, intent: []string{fwd("POST", "{P}/a", smuggled)}},
		{name: "CL 0 with TE", parts: []string{post + "Content-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"},
			intent: []string{fwd("POST", "{P}/a", "abc")}},

		// Obfuscated Transfer-Encoding.
		{name: "TE xchunked with CL", parts: []string{post + "Transfer-Encoding: xchunked\r\nContent-Length: 5\r\n\r\nhello"}, intent: none},
		{name: "TE xchunked alone", parts: []string{post + "Transfer-Encoding: xchunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"}, intent: none},
		{name: "TE extra spaces", parts: []string{post + "Transfer-Encoding:   chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"}, intent: []string{fwd("POST", "{P}/a", "hello")}},
		{name: "TE tab before value", parts: []string{post + "Transfer-Encoding:\tchunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"}, intent: []string{fwd("POST", "{P}/a", "hello")}},
		{name: "TE trailing tab", parts: []string{post + "Transfer-Encoding: chunked\t\r\n\r\n5\r\nhello\r\n0\r\n\r\n"}, intent: []string{fwd("POST", "{P}/a", "hello")}},
		{name: "TE upper case", parts: []string{post + "transfer-encoding: CHUNKED\r\n\r\n5\r\nhello\r\n0\r\n\r\n"}, intent: []string{fwd("POST", "{P}/a", "hello")}},
		{name: "TE chunked, identity", parts: []string{post + "Transfer-Encoding: chunked, identity\r\nContent-Length: 5\r\n\r\nhello"}, intent: none},
		{name: "TE gzip, chunked", parts: []string{post + "Transfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"}, intent: none},
		{name: "TE identity with CL", parts: []string{post + "Transfer-Encoding: identity\r\nContent-Length: 5\r\n\r\nhello"}, intent: none},
		{name: "TE duplicated chunked", parts: []string{post + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"}, intent: none},
		{name: "TE duplicated identity then chunked", parts: []string{post + "Transfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n"}, intent: none},
		{name: "TE vertical tab", parts: []string{post + "Transfer-Encoding: \x0bchunked\r\nContent-Length: 5\r\n\r\nhello"}, intent: none},
		{name: "TE chunked with semicolon", parts: []string{post + "Transfer-Encoding: chunked;\r\nContent-Length: 5\r\n\r\nhello"}, intent: none},
		{name: "TE obs-folded", parts: []string{post + "Content-Length: 5\r\nX-A: b\r\n Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"}, intent: none},
		{name: "TE space before colon", parts: []string{post + "Transfer-Encoding : chunked\r\nContent-Length: 5\r\n\r\nhello"}, intent: none},
		{name: "TE in HTTP/1.0", parts: []string{"POST {P}/a HTTP/1.0\r\n" + hostHdr + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
			intent: []string{fwd("POST", "{P}/a", "hello")}},

		// Content-Length variants.
		{name: "CL duplicated equal", parts: []string{post + "Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello"}, intent: []string{fwd("POST", "{P}/a", "hello")}},
		{name: "CL duplicated different", parts: []string{post + "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!"}, intent: none},
		{name: "CL list", parts: []string{post + "Content-Length: 5, 5\r\n\r\nhello"}, intent: none},
		{name: "CL plus sign", parts: []string{post + "Content-Length: +5\r\n\r\nhello"}, intent: none},
		{name: "CL minus sign", parts: []string{post + "Content-Length: -5\r\n\r\nhello"}, intent: none},
		{name: "CL inner space", parts: []string{post + "Content-Length: 1 2\r\n\r\nhello world!"}, intent: none},
		{name: "CL surrounding spaces", parts: []string{post + "Content-Length:  5  \r\n\r\nhello"}, intent: []string{fwd("POST", "{P}/a", "hello")}},
		{name: "CL leading zeros", parts: []string{post + "Content-Length: 0005\r\n\r\nhello"}, intent: []string{fwd("POST", "{P}/a", "hello")}},
		{name: "CL huge", parts: []string{post + "Content-Length: 99999999999999999999\r\n\r\nhello"}, intent: none},
		{name: "CL hex", parts: []string{post + "Content-Length: 0x5\r\n\r\nhello"}, intent: none},
		{name: "CL empty", parts: []string{post + "Content-Length: \r\n\r\n"}, intent: none},
		{name: "CL space before colon", parts: []string{post + "Content-Length : 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"}, intent: none},
		{name: "CL tab before value", parts: []string{post + "Content-Length:\t5\r\n\r\nhello"}, intent: []string{fwd("POST", "{P}/a", "hello")}},
		{name: "CL body then pipelined GET", parts: []string{post + "Content-Length: 5\r\n\r\nhello" + get("{P}/b")},
			intent: []string{fwd("POST", "{P}/a", "hello"), fwd("GET", "{P}/b", "")}},

		// Line endings and folding.
		{name: "obs-fold", parts: []string{"GET {P}/a HTTP/1.1\r\n" + hostHdr + "X-A: a\r\n b\r\n\r\n"}, intent: none},
		{name: "obs-fold of Content-Length", parts: []string{post + "Content-Length: 5\r\n 0\r\n\r\nhello"}, intent: none},
		{name: "bare LF everywhere", parts: []string{"GET {P}/a HTTP/1.1\nHost: diff.test\n\n"}, intent: []string{fwd("GET", "{P}/a", "")}},
		{name: "bare LF in headers", parts: []string{"GET {P}/a HTTP/1.1\r\nHost: diff.test\nX-A: b\r\n\r\n"}, intent: []string{fwd("GET", "{P}/a", "")}},
		{name: "bare LF in chunked body", parts: []string{post + "Transfer-Encoding: chunked\r\n\r\n5\nhello\n0\n\n"}, intent: []string{fwd("POST", "{P}/a", "hello")}},
		{name: "bare CR in header value", parts: []string{"GET {P}/a HTTP/1.1\r\n" + hostHdr + "X-A: a\rb\r\n\r\n"}, intent: none},
		{name: "bare CR line end", parts: []string{"GET {P}/a HTTP/1.1\r\n" + hostHdr + "X-A: a\rContent-Length: 5\r\n\r\nhello"}, intent: none},
		{name: "bare CR in request line", parts: []string{"GET {P}/a\r HTTP/1.1\r\n" + hostHdr + "\r\n"}, intent: none},

		// Chunk sizes.
		{name: "chunk size hex overflow", parts: []string{post + "Transfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFFF1\r\nhello\r\n0\r\n\r\n"}, intent: none},
		{name: "chunk size negative", parts: []string{post + "Transfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n"}, intent: none},
		{name: "chunk size leading space", parts: []string{post + "Transfer-Encoding: chunked\r\n\r\n 5\r\nhello\r\n0\r\n\r\n"}, intent: none},
		{name: "chunk size trailing space", parts: []string{post + "Transfer-Encoding: chunked\r\n\r\n5 \r\nhello\r\n0\r\n\r\n"}, intent: []string{fwd("POST", "{P}/a", "hello")}},
		{name: "chunk size missing", parts: []string{post + "Transfer-Encoding: chunked\r\n\r\n\r\nhello\r\n0\r\n\r\n"}, intent: none},
		{name: "chunk size 0x prefix", parts: []string{post + "Transfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n"}, intent: none},
		{name: "chunk size leading zeros", parts: []string{post + "Transfer-Encoding: chunked\r\n\r\n0005\r\nhello\r\n0\r\n\r\n"}, intent: []string{fwd("POST", "{P}/a", "hello")}},
		{name: "chunk data longer than size", parts: []string{post + "Transfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n"}, intent: none},
		{name: "chunk data without CRLF", parts: []string{post + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello0\r\n\r\n"}, intent: none},
		{name: "chunked body then pipelined GET", parts: []string{post + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n" + get("{P}/b")},
			intent: []string{fwd("POST", "{P}/a", "hello"), fwd("GET", "{P}/b", "")}},

		// Chunk extensions and trailers.
		{name: "chunk extension", parts: []string{post + "Transfer-Encoding: chunked\r\n\r\n5;name=value\r\nhello\r\n0\r\n\r\n"}, intent: []string{fwd("POST", "{P}/a", "hello")}},
		{name: "chunk extension quoted", parts: []string{post + "Transfer-Encoding: chunked\r\n\r\n5;name=\"a;b c\"\r\nhello\r\n0\r\n\r\n"}, intent: []string{fwd("POST", "{P}/a", "hello")}},
		{name: "chunk extension oversized", parts: []string{post + "Transfer-Encoding: chunked\r\n\r\n5;x=" + strings.Repeat("e", 5000) + "\r\nhello\r\n0\r\n\r\n"}, intent: []string{fwd("POST", "{P}/a", "hello")}},
		{name: "chunk extension bare CR", parts: []string{post + "Transfer-Encoding: chunked\r\n\r\n5;a=b\rc\r\nhello\r\n0\r\n\r\n"}, intent: none},
		{name: "chunk extension NUL", parts: []string{post + "Transfer-Encoding: chunked\r\n\r\n5;a=\x00\r\nhello\r\n0\r\n\r\n"}, intent: []string{fwd("POST", "{P}/a", "hello")}},
		{name: "trailer bare CR", parts: []string{post + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: a\rb\r\n\r\n"}, intent: []string{fwd("POST", "{P}/a", "hello")}},
		{name: "trailer", parts: []string{post + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n"}, intent: []string{fwd("POST", "{P}/a", "hello")}},
		{name: "trailer Content-Length", parts: []string{post + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nContent-Length: 50\r\n\r\n" + get("{P}/b")},
			intent: []string{fwd("POST", "{P}/a", "hello"), fwd("GET", "{P}/b", "")}},
		{name: "trailer holding a request line", parts: []string{post + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n" + smuggled},
			intent: []string{fwd("POST", "{P}/a", "hello")}},
		{name: "trailer section oversized", parts: []string{post + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n" + trailers.String() + "\r\n"},
			intent: []string{fwd("POST", "{P}/a", "hello")}},

		// Oversized heads (nginx: large_client_header_buffers 4 8k).
		{name: "request line 9000 bytes", parts: []string{get("{P}/" + big)}, intent: []string{fwd("GET", "{P}/"+big, "")}},
		{name: "header line 9000 bytes", parts: []string{"GET {P}/a HTTP/1.1\r\n" + hostHdr + "X-Big: " + big + "\r\n\r\n"}, intent: []string{fwd("GET", "{P}/a", "")}},
		{name: "five header lines of 5k", parts: []string{"GET {P}/a HTTP/1.1\r\n" + hostHdr + fiveHeaders.String() + "\r\n"}, intent: []string{fwd("GET", "{P}/a", "")}},
		{name: "header block 42k", parts: []string{"GET {P}/a HTTP/1.1\r\n" + hostHdr + hugeHead.String() + "\r\n"}, intent: []string{fwd("GET", "{P}/a", "")}},

		// Header names and bytes.
		{name: "header name space before colon", parts: []string{"GET {P}/a HTTP/1.1\r\n" + hostHdr + "X-A : b\r\n\r\n"}, intent: none},
		{name: "header without colon", parts: []string{"GET {P}/a HTTP/1.1\r\n" + hostHdr + "X-A b\r\n\r\n"}, intent: none},
		{name: "header empty name", parts: []string{"GET {P}/a HTTP/1.1\r\n" + hostHdr + ": b\r\n\r\n"}, intent: none},
		{name: "NUL in header value", parts: []string{"GET {P}/a HTTP/1.1\r\n" + hostHdr + "X-A: a\x00b\r\n\r\n"}, intent: none},
		{name: "NUL in header name", parts: []string{"GET {P}/a HTTP/1.1\r\n" + hostHdr + "X-\x00A: b\r\n\r\n"}, intent: none},
		{name: "NUL in request target", parts: []string{"GET {P}/a\x00b HTTP/1.1\r\n" + hostHdr + "\r\n"}, intent: none},
		{name: "control byte in header value", parts: []string{"GET {P}/a HTTP/1.1\r\n" + hostHdr + "X-A: a\x01b\r\n\r\n"}, intent: []string{fwd("GET", "{P}/a", "")}},
		{name: "DEL in header name", parts: []string{"GET {P}/a HTTP/1.1\r\n" + hostHdr + "X-\x7fA: b\r\n\r\n"}, intent: none},
		{name: "obs-text in header value", parts: []string{"GET {P}/a HTTP/1.1\r\n" + hostHdr + "X-A: caf\xe9\r\n\r\n"}, intent: []string{fwd("GET", "{P}/a", "")}},

		// Request lines.
		{name: "lower-case method", parts: []string{"get {P}/a HTTP/1.1\r\n" + hostHdr + "\r\n"}, intent: []string{fwd("get", "{P}/a", "")}},
		{name: "double space after method", parts: []string{"GET  {P}/a HTTP/1.1\r\n" + hostHdr + "\r\n"}, intent: []string{fwd("GET", "{P}/a", "")}},
		{name: "extra token after version", parts: []string{"GET {P}/a HTTP/1.1 x\r\n" + hostHdr + "\r\n"}, intent: none},
		{name: "HTTP/1.2", parts: []string{"GET {P}/a HTTP/1.2\r\n" + hostHdr + "\r\n"}, intent: []string{fwd("GET", "{P}/a", "")}},
		{name: "HTTP/2.0 over plain text", parts: []string{"GET {P}/a HTTP/2.0\r\n" + hostHdr + "\r\n"}, intent: none},
		{name: "HTTP/0.9 style", parts: []string{"GET {P}/a\r\n\r\n"}, intent: []string{fwd("GET", "{P}/a", "")}},
		{name: "absolute-form", parts: []string{"GET http://diff.test{P}/a HTTP/1.1\r\nHost: other.test\r\n\r\n"}, intent: []string{fwd("GET", "{P}/a", "")}},
		{name: "absolute-form with userinfo", parts: []string{"GET http://u@diff.test{P}/a HTTP/1.1\r\n" + hostHdr + "\r\n"}, intent: none},
		{name: "absolute-form upper-case scheme", parts: []string{"GET HTTP://diff.test{P}/a HTTP/1.1\r\n" + hostHdr + "\r\n"}, intent: []string{fwd("GET", "{P}/a", "")}},
		{name: "path with dot segments", parts: []string{get("{P}/x/../a")}, intent: []string{fwd("GET", "{P}/x/../a", "")}},

		// Host.
		{name: "Host missing HTTP/1.1", parts: []string{"GET {P}/a HTTP/1.1\r\n\r\n"}, intent: none},
		{name: "Host missing HTTP/1.0", parts: []string{"GET {P}/a HTTP/1.0\r\n\r\n"}, intent: []string{fwd("GET", "{P}/a", "")}},
		{name: "Host duplicated", parts: []string{"GET {P}/a HTTP/1.1\r\n" + hostHdr + "Host: other.test\r\n\r\n"}, intent: none},
		{name: "Host with a slash", parts: []string{"GET {P}/a HTTP/1.1\r\nHost: diff.test/x\r\n\r\n"}, intent: none},

		// Keep-alive and pipelining.
		{name: "HTTP/1.0 keep-alive pipelined", parts: []string{"GET {P}/a HTTP/1.0\r\nConnection: keep-alive\r\n" + hostHdr + "\r\nGET {P}/b HTTP/1.0\r\n" + hostHdr + "\r\n"},
			intent: []string{fwd("GET", "{P}/a", ""), fwd("GET", "{P}/b", "")}},
		{name: "HTTP/1.0 without keep-alive then another", parts: []string{"GET {P}/a HTTP/1.0\r\n" + hostHdr + "\r\n" + smuggled},
			intent: []string{fwd("GET", "{P}/a", "")}},
		{name: "pipelined 3", parts: []string{get("{P}/a") + get("{P}/b") + get("{P}/c")},
			intent: []string{fwd("GET", "{P}/a", ""), fwd("GET", "{P}/b", ""), fwd("GET", "{P}/c", "")}},
		{name: "pipelined across Connection: close", parts: []string{"GET {P}/a HTTP/1.1\r\n" + hostHdr + "Connection: close\r\n\r\n" + smuggled},
			intent: []string{fwd("GET", "{P}/a", "")}},
		{name: "pipelined POST across Connection: close", parts: []string{post + "Connection: close\r\nContent-Length: 5\r\n\r\nhello" + smuggled},
			intent: []string{fwd("POST", "{P}/a", "hello")}},
		{name: "request after a 400", parts: []string{"GET {P}/a HTTP/1.1\r\n" + hostHdr + "Bad Header: x\r\n\r\n" + smuggled}, intent: none},
		{name: "request after a bad chunked body", parts: []string{post + "Transfer-Encoding: chunked\r\n\r\nzz\r\n" + smuggled}, intent: none},

		// Expect: 100-continue.
		{name: "expect 100-continue, body sent at once", parts: []string{post + "Expect: 100-continue\r\nContent-Length: 5\r\n\r\nhello"},
			intent: []string{fwd("POST", "{P}/a", "hello")}},
		{name: "expect 100-continue, body after 100", parts: []string{post + "Expect: 100-continue\r\nContent-Length: 5\r\n\r\n", "hello"},
			intent: []string{fwd("POST", "{P}/a", "hello")}},
		{name: "chunked body in two writes", parts: []string{post + "Transfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n", "5\r\nhello\r\n0\r\n\r\n"},
			intent: []string{fwd("POST", "{P}/a", "hello")}},
		{name: "invalid chunk after a 100 Continue", parts: []string{post + "Transfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n", "5\r\nhello\r\nzz\r\n" + smuggled},
			intent: none},
		{name: "expect unknown", parts: []string{post + "Expect: something\r\nContent-Length: 5\r\n\r\nhello"}, intent: []string{fwd("POST", "{P}/a", "hello")}},
	}
}

// diffOutcome is what one proxy did with one case.
type diffOutcome struct {
	statuses []int    // answers on the client connection, in order (1xx included)
	junk     string   // bytes after the last answer that are no answer
	end      string   // how the connection ended: eof, reset, timeout
	fwd      []string // requests the backend got, in order
	// aborted counts requests the proxy began to stream to the backend and
	// cut off (closing the connection) before their end, when the client's
	// body turned out invalid: the backend never had a complete request.
	aborted int
}

// answered is the statuses without interim answers.
func (o diffOutcome) answered() []int {
	var s []int
	for _, c := range o.statuses {
		if c >= 200 {
			s = append(s, c)
		}
	}
	return s
}

func (o diffOutcome) String() string {
	var b strings.Builder
	for i, c := range o.statuses {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(c))
	}
	if len(o.statuses) == 0 {
		b.WriteString("-")
	}
	fmt.Fprintf(&b, " %s fwd=%d", o.end, len(o.fwd))
	if o.aborted > 0 {
		fmt.Fprintf(&b, " aborted=%d", o.aborted)
	}
	if o.junk != "" {
		fmt.Fprintf(&b, " junk=%q", trunc(o.junk, 40))
	}
	return b.String()
}

func truncList(l []string) string {
	var b strings.Builder
	for _, s := range l {
		fmt.Fprintf(&b, " [%s]", trunc(s, 120))
	}
	return b.String()
}

func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func TestHTTPDifferentialAgainstNginx(t *testing.T) {
	testenv.RequireRoot(t)
	nginxBin, err := exec.LookPath("nginx")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nginx"); serr != nil {
			t.Fatalf("nginx is not installed (scripts/deps.sh installs it): %v", err)
		}
		nginxBin = "/usr/sbin/nginx"
	}
	ns := newDiffNetns(t)
	be := startRecorder(t, ns)
	cfg := diffConfig(be)
	for _, p := range cfg.Problems {
		t.Errorf("config problem: %s", p)
	}
	corpus := diffCorpus()

	ngx := runNginx(t, ns, nginxBin, cfg)
	nginxOut := runCorpus(t, ns, diffNginxAddr, corpus)
	ngx.stop(t)
	nginxRecs := be.drain(t)

	mk := runMinikit(t, ns, cfg)
	minikitOut := runCorpus(t, ns, diffMinikitAddr, corpus)
	mk.stop(t)
	minikitRecs := be.drain(t)

	attribute(t, "nginx", nginxRecs, nginxOut)
	attribute(t, "minikit", minikitRecs, minikitOut)

	same, stricter := 0, 0
	t.Logf("%-45s | %-30s | %s", "case", "nginx", "minikit")
	for i, c := range corpus {
		n, m := nginxOut[i], minikitOut[i]
		verdict, problem := judge(c, prefix(i), n, m)
		switch verdict {
		case "same":
			same++
		case "stricter":
			stricter++
		}
		if !isPrefix(n.fwd, intentOf(c, prefix(i))) {
			verdict += ", nginx forwarded beyond the intent"
		}
		t.Logf("%-45s | %-30s | %s  [%s]", trunc(c.name, 45), n, m, verdict)
		if problem != "" {
			t.Errorf("case %q: %s\n  nginx:   %s %s\n  minikit: %s %s", c.name, problem, n, truncList(n.fwd), m, truncList(m.fwd))
		}
	}
	t.Logf("differential HTTP cases: %d (nginx vs minikit): %d same, %d stricter", len(corpus), same, stricter)
}

func prefix(i int) string { return fmt.Sprintf("/c%02d", i+1) }

// judge compares minikit's outcome with nginx's: "same", "stricter", or a
// problem. Rejecting where nginx forwards is allowed; forwarding where nginx
// rejects is not (unless the case says why it is harmless); forwarding what
// the client did not send as a request never is.
func judge(c diffCase, p string, n, m diffOutcome) (verdict, problem string) {
	intent := intentOf(c, p)
	if !isPrefix(m.fwd, intent) {
		return "SMUGGLED", fmt.Sprintf("minikit delivered requests the client did not send (it meant %q)", intent)
	}
	if m.junk != "" {
		return "JUNK", "minikit answered with bytes that are no HTTP answer"
	}
	if !isPrefix(m.fwd, n.fwd) {
		if c.harmless != "" {
			return "laxer, harmless", ""
		}
		return "LAXER", "minikit forwarded what nginx rejected"
	}
	if len(m.fwd) < len(n.fwd) {
		return "stricter", ""
	}
	if slices.Equal(n.answered(), m.answered()) {
		return "same", ""
	}
	// The same requests forwarded, then both refused the rest with other
	// statuses: minikit refused on a stricter rule (a control byte in a
	// header value, say, where nginx's answer comes from a later check).
	return "stricter", ""
}

func intentOf(c diffCase, p string) []string {
	intent := make([]string, len(c.intent))
	for i, s := range c.intent {
		intent[i] = strings.ReplaceAll(s, "{P}", p)
	}
	return intent
}

func isPrefix(a, b []string) bool { return len(a) <= len(b) && slices.Equal(a, b[:len(a)]) }

// newDiffNetns creates the test's network namespace with loopback up and
// removes it at the end.
func newDiffNetns(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("mkhd-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	if err := netns.CreateNamed(name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("removing the test's namespace: %v", err)
		}
	})
	err := netns.DoPath(netns.NetNSPath(name), func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	})
	if err != nil {
		t.Fatalf("bringing up lo in %s: %v", name, err)
	}
	return name
}

func listenIn(t *testing.T, ns, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	err := netns.DoPath(netns.NetNSPath(ns), func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		t.Fatalf("listening on %s in %s: %v", addr, ns, err)
	}
	return ln
}

func dialIn(ctx context.Context, ns, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := netns.DoPath(netns.NetNSPath(ns), func() (err error) {
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// diffConfig is the Ingress both proxies serve: diff.test and every other host
// (a rule without host) to one Service whose endpoint is the recorder.
func diffConfig(be *recorder) *config.Config {
	ptr := func(s string) *string { return &s }
	port := int32(9000)
	ready := true
	prefix := networkingv1.PathTypePrefix
	rule := func(host string) networkingv1.IngressRule {
		return networkingv1.IngressRule{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
			Paths: []networkingv1.HTTPIngressPath{{Path: "/", PathType: &prefix, Backend: networkingv1.IngressBackend{
				Service: &networkingv1.IngressServiceBackend{Name: "recorder", Port: networkingv1.ServiceBackendPort{Number: 80}}}}}}}}
	}
	in := config.Input{
		Class: config.DefaultClass,
		IngressClasses: []*networkingv1.IngressClass{{ObjectMeta: metav1.ObjectMeta{Name: "nginx"},
			Spec: networkingv1.IngressClassSpec{Controller: config.DefaultClass.Controller}}},
		Ingresses: []*networkingv1.Ingress{{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "diff"},
			Spec: networkingv1.IngressSpec{IngressClassName: ptr("nginx"), Rules: []networkingv1.IngressRule{rule("diff.test"), rule("")}}}},
		Services: []*corev1.Service{{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "recorder"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}},
		EndpointSlices: []*discoveryv1.EndpointSlice{{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "recorder-1", Labels: map[string]string{discoveryv1.LabelServiceName: "recorder"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: &port}},
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		}},
	}
	return config.Build(in)
}

// proxyUnderTest is a running proxy that stop shuts down, closing its
// upstream connections, so the recorder has seen everything it sent.
type proxyUnderTest struct{ stop func(t *testing.T) }

// runNginx runs nginx in ns with the nginx.conf rendered for cfg, under its own
// prefix directory. The only edit to the rendered file is diffIdle for the
// client timeouts. nginx and its workers are killed and the prefix removed at
// the end, even on failure.
func runNginx(t *testing.T, ns, bin string, cfg *config.Config) proxyUnderTest {
	t.Helper()
	dir, err := os.MkdirTemp("", "mkhd-nginx-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// nginx's workers run as nobody: they must reach the temp directories.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	_, certPEM, keyPEM, err := httpproxy.NewFakeCertificate()
	if err != nil {
		t.Fatal(err)
	}
	out, err := nginxconf.Render(cfg, nginxconf.Config{Listen: diffNginxAddr, ListenTLS: diffNginxTLS, Prefix: dir,
		WorkerProcesses: "1", DefaultCertPEM: certPEM, DefaultKeyPEM: keyPEM})
	if err != nil {
		t.Fatal(err)
	}
	conf := out.Conf()
	idle := strconv.Itoa(int(diffIdle/time.Second)) + "s;"
	for _, d := range []string{"keepalive_timeout 75s;", "client_header_timeout 60s;", "client_body_timeout 60s;"} {
		if strings.Count(conf, d) != 1 {
			t.Fatalf("rendered nginx.conf has no single %q to shorten", d)
		}
		conf = strings.Replace(conf, d, strings.Fields(d)[0]+" "+idle, 1)
	}
	out.Files[nginxconf.ConfFile] = []byte(conf)
	for name, data := range out.Files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"logs", "temp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	confPath := filepath.Join(dir, nginxconf.ConfFile)
	errLog := filepath.Join(dir, "logs", "error.log")
	if b, err := exec.Command(bin, "-t", "-q", "-p", dir+"/", "-c", confPath, "-e", errLog).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t rejected the rendered nginx.conf: %v\n%s", err, b)
	}
	// ip netns exec execs nginx (no fork): the process started is nginx's
	// master, leader of its own process group with its workers.
	var output bytes.Buffer
	cmd := exec.Command("ip", "netns", "exec", ns, bin, "-p", dir+"/", "-c", confPath, "-e", errLog)
	cmd.Stdout, cmd.Stderr = &output, &output
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	pgid := cmd.Process.Pid
	t.Cleanup(func() {
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-exited
		if t.Failed() {
			b, _ := os.ReadFile(errLog)
			t.Logf("nginx output:\n%s\nnginx error.log (tail):\n%s", output.String(), tail(string(b), 3000))
		}
	})
	testutil.Eventually(t, 10*time.Second, "nginx listening on "+diffNginxAddr, func() error {
		select {
		case <-exited:
			return errors.New("nginx exited: " + output.String())
		default:
		}
		c, err := dialIn(context.Background(), ns, "tcp", diffNginxAddr)
		if err != nil {
			return err
		}
		return c.Close()
	})
	return proxyUnderTest{stop: func(t *testing.T) {
		// SIGTERM is nginx's fast shutdown: the master stops its workers,
		// which close their upstream keep-alive connections.
		cmd.Process.Signal(syscall.SIGTERM)
		testutil.Eventually(t, 20*time.Second, "nginx exits", func() error {
			select {
			case <-exited:
				return nil
			default:
				return errors.New("still running")
			}
		})
	}}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// runMinikit runs minikit's proxy in this process, listening and dialling
// inside ns.
func runMinikit(t *testing.T, ns string, cfg *config.Config) proxyUnderTest {
	t.Helper()
	p, err := httpproxy.New(httpproxy.Config{
		Logger:              testutil.Logger(t),
		ClientHeaderTimeout: diffIdle,
		ClientBodyTimeout:   diffIdle,
		DialUpstream: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialIn(ctx, ns, network, addr)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	p.Update(cfg)
	ln := listenIn(t, ns, diffMinikitAddr)
	go p.Serve(ln)
	stopped := false
	stop := func(t *testing.T) {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			t.Errorf("shutting minikit's proxy down: %v", err)
		}
	}
	t.Cleanup(func() { stop(t) })
	return proxyUnderTest{stop: stop}
}

// runCorpus sends every case on its own connection to addr, all at once, and
// returns what came back (fwd is filled in by attribute).
func runCorpus(t *testing.T, ns, addr string, corpus []diffCase) []diffOutcome {
	t.Helper()
	out := make([]diffOutcome, len(corpus))
	var wg sync.WaitGroup
	for i, c := range corpus {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = sendCase(ns, addr, prefix(i), c)
		}()
	}
	wg.Wait()
	return out
}

// sendCase writes the case's bytes and reads until the proxy closes the
// connection (it does, at the latest diffIdle after the last byte).
func sendCase(ns, addr, p string, c diffCase) diffOutcome {
	conn, err := dialIn(context.Background(), ns, "tcp", addr)
	if err != nil {
		return diffOutcome{end: "dial: " + err.Error()}
	}
	defer conn.Close()
	// A reader runs from the start: a proxy that answers and closes while the
	// client is still writing resets the connection, and what it answered is
	// lost unless already read.
	var (
		mu   sync.Mutex
		got  []byte
		end  string
		more = make(chan struct{}, 1)
		done = make(chan struct{})
	)
	conn.SetReadDeadline(time.Now().Add(10 * diffIdle))
	go func() {
		defer close(done)
		buf := make([]byte, 32<<10)
		for {
			n, err := conn.Read(buf)
			mu.Lock()
			got = append(got, buf[:n]...)
			mu.Unlock()
			select {
			case more <- struct{}{}:
			default:
			}
			if err != nil {
				var ne net.Error
				switch {
				case err == io.EOF:
					end = "eof"
				case errors.Is(err, syscall.ECONNRESET):
					end = "reset"
				case errors.As(err, &ne) && ne.Timeout():
					end = "timeout"
				default:
					end = err.Error()
				}
				return
			}
		}
	}()
	for k, part := range c.parts {
		if k > 0 {
			// Wait for the interim answer (or the end) before the next part.
			for waiting := true; waiting; {
				select {
				case <-more:
					mu.Lock()
					waiting = !bytes.Contains(got, []byte(" 100 Continue\r\n\r\n"))
					mu.Unlock()
				case <-done:
					waiting = false
				}
			}
		}
		if _, err := io.WriteString(conn, strings.ReplaceAll(part, "{P}", p)); err != nil {
			break
		}
	}
	<-done
	o := diffOutcome{end: end}
	o.statuses, o.junk = parseAnswers(got)
	return o
}

// parseAnswers splits what a proxy wrote to the client into answers.
func parseAnswers(b []byte) (statuses []int, junk string) {
	br := bufio.NewReader(bytes.NewReader(b))
	for {
		if _, err := br.Peek(1); err != nil {
			return statuses, ""
		}
		rest, _ := br.Peek(br.Buffered())
		status, framing, n, err := readAnswerHead(br)
		if err != nil {
			return statuses, string(rest)
		}
		statuses = append(statuses, status)
		switch {
		case status < 200 || status == 204 || status == 304:
		case framing == "chunked":
			if _, err := readChunkedBody(br); err != nil {
				return statuses, "truncated chunked body"
			}
		case framing == "length":
			if _, err := io.CopyN(io.Discard, br, n); err != nil {
				return statuses, "truncated body"
			}
		default:
			io.Copy(io.Discard, br)
		}
	}
}

// readAnswerHead reads a response head: its status and body framing.
func readAnswerHead(br *bufio.Reader) (status int, framing string, length int64, err error) {
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.") || len(line) < 12 {
		return 0, "", 0, fmt.Errorf("not a status line: %q", line)
	}
	if status, err = strconv.Atoi(line[9:12]); err != nil {
		return 0, "", 0, err
	}
	for {
		h, err := br.ReadString('\n')
		if err != nil {
			return 0, "", 0, err
		}
		h = strings.TrimRight(h, "\r\n")
		if h == "" {
			return status, framing, length, nil
		}
		name, value, _ := strings.Cut(h, ":")
		value = strings.TrimSpace(value)
		switch strings.ToLower(name) {
		case "content-length":
			framing = "length"
			if length, err = strconv.ParseInt(value, 10, 64); err != nil {
				return 0, "", 0, err
			}
		case "transfer-encoding":
			framing = "chunked"
		}
	}
}

// readChunkedBody decodes a chunked body strictly (CRLF line ends, hex sizes,
// extensions ignored, trailers dropped).
func readChunkedBody(br lineReader) ([]byte, error) {
	var body []byte
	for {
		line, err := br.ReadString('\n')
		if err != nil || !strings.HasSuffix(line, "\r\n") {
			return nil, fmt.Errorf("chunk size line %q", line)
		}
		size, _, _ := strings.Cut(strings.TrimSuffix(line, "\r\n"), ";")
		n, err := strconv.ParseInt(size, 16, 64)
		if err != nil || n < 0 || size == "" || size[0] == '+' {
			return nil, fmt.Errorf("chunk size %q", size)
		}
		if n == 0 {
			for {
				l, err := br.ReadString('\n')
				if err != nil {
					return nil, err
				}
				if l == "\r\n" {
					return body, nil
				}
			}
		}
		chunk := make([]byte, n+2)
		if _, err := io.ReadFull(br, chunk); err != nil || string(chunk[n:]) != "\r\n" {
			return nil, errors.New("chunk data")
		}
		body = append(body, chunk[:n]...)
	}
}

// recorder is the backend: it parses what the proxies send strictly, records
// every request it finds (with the raw bytes of anything it cannot parse,
// which would be a request smuggled in an unframed form) and answers 200.
type recorder struct {
	ln   net.Listener
	mu   sync.Mutex
	recs []backendRecord
	open int
}

type backendRecord struct {
	req     string // fwd(method, target, body), "ABORTED <request line>" or "GARBAGE <bytes>"
	raw     string
	aborted bool
}

func startRecorder(t *testing.T, ns string) *recorder {
	t.Helper()
	r := &recorder{ln: listenIn(t, ns, diffBackendAddr)}
	t.Cleanup(func() { r.ln.Close() })
	go func() {
		for {
			c, err := r.ln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			r.open++
			r.mu.Unlock()
			go r.serve(c)
		}
	}()
	return r
}

func (r *recorder) add(rec backendRecord) {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
}

func (r *recorder) serve(c net.Conn) {
	defer func() {
		c.Close()
		r.mu.Lock()
		r.open--
		r.mu.Unlock()
	}()
	tr := &tapReader{br: bufio.NewReader(c)}
	for {
		tr.got.Reset()
		method, target, body, closeAfter, err := readBackendRequest(tr)
		if err != nil {
			rest, _ := tr.br.Peek(tr.br.Buffered())
			raw := tr.got.String() + string(rest)
			switch {
			case raw == "":
			case tr.eof:
				// The proxy closed the connection inside a request: it
				// aborted a request it was streaming.
				first, _, _ := strings.Cut(raw, "\r\n")
				r.add(backendRecord{req: "ABORTED " + first, raw: raw, aborted: true})
			default:
				r.add(backendRecord{req: "GARBAGE " + strconv.Quote(trunc(raw, 200)), raw: raw})
			}
			return
		}
		req := fwd(method, target, string(body))
		r.add(backendRecord{req: req, raw: tr.got.String()})
		answer := "seen " + req
		if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", len(answer), answer); err != nil || closeAfter {
			return
		}
	}
}

// tapReader keeps the bytes of the request being read, and whether the
// connection ended.
type tapReader struct {
	br  *bufio.Reader
	got bytes.Buffer
	eof bool
}

func (tr *tapReader) ReadString(delim byte) (string, error) {
	s, err := tr.br.ReadString(delim)
	tr.got.WriteString(s)
	tr.eof = tr.eof || err == io.EOF
	return s, err
}

func (tr *tapReader) Read(p []byte) (int, error) {
	n, err := tr.br.Read(p)
	tr.got.Write(p[:n])
	tr.eof = tr.eof || err == io.EOF
	return n, err
}

// lineReader is what the strict parsers read from.
type lineReader interface {
	io.Reader
	ReadString(delim byte) (string, error)
}

// readBackendRequest reads one request as the proxies must send it: CRLF
// lines, one Content-Length or Transfer-Encoding: chunked.
func readBackendRequest(br lineReader) (method, target string, body []byte, closeAfter bool, err error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return
	}
	parts := strings.Split(strings.TrimSuffix(line, "\r\n"), " ")
	if !strings.HasSuffix(line, "\r\n") || len(parts) != 3 || parts[2] != "HTTP/1.1" {
		return "", "", nil, false, fmt.Errorf("request line %q", line)
	}
	method, target = parts[0], parts[1]
	cl, te := "", ""
	ncl, nte := 0, 0
	for {
		h, herr := br.ReadString('\n')
		if herr != nil || !strings.HasSuffix(h, "\r\n") {
			return "", "", nil, false, fmt.Errorf("header line %q", h)
		}
		if h == "\r\n" {
			break
		}
		name, value, ok := strings.Cut(strings.TrimSuffix(h, "\r\n"), ":")
		if !ok || strings.ContainsAny(name, " \t") {
			return "", "", nil, false, fmt.Errorf("header line %q", h)
		}
		value = strings.TrimSpace(value)
		switch strings.ToLower(name) {
		case "content-length":
			cl, ncl = value, ncl+1
		case "transfer-encoding":
			te, nte = value, nte+1
		case "connection":
			closeAfter = strings.EqualFold(value, "close")
		}
	}
	switch {
	case ncl > 1 || nte > 1 || (ncl > 0 && nte > 0):
		err = errors.New("ambiguous framing")
	case nte == 1 && strings.EqualFold(te, "chunked"):
		body, err = readChunkedBody(br)
	case nte == 1:
		err = fmt.Errorf("transfer coding %q", te)
	case ncl == 1:
		n, perr := strconv.ParseUint(cl, 10, 32)
		if perr != nil {
			return "", "", nil, false, perr
		}
		body = make([]byte, n)
		_, err = io.ReadFull(br, body)
	}
	return
}

// drain waits until the proxy that was stopped has closed every connection to
// the recorder (so everything it sent was read), and returns and forgets the
// records.
func (r *recorder) drain(t *testing.T) []backendRecord {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, "the proxy's upstream connections closed", func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.open > 0 {
			return fmt.Errorf("%d open", r.open)
		}
		return nil
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	recs := r.recs
	r.recs = nil
	return recs
}

var casePrefix = regexp.MustCompile(`/c(\d{2,3})(/|[^0-9]|$)`)

// attribute gives each backend record to the case whose prefix it carries;
// a record without one fails the test.
func attribute(t *testing.T, side string, recs []backendRecord, out []diffOutcome) {
	t.Helper()
	for _, rec := range recs {
		m := casePrefix.FindStringSubmatch(rec.req)
		if m == nil {
			m = casePrefix.FindStringSubmatch(rec.raw)
		}
		if m == nil {
			t.Errorf("%s delivered a request to the backend that belongs to no case: %q", side, trunc(rec.raw, 500))
			continue
		}
		i, _ := strconv.Atoi(m[1])
		if i < 1 || i > len(out) {
			t.Errorf("%s delivered a request for case %d of %d: %q", side, i, len(out), trunc(rec.raw, 500))
			continue
		}
		if rec.aborted {
			out[i-1].aborted++
			continue
		}
		out[i-1].fwd = append(out[i-1].fwd, rec.req)
	}
}
