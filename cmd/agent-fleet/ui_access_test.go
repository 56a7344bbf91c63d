//go:build linux

package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// otherUser runs curl with args as the user nobody (uid 65534), the way
// another local user would reach the dashboard; it needs root (to become
// nobody), setpriv and curl. ok is false when the test cannot do that.
func otherUser(t *testing.T, args ...string) (out []byte, code int, ok bool) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Log("not root: cannot act as another user; the socket's modes are checked instead")
		return nil, 0, false
	}
	curl, err := exec.LookPath("curl")
	if err != nil && os.Getenv("AGENT_FLEET_CI") == "1" {
		t.Fatal("curl is not installed; .ci/run installs it")
	}
	if err != nil {
		t.Skip("curl not installed")
	}
	cmd := exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", curl, "-sS", "-o", "/dev/null", "-w", "%{http_code}"}, args...)...)
	out, err = cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return out, ee.ExitCode(), true
	case err != nil:
		t.Fatalf("setpriv: %v", err)
	}
	return out, 0, true
}

// request makes one request to the dashboard with the given headers.
func request(t *testing.T, method, url string, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(`{"action":"stop","id":"nobody"}`))
	require.NoError(t, err)
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp
}

// Only the person who started the dashboard gets in: without the token
// (another local user cannot know it) a request is refused, a page served
// under another name (DNS rebinding) is refused even with it, a change
// must come from the dashboard's own origin, and on a Unix socket other
// users cannot even connect.
func TestUIRefusesOthers(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	t.Cleanup(func() { stopBroker(t, dir) })
	srv := startUI(t, dir)
	port := strings.TrimPrefix(srv.Base, "http://127.0.0.1:")
	bearer := map[string]string{"Authorization": "Bearer " + srv.Token}

	require.Equal(t, http.StatusUnauthorized, request(t, "GET", srv.Base+"/", nil).StatusCode)
	require.Equal(t, http.StatusUnauthorized, request(t, "GET", srv.Base+"/api/state", map[string]string{"Authorization": "Bearer " + strings.Repeat("0", 64)}).StatusCode)
	require.Equal(t, http.StatusUnauthorized, request(t, "GET", srv.Base+"/?token=wrong", nil).StatusCode)
	require.Equal(t, http.StatusUnauthorized, request(t, "GET", srv.Base+"/api/state", map[string]string{"Cookie": "agent-fleet-ui-" + port + "=" + wrongLast(srv.Token)}).StatusCode)
	require.Equal(t, http.StatusOK, request(t, "GET", srv.Base+"/api/state", bearer).StatusCode)

	// The token in the URL once: it becomes the cookie and leaves the URL.
	resp := request(t, "GET", srv.URL, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/", resp.Header.Get("Location"))
	cookie := resp.Header.Get("Set-Cookie")
	for _, want := range []string{"agent-fleet-ui-" + port + "=" + srv.Token, "HttpOnly", "SameSite=Strict", "Path=/"} {
		require.Contains(t, cookie, want)
	}
	require.Equal(t, http.StatusOK, request(t, "GET", srv.Base+"/api/state", map[string]string{"Cookie": "agent-fleet-ui-" + port + "=" + srv.Token}).StatusCode)

	// Another name for this address, or another port: refused before the token is looked at.
	for _, host := range []string{"evil.example:" + port, "evil.example", "127.0.0.1:1", "localhost.evil.example:" + port} {
		require.Equal(t, http.StatusForbidden, request(t, "GET", srv.Base+"/api/state", map[string]string{"Authorization": bearer["Authorization"], "Host": host}).StatusCode, host)
	}
	require.Equal(t, http.StatusOK, request(t, "GET", srv.Base+"/api/state", map[string]string{"Authorization": bearer["Authorization"], "Host": "localhost:" + port}).StatusCode)
	// A change from another site's page is refused, even with the cookie.
	require.Equal(t, http.StatusForbidden, request(t, "POST", srv.Base+"/api/action", map[string]string{"Authorization": bearer["Authorization"], "Origin": "http://evil.example"}).StatusCode)
	require.Equal(t, http.StatusForbidden, request(t, "POST", srv.Base+"/api/action", map[string]string{"Authorization": bearer["Authorization"], "Sec-Fetch-Site": "cross-site"}).StatusCode)

	// Another local user, without the token, is refused.
	if out, code, ok := otherUser(t, srv.Base+"/api/state"); ok {
		require.Zero(t, code, "%s", out)
		require.Equal(t, "401", string(out))
	}

	// On ::1 the URL it prints is on ::1 too, and works.
	six := startUI(t, dir, "--listen", "[::1]:0")
	require.True(t, strings.HasPrefix(six.URL, "http://[::1]:"), six.URL)
	require.Equal(t, http.StatusSeeOther, request(t, "GET", six.URL, nil).StatusCode)

	// On a Unix socket: 0600 in a 0700 directory, and nobody else connects.
	sockDir := filepath.Join(shortDir(t), "ui")
	sock := filepath.Join(sockDir, "ui.sock")
	ssrv := startUI(t, dir, "--socket", sock)
	require.True(t, strings.HasPrefix(ssrv.URL, "http://localhost/?token="), ssrv.URL)
	fi, err := os.Stat(sock)
	require.NoError(t, err)
	require.Equal(t, os.ModeSocket|0o600, fi.Mode()&(os.ModeSocket|os.ModePerm))
	di, err := os.Stat(sockDir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), di.Mode().Perm())
	client := &http.Client{Transport: &http.Transport{DialContext: func(_ context.Context, _, _ string) (net.Conn, error) {
		return net.Dial("unix", sock)
	}}}
	for token, want := range map[string]int{"": http.StatusUnauthorized, ssrv.Token: http.StatusOK} {
		req, _ := http.NewRequest("GET", "http://localhost/api/state", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode)
	}
	if out, code, ok := otherUser(t, "--unix-socket", sock, "-H", "Authorization: Bearer "+ssrv.Token, "http://localhost/api/state"); ok {
		require.Equal(t, 7, code, "curl cannot connect as another user: %s", out) // 7: failed to connect
	}

	// Where others could reach it, it does not serve at all.
	open := shortDir(t)
	require.NoError(t, os.Chmod(open, 0o755))
	out, err := as(t, dir, "operator-test", "ui", "--no-open", "--socket", filepath.Join(open, "ui.sock")).CombinedOutput()
	requireExit(t, err, exitUsage)
	require.Contains(t, string(out), "open to other users")
	out, err = as(t, dir, "operator-test", "ui", "--no-open", "--listen", "0.0.0.0:0").CombinedOutput()
	requireExit(t, err, exitUsage)
	require.Contains(t, string(out), "loopback only")
}

// wrongLast is token with its last character changed: a token one
// character off, whatever its last character was.
func wrongLast(token string) string {
	last := byte('0')
	if token[len(token)-1] == last {
		last = '1'
	}
	return token[:len(token)-1] + string(last)
}
