//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// chromium is the headless browser the dashboard tests drive (Debian's
// package chromium, which .ci/run installs): under AGENT_FLEET_CI=1 a
// missing one fails the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("AGENT_FLEET_CI") == "1" {
		t.Fatal("chromium is not installed; .ci/run installs it")
	}
	t.Skip("chromium not installed (apt-get install chromium, or run .ci/run)")
	return ""
}

// uiServer is an `agent-fleet ui` process of the test.
type uiServer struct {
	URL, Base, Token string
	cmd              *exec.Cmd
}

// startUI starts `agent-fleet ui --no-open --json` as operator-test over
// the shared user manager, with extra arguments, and reads where it
// serves. It is stopped (SIGTERM, by its pid) at cleanup.
func startUI(t *testing.T, dir string, args ...string) *uiServer {
	t.Helper()
	cmd := as(t, dir, "operator-test", append([]string{"ui", "--no-open", "--json"}, args...)...)
	cmd.Env = append(cmd.Env, unitstest.Require(t).Env()...)
	cmd.Env = append(cmd.Env, "PATH="+os.Getenv("PATH"))
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("agent-fleet ui stderr:\n%s", stderr.String())
		}
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var where struct{ URL, Listen, Socket string }
	select {
	case l, ok := <-line:
		require.True(t, ok, "agent-fleet ui printed nothing; stderr:\n%s", stderr.String())
		require.NoError(t, json.Unmarshal([]byte(l), &where), "%s", l)
	case <-time.After(2 * time.Minute): // hang guard
		t.Fatalf("agent-fleet ui did not say where it serves; stderr:\n%s", stderr.String())
	}
	base, token, ok := strings.Cut(where.URL, "/?token=")
	require.True(t, ok, where.URL)
	return &uiServer{URL: where.URL, Base: base, Token: token, cmd: cmd}
}

// browser is a headless Chromium tab; on failure a screenshot of it is
// saved (under $AGENT_FLEET_TEST_ARTIFACTS, else a kept temporary
// directory) and its path logged.
func browser(t *testing.T) context.Context {
	t.Helper()
	exe := chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute) // hang guard
	t.Cleanup(cancel)
	actx, acancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1100), chromedp.Env("TZ=UTC"))...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	var console lockedBuffer
	require.NoError(t, chromedp.Listen(bctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			fmt.Fprintf(&console, "exception: %s", d.Text)
			if d.Exception != nil {
				fmt.Fprintf(&console, " %s", d.Exception.Description)
			}
			fmt.Fprintln(&console)
		case *runtime.EventConsoleAPICalled:
			fmt.Fprintf(&console, "console.%s:", ev.Type)
			for _, a := range ev.Args {
				fmt.Fprintf(&console, " %s%s", a.Value, a.Description)
			}
			fmt.Fprintln(&console)
		}
	}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the page's console:\n%s", console.String())
			saveScreenshot(t, bctx, t.Name())
		}
		bcancel()
	})
	return bctx
}

func saveScreenshot(t *testing.T, ctx context.Context, name string) {
	dir := os.Getenv("AGENT_FLEET_TEST_ARTIFACTS")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "agent-fleet-artifacts-"); err != nil {
			t.Logf("no screenshot: %v", err)
			return
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("no screenshot: %v", err)
		return
	}
	path := filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(name)+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Logf("no screenshot: %v", err)
		return
	}
	t.Logf("screenshot of the page: %s", path)
}

// waitFor waits until the page's JavaScript condition holds, re-checked
// at every DOM change (no timeout of its own: the browser's context is the
// hang guard).
func waitFor(t *testing.T, ctx context.Context, what, cond string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute) // hang guard, leaving the tab usable
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(0)))
	require.NoError(t, err, "waiting for %s", what)
}

func rowState(id, state string) string {
	return fmt.Sprintf(`!!document.querySelector('#fleet tr[data-worker=%q][data-state=%q]')`, id, state)
}

func textIncludes(sel, s string) string {
	return fmt.Sprintf(`(document.querySelector(%q)?.textContent || "").includes(%q)`, sel, s)
}

