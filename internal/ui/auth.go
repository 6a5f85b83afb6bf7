package ui

import (
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// tokenCookie holds the token a ?token= request gave, so the page's own
// requests (EventSource cannot send headers) carry it.
const tokenCookie = "minikit-ui-token"

// loopbackListen says the listen address is a loopback one (127.0.0.0/8,
// ::1, localhost). An empty host (":8080") listens everywhere: not loopback.
func loopbackListen(listen string) (bool, error) {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false, fmt.Errorf("ui: --listen %q: want HOST:PORT: %w", listen, err)
	}
	if host == "localhost" {
		return true, nil
	}
	if host == "" {
		return false, nil // every address
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false, fmt.Errorf("ui: --listen %q: the host must be an IP address or localhost", listen)
	}
	return a.IsLoopback(), nil
}

type guardConfig struct {
	token          string
	loopbackListen bool
	listen         string
	log            *slog.Logger
}

// guard lets through only GET and HEAD, only same-site requests, and off
// loopback only requests with the token. Loopback means both: the server
// listens on loopback, and this request's peer is loopback; a server that
// listens elsewhere asks every request for the token, since a loopback peer
// may still be a proxy for anyone.
func guard(next http.Handler, c guardConfig) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "minikit ui is read-only: only GET and HEAD are served", http.StatusMethodNotAllowed)
			return
		}
		if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" {
			http.Error(w, "minikit ui: cross-site requests are refused", http.StatusForbidden)
			return
		}
		if c.loopbackListen && loopbackPeer(r) {
			// A page on loopback is still reachable from any web page in
			// the user's browser through DNS rebinding (a name that
			// resolves to 127.0.0.1): such requests carry that name as
			// their Host, which must be a loopback address or localhost.
			if !loopbackHost(r.Host) {
				http.Error(w, fmt.Sprintf("minikit ui: Host %q is not a loopback address; open the page as http://%s/", r.Host, c.listen), http.StatusForbidden)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		tok, fromQuery := requestToken(r)
		if c.token == "" || tok == "" || subtle.ConstantTimeCompare([]byte(tok), []byte(c.token)) != 1 {
			c.log.Info("request refused: no valid token", "remote", r.RemoteAddr, "path", r.URL.Path)
			w.Header().Set("WWW-Authenticate", `Bearer realm="minikit ui"`)
			what := "without the lab's API token"
			if tok != "" {
				what = "with a token that is not the lab's API token"
			}
			http.Error(w, fmt.Sprintf("401 Unauthorized: minikit ui serves this lab off loopback only to requests carrying the lab's API token (the token in the lab's kubeconfig, users[].user.token); this request came %s. Send \"Authorization: Bearer TOKEN\", or open http://%s/?token=TOKEN once in the browser (it sets a cookie).", what, r.Host), http.StatusUnauthorized)
			return
		}
		if fromQuery {
			// Keep the token out of the address bar, history and logs
			// from now on: the cookie carries it.
			http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: tok, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
			q := r.URL.Query()
			q.Del("token")
			u := *r.URL
			u.RawQuery = q.Encode()
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// requestToken is the token of a request: its bearer token, its ?token=, or
// its cookie.
func requestToken(r *http.Request) (tok string, fromQuery bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		if t, ok := strings.CutPrefix(h, "Bearer "); ok {
			return strings.TrimSpace(t), false
		}
	}
	if t := r.URL.Query().Get("token"); t != "" {
		return t, true
	}
	if c, err := r.Cookie(tokenCookie); err == nil {
		return c.Value, false
	}
	return "", false
}

func loopbackPeer(r *http.Request) bool {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}
