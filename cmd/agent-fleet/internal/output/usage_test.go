package output

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
)

func TestTokensAndCostText(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1k", 1250: "1.2k", 9999: "10k", 12_500: "12k",
		340_000: "340k", 1_000_000: "1M", 1_234_567: "1.23M", 12_345_678: "12.3M"} {
		require.Equal(t, want, TokensText(n), n)
	}
	for usd, want := range map[float64]string{0: "$0.00", 0.004: "$0.004", 0.00125: "$0.0013", 0.01: "$0.01", 1.234: "$1.23", 12: "$12.00"} {
		require.Equal(t, want, CostText(usd), usd)
	}
}

func sampleUsage() harness.UsageTotals {
	return harness.UsageTotals{Turns: 3, InputTokens: 1200, OutputTokens: 3400, CacheReadTokens: 56000, CacheWriteTokens: 7800,
		CostUSD: 0.7345, Model: "claude-sonnet-4-5"}
}

// A coding-agent worker's usage, budget and pause, in JSON (a USD cost
// only where a turn reported one) and in list and status.
func TestWorkerUsageViews(t *testing.T) {
	until := time.Now().Add(4*time.Minute + 10*time.Second).UTC()
	w := &fleet.Worker{ID: "w1", RunID: "0123456789ab", Kind: "claude", State: fleet.StateRunning, Manager: "boss",
		CreatedAt: time.Now().Add(-time.Hour), Usage: sampleUsage(), Budget: fleet.Budget{USD: 5, Tokens: 2_000_000},
		StateReason: "rate-limited", PausedUntil: until}
	data, err := json.Marshal(ViewWorker(w))
	require.NoError(t, err)
	var v map[string]any
	require.NoError(t, json.Unmarshal(data, &v))
	require.Equal(t, map[string]any{"turns": 3.0, "tokens": 68400.0, "inputTokens": 1200.0, "outputTokens": 3400.0,
		"cacheReadTokens": 56000.0, "cacheWriteTokens": 7800.0, "costUsd": 0.7345, "model": "claude-sonnet-4-5"}, v["usage"])
	require.Equal(t, map[string]any{"usd": 5.0, "tokens": 2e6}, v["budget"])
	require.Equal(t, Stamp(until), v["pausedUntil"])

	table := WorkersTable([]*fleet.Worker{w})
	require.Contains(t, table, "USAGE")
	require.Regexp(t, `running \(paused: rate limit, 4m(09|10)s left\)`, table)
	require.Contains(t, table, "$0.73/$5.00 · 68k/2M tok")
	lines := workerLines([]*fleet.Worker{w})
	require.Contains(t, lines, "[running, paused: rate limit until "+until.Format(time.RFC3339)+"]")
	require.Contains(t, lines, "; usage $0.73/$5.00 · 68k/2M tok")

	// Codex reports no cost: none in JSON, none claimed in text.
	c := &fleet.Worker{ID: "c1", Kind: "codex", State: fleet.StateRunning, Usage: harness.UsageTotals{Turns: 2, UnpricedTurns: 2, InputTokens: 5000}}
	data, err = json.Marshal(ViewWorker(c))
	require.NoError(t, err)
	require.NotContains(t, string(data), "costUsd")
	require.NotContains(t, string(data), `"budget"`)
	require.Equal(t, "5k tok", usageCell(c))
	require.Contains(t, UsageText(c.Usage), "2 turns, no cost reported, 5k tokens")

	// An exec worker has no usage at all.
	data, err = json.Marshal(ViewWorker(&fleet.Worker{ID: "e", Kind: "exec"}))
	require.NoError(t, err)
	require.NotContains(t, string(data), "usage")

	st := &fleet.Status{Worker: w, Turns: &harness.TurnState{Kind: "claude", Turns: 4, Usage: sampleUsage(),
		Pause: &harness.Pause{Reason: harness.RateLimited, Since: time.Now(), Until: until, Turn: 4, Messages: 2,
			Error: "API Error: Request rejected (429) · slow down"},
		Last: &harness.TurnRecord{N: 4, Reason: "messages", Messages: 2, StartedAt: time.Now().Add(-time.Second), EndedAt: time.Now(),
			Error: "API Error: Request rejected (429) · slow down", RateLimit: &harness.RateLimit{Kind: harness.RateLimited}}}}
	text := WorkerStatusText(st)
	require.Contains(t, text, "  usage:    3 turns, $0.73, 68k tokens (input 1.2k, output 3.4k, cache read 56k, cache write 7.8k), model claude-sonnet-4-5\n")
	require.Contains(t, text, "  budget:   $5.00 ($0.73 spent), 2M tokens (68k spent)\n")
	require.Regexp(t, `(?m)^  paused:   rate limit until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+ \(in 4m(09|10)s\): turn 4 ended on it \(API Error: Request rejected \(429\) · slow down\); it keeps 2 messages and resumes the same conversation then$`, text)
	require.Contains(t, text, "ended on a rate limit (not a failure): API Error: Request rejected (429)")
	require.NotContains(t, text, "failed: API Error")

	w.Usage.CostUSD, w.StateReason, w.PausedUntil = 5.02, "budget-spent", time.Time{}
	st.Turns.Pause = &harness.Pause{Reason: harness.PauseBudget, Since: time.Now(), Messages: 1, Error: "spent $5.02 of $5.00"}
	text = WorkerStatusText(st)
	require.Contains(t, text, "  budget:   $5.00 ($5.02 spent), 2M tokens (68k spent); spent: no turn starts until renew raises it\n")
	require.Contains(t, text, "  paused:   budget spent $5.02 of $5.00: it keeps 1 message until renew --budget-usd or --budget-tokens raises it\n")
	require.Contains(t, WorkersTable([]*fleet.Worker{w}), "running (paused: budget spent)")
}

