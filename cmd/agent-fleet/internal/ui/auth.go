package ui

import (
	"crypto/subtle"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// The dashboard is guarded by a random token made per run (32 bytes, hex),
// printed once in its URL. The first request that carries it in the query
// gets it back as an HttpOnly, SameSite=Strict cookie and is sent on to
// the same address without it; every other request must carry the cookie
// (or "Authorization: Bearer <token>", for scripts). Tokens are compared
// in constant time. Before that, the Host header must name this server
// on the loopback, so a web page whose name was rebound to 127.0.0.1 (DNS
// rebinding) is refused even before the token is looked at; and a request
// that changes something must come from the dashboard's own origin.

// hostCheck is which Host headers name this server.
type hostCheck struct {
	port   int    // TCP: the port served
	ip     string // TCP: the loopback address served (127.0.0.2 is one too)
	socket bool   // Unix socket: any loopback name (the forwarder's port is not known)
}

func (h hostCheck) ok(hostHeader string) bool {
	host, port, err := net.SplitHostPort(hostHeader)
	if err != nil {
		host, port = hostHeader, ""
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host != "localhost" && host != "127.0.0.1" && host != "::1" && (h.ip == "" || host != h.ip) {
		return false
	}
	if h.socket {
		return true
	}
	return port == strconv.Itoa(h.port)
}

// guard applies the Host check and the token to every request.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.host.ok(r.Host) {
			http.Error(w, "agent-fleet ui: this server answers only to its loopback address (Host "+strconv.Quote(r.Host)+" refused)", http.StatusForbidden)
			return
		}
		if q := r.URL.Query().Get("token"); q != "" {
			if !s.tokenOK(q) {
				http.Error(w, "agent-fleet ui: wrong token: open the URL agent-fleet ui printed", http.StatusUnauthorized)
				return
			}
			http.SetCookie(w, &http.Cookie{Name: s.cookie, Value: s.token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
			rest := r.URL.Query()
			rest.Del("token")
			to := url.URL{Path: r.URL.Path, RawQuery: rest.Encode()}
			http.Redirect(w, r, to.String(), http.StatusSeeOther)
			return
		}
		if !s.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="agent-fleet ui"`)
			http.Error(w, "agent-fleet ui: this dashboard needs the token: open the URL agent-fleet ui printed", http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !s.sameOrigin(r) {
			http.Error(w, "agent-fleet ui: a change must come from the dashboard's own page", http.StatusForbidden)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
		w.Header().Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

func (s *Server) tokenOK(t string) bool {
	return subtle.ConstantTimeCompare([]byte(t), []byte(s.token)) == 1
}

func (s *Server) authorized(r *http.Request) bool {
	if c, err := r.Cookie(s.cookie); err == nil && s.tokenOK(c.Value) {
		return true
	}
	if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && s.tokenOK(b) {
		return true
	}
	return false
}

// sameOrigin: a browser names the page a request comes from (Origin, or
// Sec-Fetch-Site); one that names another site is refused. A client that
// names none (curl with the bearer token) is not a browser page.
func (s *Server) sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		return err == nil && u.Host == r.Host
	}
	return true
}
