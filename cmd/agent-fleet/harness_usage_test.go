//go:build linux

package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
)

// A coding-agent worker's usage, budget and rate limits end to end: the
// real shim under systemd records what the stand-in Claude Code reports;
// status, list and usage show it; a spent budget keeps the next message
// until renew raises it; a rate limit pauses the worker and it resumes.
func TestHarnessWorkerUsageAndBudget(t *testing.T) {
	t.Parallel()
	w := newHarnessWorld(t)
	budget := 2 * standInTokens
	v := w.spawn("cb", "claude", "--task", "first", "--budget-tokens", strconv.Itoa(budget))
	require.Equal(t, &output.Budget{Tokens: int64(budget)}, v.Budget)
	w.received("cb", "done: first [whoami=cb fleet-tool=false]")
	w.must("intercom", "send", "cb", "second")
	w.received("cb", "done: second [whoami=cb fleet-tool=false]")
	st := w.status("cb")
	require.Equal(t, 2, st.Worker.Usage.Turns)
	require.Equal(t, int64(budget), st.Worker.Usage.Tokens, "each turn's share of Claude Code's running totals")
	require.InDelta(t, 2*standInCost, *st.Worker.Usage.CostUSD, 1e-9)
	require.Equal(t, "stand-in-model", st.Worker.Usage.Model)

	// Spent: the next message waits, the manager is told.
	w.must("intercom", "send", "cb", "third")
	notice := w.message("cb", func(s string) bool { return strings.Contains(s, "has spent its budget") })
	require.Contains(t, notice.Text, "(2240 of 2240 tokens)")
	require.Contains(t, notice.Text, "agent-fleet renew cb --budget-usd X or --budget-tokens N")
	st = w.status("cb")
	require.Equal(t, "budget-spent", st.Worker.StateReason)
	require.Equal(t, 2, st.Turns.Turns, "no turn started")
	text := w.must("status", "cb")
	require.Contains(t, text, "  usage:    2 turns, $0.02, 2.2k tokens (input 200, output 40, cache read 2k, cache write 0), model stand-in-model\n")
	require.Contains(t, text, "  budget:   2.2k tokens (2.2k spent); spent: no turn starts until renew raises it\n")
	require.Contains(t, text, "  paused:   budget spent 2240 of 2240 tokens: it keeps 1 message until renew")
	list := w.must("list")
	require.Contains(t, list, "running (paused: budget spent)")
	require.Contains(t, list, "$0.02 · 2.2k/2.2k tok")

	out := w.must("renew", "cb", "--budget-tokens", "10k")
	require.Contains(t, out, "Budget: 10k tokens (2.2k spent).")
	w.received("cb", "done: third [whoami=cb fleet-tool=false]")
	require.Len(t, w.calls("claude"), 3)

	// A rate limit: told once, the same conversation resumed at the reset.
	w.must("intercom", "send", "cb", "RATE-LIMIT please")
	notice = w.message("cb", func(s string) bool {
		return strings.Contains(s, "turn 4 of worker cb (claude) hit the model provider's rate limit")
	})
	require.Contains(t, notice.Text, "API Error: Request rejected (429)")
	w.received("cb", "done: RATE-LIMIT please [whoami=cb fleet-tool=false]")
	calls := w.calls("claude")
	require.Len(t, calls, 5)
	require.Equal(t, calls[0].Session, argAfter(calls[4].Argv, "--resume"))
	st = w.status("cb")
	require.Zero(t, st.Turns.Failures)
	require.Equal(t, "idle", st.Worker.StateReason)
	require.Empty(t, st.Worker.PausedUntil)
	require.Equal(t, 4, st.Worker.Usage.Turns)

	// The usage report, by worker and by kind.
	var rep output.UsageReportJSON
	require.NoError(t, json.Unmarshal([]byte(w.must("usage", "--json")), &rep))
	require.Equal(t, "worker", rep.By)
	require.Len(t, rep.Groups, 1)
	require.Equal(t, "cb", rep.Groups[0].Key)
	require.Equal(t, 4, rep.Groups[0].Turns)
	require.Equal(t, int64(4*standInTokens), rep.Groups[0].Tokens)
	require.InDelta(t, 4*standInCost, *rep.Total.CostUSD, 1e-9)
	text = w.must("usage", "--by", "kind", "--since", "1h")
	require.Regexp(t, `(?m)^claude +4 +4.5k +400 +80 +4k +0 +\$0\.04 +stand-in-model$`, text)
	require.Contains(t, w.must("usage", "--by", "manager"), "boss ")
}

// Budgets a worker cannot keep are usage errors, before anything starts.
func TestHarnessBudgetRefusals(t *testing.T) {
	t.Parallel()
	w := newHarnessWorld(t)
	for _, args := range [][]string{
		{"spawn", "--id", "x", "--budget-usd", "5", "--", "sleep", "1"},
		{"spawn", "--id", "x", "--kind", "claude", "--budget-usd", "-1", "--", w.bin + "/claude"},
		{"spawn", "--id", "x", "--kind", "claude", "--budget-tokens", "lots", "--", w.bin + "/claude"},
		{"spawn", "--id", "x", "--kind", "codex", "--budget-usd", "5", "--", w.bin + "/codex"},
		{"renew", "--budget-usd", "5"},
		{"usage", "--by", "model"},
		{"usage", "--since", "soon"},
	} {
		out, err := w.cli(args...)
		requireExit(t, err, exitUsage)
		require.NotContains(t, string(out), "Spawned", "%v: %s", args, out)
	}
	out, err := w.cli("spawn", "--id", "x", "--kind", "codex", "--budget-usd", "5", "--", w.bin+"/codex")
	requireExit(t, err, exitUsage)
	require.Contains(t, string(out), "codex reports no cost")
	out, _ = w.cli("list", "--all", "--json")
	require.Equal(t, "[]\n", string(out), "nothing was spawned")
}