func TestUsageReportViews(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	rep := &fleet.UsageReport{By: "worker", Since: t0, Groups: []fleet.UsageGroup{
		{Key: "w1", Runs: 1, Models: []string{"opus", "sonnet"}, First: t0, Last: t0.Add(time.Hour), Totals: sampleUsage()},
		{Key: "c1", Runs: 2, First: t0, Last: t0, Totals: harness.UsageTotals{Turns: 2, UnpricedTurns: 2, InputTokens: 5000}},
	}}
	for _, g := range rep.Groups {
		rep.Total.Merge(g.Totals)
	}
	r := UsageReport{Rep: rep}
	text := r.Text(CLI)
	require.True(t, strings.HasPrefix(text, "Usage since "+HumanTime(t0)), text)
	require.Contains(t, text, "WORKER  TURNS  TOKENS  INPUT  OUTPUT  CACHE READ  CACHE WRITE  COST")
	require.Regexp(t, `(?m)^w1 +3 +68k +1\.2k +3\.4k +56k +7\.8k +\$0\.73 +opus, sonnet$`, text)
	require.Regexp(t, `(?m)^c1 +2 +5k +5k +0 +0 +0 +not reported +-$`, text)
	require.Regexp(t, `(?m)^TOTAL +5 +73k .* \$0\.73 \+ 2 turns without a cost +-$`, text)
	tool := r.Text(Tool)
	require.Contains(t, tool, "Usage since 2026-12-01T10:00:00Z, by worker:\n- w1: 3 turns, 68k tokens")
	require.Contains(t, tool, "- c1: 2 turns, 5k tokens (input 5k, output 0, cache read 0, cache write 0), no cost reported")
	require.Contains(t, tool, "Total: 5 turns")

	data, err := json.Marshal(r.JSON())
	require.NoError(t, err)
	var v map[string]any
	require.NoError(t, json.Unmarshal(data, &v))
	require.Equal(t, "worker", v["by"])
	require.Equal(t, "2026-12-01T10:00:00Z", v["since"])
	g := v["groups"].([]any)[0].(map[string]any)
	require.Equal(t, "w1", g["key"])
	require.Equal(t, 68400.0, g["tokens"])
	require.Equal(t, []any{"opus", "sonnet"}, g["models"])
	require.Equal(t, "2026-12-01T11:00:00Z", g["lastTurnAt"])
	require.NotContains(t, v["groups"].([]any)[1], "costUsd")
	require.Equal(t, 2.0, v["total"].(map[string]any)["unpricedTurns"])
	require.Equal(t, r.JSON(), r.Structured())

	empty := UsageReport{Rep: &fleet.UsageReport{By: "kind"}}
	require.Equal(t, "No usage recorded yet.", empty.Text(CLI))
	data, err = json.Marshal(empty.JSON())
	require.NoError(t, err)
	require.JSONEq(t, `{"by":"kind","groups":[],"total":{"turns":0,"tokens":0,"inputTokens":0,"outputTokens":0,"cacheReadTokens":0,"cacheWriteTokens":0}}`, string(data))
}
