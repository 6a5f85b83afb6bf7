package httpproxy

import (
	"errors"
	"net"
	"os"
	"strconv"
	"syscall"
)

// statusLine is nginx's reason phrase for the statuses the controller answers
// itself (nginx's ngx_http_status_lines), so the pages read as nginx's do.
func statusLine(code int) string {
	switch code {
	case 308:
		return "308 Permanent Redirect"
	case 400:
		return "400 Bad Request"
	case 404:
		return "404 Not Found"
	case 408:
		return "408 Request Time-out"
	case 413:
		return "413 Request Entity Too Large"
	case 414:
		return "414 Request-URI Too Large"
	case 431:
		// nginx answers oversized headers with this 400 page.
		return "400 Request Header Or Cookie Too Large"
	case 500:
		return "500 Internal Server Error"
	case 501:
		return "501 Not Implemented"
	case 502:
		return "502 Bad Gateway"
	case 503:
		return "503 Service Temporarily Unavailable"
	case 504:
		return "504 Gateway Time-out"
	case 505:
		return "505 HTTP Version Not Supported"
	}
	return strconv.Itoa(code) + " Error"
}

// errorPage is nginx's built-in error page for a status.
func errorPage(code int) string {
	s := statusLine(code)
	return "<html>\r\n<head><title>" + s + "</title></head>\r\n<body>\r\n<center><h1>" + s +
		"</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
}

// pages are the rendered responses (head without Connection, then body), built
// once.
var pages = func() map[int][]byte {
	m := map[int][]byte{}
	for _, code := range []int{400, 404, 408, 413, 414, 431, 500, 501, 502, 503, 504, 505} {
		body := errorPage(code)
		line := statusLine(code)
		if code == 431 {
			line = "400 Bad Request"
		}
		m[code] = []byte("HTTP/1.1 " + line + "\r\nContent-Type: text/html\r\nContent-Length: " +
			strconv.Itoa(len(body)) + "\r\n")
		m[-code] = []byte(body)
	}
	return m
}()

// upstreamError is a failure talking to an upstream, mapped to 502 or 504.
type upstreamError struct {
	op   string // "connecting to", "sending to", "reading from"
	addr string
	err  error
}

func (e *upstreamError) Error() string { return e.op + " upstream " + e.addr + ": " + e.err.Error() }
func (e *upstreamError) Unwrap() error { return e.err }

// status is the answer nginx gives for this failure: 504 on a timeout, else 502.
func (e *upstreamError) status() int {
	if isTimeout(e.err) {
		return 504
	}
	return 502
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// clientError is a bad request from the client: answered with status and the
// connection closed.
type clientError struct {
	status int
	msg    string
}

func (e *clientError) Error() string { return e.msg }

func badRequest(msg string) error { return &clientError{status: 400, msg: msg} }

var errTooManyFiles = syscall.EMFILE
