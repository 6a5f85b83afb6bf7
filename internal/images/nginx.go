package images

import (
	"context"
	"fmt"
	"html"
	"net"
	"net/http"
	"strings"
	"time"
)

// nginx's $time_local.
const nginxTimeLocal = "02/Jan/2006:15:04:05 -0700"

// The stock page of the nginx image (/usr/share/nginx/html/index.html), plus one
// line naming the pod so load-balancing demos show which replica answered.
const nginxWelcomePage = `<!DOCTYPE html>
<html>
<head>
<title>Welcome to nginx!</title>
<style>
html { color-scheme: light dark; }
body { width: 35em; margin: 0 auto;
font-family: Tahoma, Verdana, Arial, sans-serif; }
</style>
</head>
<body>
<h1>Welcome to nginx!</h1>
<p>If you see this page, the nginx web server is successfully installed and
working. Further configuration is required.</p>

<p>For online documentation and support please refer to
<a href="http://nginx.org/">nginx.org</a>.<br/>
Commercial support is available at
<a href="http://nginx.com/">nginx.com</a>.</p>

<p><em>Thank you for using nginx.</em></p>
<p>Served by pod %s</p>
</body>
</html>
`

// nginxErrorPage is nginx's built-in error page with server_tokens off.
func nginxErrorPage(status string) string {
	return "<html>\r\n<head><title>" + status + "</title></head>\r\n<body>\r\n" +
		"<center><h1>" + status + "</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"
}

func nginxError(w http.ResponseWriter, code int, status string) {
	w.Header().Set("Content-Type", "text/html")
	w.WriteHeader(code)
	fmt.Fprint(w, nginxErrorPage(status))
}

// nginxStart is what the nginx images' entrypoint prints before nginx starts.
func nginxStart(c *container) {
	fmt.Fprintln(c.stdout, "/docker-entrypoint.sh: Configuration complete; ready for start up")
}

// nginxWelcome is the nginx image's default site: the welcome page at / and
// /index.html, 404 elsewhere. Its command-line arguments (`nginx -g 'daemon off;'`)
// are accepted and ignored. MINIKIT_PORT overrides the port, for tests.
func nginxWelcome(defaultPort int) func(context.Context, *container, []string) error {
	return func(ctx context.Context, c *container, _ []string) error {
		port, err := c.envPort("MINIKIT_PORT", defaultPort)
		if err != nil {
			return err
		}
		hostname, err := c.hostname()
		if err != nil {
			return fmt.Errorf("reading hostname: %w", err)
		}
		page := fmt.Sprintf(nginxWelcomePage, html.EscapeString(c.podName(hostname)))
		ln, err := c.listenTCP(c.listenHost, port)
		if err != nil {
			return err
		}
		nginxStart(c)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			found := r.URL.Path == "/" || r.URL.Path == "/index.html"
			switch {
			case !staticMethod(r.Method) || (found && r.Method == http.MethodPost):
				nginxError(w, http.StatusMethodNotAllowed, "405 Not Allowed")
			case !found:
				nginxError(w, http.StatusNotFound, "404 Not Found")
			default:
				w.Header().Set("Content-Type", "text/html")
				w.Header().Set("Accept-Ranges", "bytes")
				fmt.Fprint(w, page)
			}
		})
		return c.serve(ctx, c.httpServer(ln, c.nginxLog(h)))
	}
}

// staticMethod reports whether nginx's static module gets past its method check:
// it refuses everything but GET, HEAD and POST, and POST only once a file is found.
func staticMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodPost
}

// helloSite is one flavour of nginxdemos/hello.
type helloSite struct {
	port     int
	plain    bool // the plain-text tag
	clientIP bool // the root image's page shows the client's address; the non-root one does not
}