// scopeHex is what a team scope looks like (48 hex digits): no output may
// carry one.
var scopeHex = regexp.MustCompile(`[0-9a-f]{48}`)

// The dashboard in a real browser over a real user manager: refused
// without its token, let in with it (the token then leaves the URL); a
// worker spawned from the CLI appears without a reload, another changes
// state live when it exits; a stop from the page (after its confirmation)
// ends the first with its cgroup proven empty; and no scope is on the
// page or in its data.
func TestUIBrowser(t *testing.T) {
	t.Parallel()
	unitstest.Require(t)
	ctx := browser(t)
	dir := shortDir(t)
	t.Cleanup(func() {
		_, _ = fleetCLI(t, dir, "stop", "ui-w1", "ui-w2")
		stopBroker(t, dir)
	})
	out, err := as(t, dir, "operator-test", "teams", "create", "ui-crew").CombinedOutput()
	require.NoError(t, err, "%s", out)
	srv := startUI(t, dir)

	// Without the token: refused, in the browser and to a plain client.
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(srv.Base+"/"))
	require.NoError(t, err)
	require.EqualValues(t, http.StatusUnauthorized, resp.Status)
	body, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
	require.NoError(t, err)
	require.Contains(t, body, "needs the token")
	for _, path := range []string{"/api/state", "/api/events", "/app.js", "/api/log?id=ui-w1"} {
		r, err := http.Get(srv.Base + path)
		require.NoError(t, err)
		r.Body.Close()
		require.Equal(t, http.StatusUnauthorized, r.StatusCode, path)
	}

	// With it: in, and the token is gone from the address bar.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL)))
	waitFor(t, ctx, "the live stream", textIncludes("#live", "live"))
	loc, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	require.Equal(t, srv.Base+"/", loc, "the token leaves the URL once the cookie is set")
	waitFor(t, ctx, "the named team", `!!document.querySelector('#teams tr[data-team="ui-crew"]')`)
	require.NoError(t, chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`window.agentFleetMark = "same page"`)))

	// A worker spawned from the CLI appears, running, without a reload.
	spawned := time.Now()
	out, err = fleetCLI(t, dir, "spawn", "--id", "ui-w1", "--json", "--", "sh", "-c", "echo hello-from-ui-worker; exec sleep 600")
	require.NoError(t, err, "%s", out)
	returned := time.Now()
	waitFor(t, ctx, "ui-w1 running on the page", rowState("ui-w1", "running"))
	t.Logf("ui-w1 on the page %v after spawn began, %v after it returned", time.Since(spawned), time.Since(returned))
	var w1 output.Worker
	require.NoError(t, json.Unmarshal(out, &w1), "%s", out)
	require.NotEmpty(t, w1.ControlGroup)

	// Another changes state live: running, then exited when its command ends.
	gate := filepath.Join(dir, "go-w2")
	out, err = fleetCLI(t, dir, "spawn", "--id", "ui-w2", "--", "sh", "-c",
		fmt.Sprintf("echo waiting; while [ ! -e %s ]; do sleep 0.05; done; echo leaving; exit 3", gate))
	require.NoError(t, err, "%s", out)
	waitFor(t, ctx, "ui-w2 running on the page", rowState("ui-w2", "running"))
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	waitFor(t, ctx, "ui-w2 exited on the page", rowState("ui-w2", "exited"))
	waitFor(t, ctx, "the exit in its row", textIncludes(`#fleet tr[data-worker="ui-w2"] td.state`, "exit 3"))
	waitFor(t, ctx, "the change in the feed", textIncludes("#activity", "ui-w2: running → exited (exit 3)"))

	// A message between two other sessions reaches the feed through the
	// message history, with its receipts.
	out, err = as(t, dir, "ui-alice", "intercom", "send", "ui-w1", "hello-through-the-history").CombinedOutput()
	require.NoError(t, err, "%s", out)
	waitFor(t, ctx, "the message in the feed", textIncludes("#activity", "message ui-alice → ui-w1: hello-through-the-history"))
	waitFor(t, ctx, "its delivery in the feed", textIncludes("#activity", "delivered"))

	mark, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.agentFleetMark`))
	require.NoError(t, err)
	require.Equal(t, "same page", mark, "the page was not reloaded")

	if shot := os.Getenv("AGENT_FLEET_UI_SCREENSHOT"); shot != "" {
		waitFor(t, ctx, "a chart bar", `!!document.querySelector('#chart rect[data-state]')`)
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(shot, png, 0o644))
		t.Logf("screenshot for the README: %s", shot)
	}

	// No scope anywhere: not on the page, not in its data.
	html, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	require.NoError(t, err)
	req, _ := http.NewRequest("GET", srv.Base+"/api/state", nil)
	req.Header.Set("Authorization", "Bearer "+srv.Token)
	r, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	state, _ := io.ReadAll(r.Body)
	r.Body.Close()
	require.Equal(t, http.StatusOK, r.StatusCode)
	teamsFile, err := os.ReadFile(filepath.Join(dir, "intercom", "named-teams.json"))
	require.NoError(t, err)
	scopes := scopeHex.FindAllString(string(teamsFile), -1)
	require.NotEmpty(t, scopes, "the team has a scope: %s", teamsFile)
	for _, text := range []string{html, string(state)} {
		require.Empty(t, scopeHex.FindAllString(text, -1), "a 48-hex scope in the dashboard's output")
		for _, sc := range scopes {
			require.NotContains(t, text, sc)
		}
	}

	// The worker's page: its record and its log, followed.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#fleet tr[data-worker="ui-w1"] a`))))
	waitFor(t, ctx, "the worker page", textIncludes("#w-id", "ui-w1"))
	waitFor(t, ctx, "its log", textIncludes("#log", "hello-from-ui-worker"))
	waitFor(t, ctx, "its unit", textIncludes("#w-unit", w1.Unit))

	// Pause and resume it from the page, each after its confirmation.
	for _, step := range []struct{ action, confirm, state string }{
		{"pause", "Pause ui-w1", "paused"}, {"resume", "Resume ui-w1", "running"},
	} {
		require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#w-actions button[data-action="`+step.action+`"]`))))
		waitFor(t, ctx, "the "+step.action+" confirmation", `document.querySelector('#confirm').open && `+textIncludes("#confirm-text", step.confirm))
		require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#confirm-ok"))))
		waitFor(t, ctx, step.state+" on the page", `document.querySelector('#w-state').dataset.state === "`+step.state+`"`)
		out, err := fleetCLI(t, dir, "status", "ui-w1", "--json")
		require.NoError(t, err, "%s", out)
		var st output.Status
		require.NoError(t, json.Unmarshal(out, &st))
		require.Equal(t, step.state, st.Worker.State, "status after %s", step.action)
	}

	// Stop it from the page: a confirmation first, then the stop.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#w-actions button[data-action="stop"]`))))
	waitFor(t, ctx, "the confirmation", `document.querySelector('#confirm').open && `+textIncludes("#confirm-text", "Stop worker ui-w1"))
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#confirm-ok"))))
	// (The toast still says how the resume went until the stop begins.)
	waitFor(t, ctx, "the stop's outcome", `document.querySelector('#toast').dataset.done === "1" && !document.querySelector('#toast').textContent.startsWith("Resumed")`)
	toast, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#toast")))
	require.NoError(t, err)
	require.Contains(t, toast, "nothing of it is left in its cgroup")
	waitFor(t, ctx, "stopped on the page", `document.querySelector('#w-state').dataset.state === "stopped"`)
	waitFor(t, ctx, "the log's end", textIncludes("#log-end", "the worker ended: stopped"))

	// What the page said is what the kernel says: nothing is left.
	unitstest.RequireOnlyExitRecord(t, w1.ControlGroup)
	if w1.MainPID > 0 {
		unitstest.RequireEnded(t, w1.MainPID, "the worker's main process")
	}
	out, err = fleetCLI(t, dir, "status", "ui-w1", "--json")
	require.NoError(t, err, "%s", out)
	var st output.Status
	require.NoError(t, json.Unmarshal(out, &st))
	require.Equal(t, "stopped", st.Worker.State)
	require.Equal(t, "manager-requested", st.Worker.StopReason)
}
