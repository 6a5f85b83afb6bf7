package images

import (
	"context"
	"fmt"
	"net"
	"net/http"
)

// httpdPage is the Apache httpd image's htdocs/index.html.
const httpdPage = "<html><body><h1>It works!</h1></body></html>\n"

const httpdNotFound = `<!DOCTYPE HTML PUBLIC "-//IETF//DTD HTML 2.0//EN">
<html><head>
<title>404 Not Found</title>
</head><body>
<h1>Not Found</h1>
<p>The requested URL was not found on this server.</p>
</body></html>
`

// runHttpd is the httpd image (and the e2e suite's httpd): "It works!" at / and
// /index.html on port 80, Apache's 404 page elsewhere, and the access log in
// common log format on stdout. Its command-line arguments are accepted and
// ignored. MINIKIT_PORT overrides the port, for tests.
func runHttpd(ctx context.Context, c *container, _ []string) error {
	port, err := c.envPort("MINIKIT_PORT", 80)
	if err != nil {
		return err
	}
	ln, err := c.listenTCP(c.listenHost, port)
	if err != nil {
		return err
	}
	fmt.Fprintln(c.stderr, "[mpm_event:notice] AH00489: Apache/2.4 (Unix) configured -- resuming normal operations")
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server", "Apache/2.4 (Unix)")
		rec := &recorder{ResponseWriter: w, status: http.StatusOK, head: r.Method == http.MethodHead}
		if r.URL.Path == "/" || r.URL.Path == "/index.html" {
			rec.Header().Set("Content-Type", "text/html")
			fmt.Fprint(rec, httpdPage)
		} else {
			rec.Header().Set("Content-Type", "text/html; charset=iso-8859-1")
			rec.WriteHeader(http.StatusNotFound)
			fmt.Fprint(rec, httpdNotFound)
		}
		remote, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			remote = r.RemoteAddr
		}
		fmt.Fprintf(c.stdout, "%s - - [%s] \"%s %s %s\" %d %d\n",
			remote, c.now().Format(nginxTimeLocal), r.Method, r.RequestURI, r.Proto, rec.status, rec.bytes)
	})
	return c.serve(ctx, c.httpServer(ln, h))
}