// nginxHello is nginxdemos/hello and nginxdemos/nginx-hello: a page (or, for the
// plain-text tag, five text lines) naming the server's address and hostname, the
// URI, the date and a request ID. MINIKIT_PORT overrides the port, for tests.
func nginxHello(site helloSite) func(context.Context, *container, []string) error {
	return func(ctx context.Context, c *container, _ []string) error {
		port, err := c.envPort("MINIKIT_PORT", site.port)
		if err != nil {
			return err
		}
		hostname, err := c.hostname()
		if err != nil {
			return fmt.Errorf("reading hostname: %w", err)
		}
		ln, err := c.listenTCP(c.listenHost, port)
		if err != nil {
			return err
		}
		nginxStart(c)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			now := c.now()
			// expires -1
			w.Header().Set("Expires", now.Add(-time.Second).UTC().Format(http.TimeFormat))
			w.Header().Set("Cache-Control", "no-cache")
			v := helloValues{
				serverAddr: nginxServerAddr(r),
				hostname:   hostname,
				date:       now.Format(nginxTimeLocal),
				uri:        r.RequestURI,
				requestID:  c.requestID(),
				remoteAddr: r.RemoteAddr,
			}
			if site.plain {
				// `return 200 '...'` answers every method.
				w.Header().Set("Content-Type", "text/plain")
				fmt.Fprint(w, v.text())
				return
			}
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				nginxError(w, http.StatusMethodNotAllowed, "405 Not Allowed")
				return
			}
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, v.html(site.clientIP))
		})
		return c.serve(ctx, c.httpServer(ln, c.nginxLog(h)))
	}
}

type helloValues struct {
	serverAddr, hostname, date, uri, requestID, remoteAddr string
}

func (v helloValues) text() string {
	return "Server address: " + v.serverAddr + "\n" +
		"Server name: " + v.hostname + "\n" +
		"Date: " + v.date + "\n" +
		"URI: " + v.uri + "\n" +
		"Request ID: " + v.requestID + "\n"
}

// html is a plain rendering of the nginxdemos page: the same rows, without its
// logo and styling.
func (v helloValues) html(clientIP bool) string {
	var b strings.Builder
	row := func(class, label, value string) {
		fmt.Fprintf(&b, "<p%s><span>%s:</span> <span>%s</span></p>\n", class, label, html.EscapeString(value))
	}
	b.WriteString("<!DOCTYPE html>\n<html>\n<head>\n<title>Hello World</title>\n</head>\n<body>\n<div class=\"info\">\n")
	row("", "Server&nbsp;name", v.hostname)
	row("", "Server&nbsp;address", v.serverAddr)
	row(` class="smaller"`, "URI", v.uri)
	row(` class="smaller"`, "Date", v.date)
	if clientIP {
		row(` class="smaller"`, "Client&nbsp;IP", v.remoteAddr)
	}
	fmt.Fprintf(&b, "</div>\n<div id=\"footer\">Request ID: %s</div>\n</body>\n</html>\n", v.requestID)
	return b.String()
}

// nginxServerAddr is $server_addr:$server_port, the local end of the connection;
// nginx writes IPv6 addresses without brackets.
func nginxServerAddr(r *http.Request) string {
	addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return ""
	}
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	return host + ":" + port
}

// nginxLog sets nginx's Server header (server_tokens off) and writes nginx's
// access log, in the image's "main" format, to stdout (where the nginx image links
// /var/log/nginx/access.log).
func (c *container) nginxLog(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server", "nginx")
		rec := &recorder{ResponseWriter: w, status: http.StatusOK, head: r.Method == http.MethodHead}
		h.ServeHTTP(rec, r)
		remote, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			remote = r.RemoteAddr
		}
		fmt.Fprintf(c.stdout, "%s - - [%s] \"%s %s %s\" %d %d \"%s\" \"%s\" \"%s\"\n",
			remote, c.now().Format(nginxTimeLocal), r.Method, r.RequestURI, r.Proto, rec.status, rec.bytes,
			dash(r.Referer()), dash(r.UserAgent()), dash(r.Header.Get("X-Forwarded-For")))
	})
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// recorder remembers the status and body size a handler wrote.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int
	head   bool // HEAD responses send no body
}

func (r *recorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	n, err := r.ResponseWriter.Write(p)
	if !r.head {
		r.bytes += n
	}
	return n, err
}
