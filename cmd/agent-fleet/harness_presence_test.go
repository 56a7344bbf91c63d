//go:build linux

package main

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet/harness/modeltest"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// listed is the presence status of session id in the manager's
// `intercom list --json`, and its row of the text table ("" when absent).
func (w *harnessWorld) listed(id string) (status, row string) {
	w.t.Helper()
	var res intercom.ListResult
	require.NoError(w.t, json.Unmarshal([]byte(w.must("intercom", "list", "--json")), &res))
	for _, s := range res.Sessions {
		if s.ID == id {
			status = s.Status
		}
	}
	for _, line := range strings.Split(w.must("intercom", "list"), "\n") {
		if strings.HasPrefix(line, id+" ") {
			row = line
		}
	}
	return status, row
}

// presenceIs waits until the manager's intercom list shows session id with
// status, in the JSON and in the table's status column.
func (w *harnessWorld) presenceIs(id, status string) {
	w.t.Helper()
	var got, row string
	require.Eventually(w.t, func() bool {
		got, row = w.listed(id)
		return got == status && strings.Contains(row, "  "+status+"  ")
	}, 2*time.Minute, 50*time.Millisecond, "presence of %s: want %q", id, status)
}

// Real workers' presence, as their manager's intercom list shows it: a
// real Claude Code worker is "working · turn 1" while its task's turn runs
// (the scripted model holds its answer), "idle" once it answered, and
// "failed: turn 2: …" after a turn the model's error ended; a command
// worker is "working", with what it says of itself (set-summary) beside.
func TestPresenceOfRealWorkersInIntercomList(t *testing.T) {
	t.Parallel()
	claude := nodeTool(t, "claude")
	w := newHarnessWorld(t)
	w.real = map[string]string{"claude": claude}
	release := make(chan struct{})
	model := modeltest.Start(t,
		modeltest.Step{Name: "task", API: modeltest.Anthropic, Expect: modeltest.PromptContains("count the files"),
			Respond: func(*modeltest.Request) modeltest.Reply {
				<-release
				return modeltest.Reply{Text: "There are 42 files."}
			}},
		// Claude Code tries a refused request again, in more than one
		// way, before the turn fails.
		modeltest.Step{Name: "refused", Expect: modeltest.PromptContains("count them again"), Times: 20,
			Reply: modeltest.Reply{Error: &modeltest.Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: "unsupported parameter: fleet_test"}}},
	)
	model.AllowLeftover() // how many tries Claude Code makes is its business
	w.spawn("pres", "claude", append(envFlags(claudeEndpointEnv(t, model)), "--cwd", t.TempDir(), "--task", "count the files")...)
	w.presenceIs("pres", "working · turn 1")
	close(release)
	require.Equal(t, "There are 42 files.", w.message("pres", func(string) bool { return true }).Text)
	w.presenceIs("pres", "idle")
	w.must("intercom", "send", "pres", "count them again")
	w.message("pres", func(s string) bool { return strings.Contains(s, "turn 2 of worker pres (claude) failed") })
	status, _ := w.listed("pres")
	require.True(t, strings.HasPrefix(status, "failed: turn 2: "), status)
	require.Contains(t, status, "unsupported parameter: fleet_test")

	exe, err := os.Executable()
	require.NoError(t, err)
	w.must("spawn", "--id", "pres-cmd", "--env", "AF="+exe, // the test binary is agent-fleet in the unit
		"--", "sh", "-c", `"$AF" intercom set-summary "copying files" && exec sleep 300`)
	w.presenceIs("pres-cmd", "working · copying files")
}
