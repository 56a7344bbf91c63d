package harness

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// turnOutput reads a fixture of testdata/turns (see its README).
func turnOutput(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "turns", name))
	require.NoError(t, err)
	return data
}

// The end of every fixture turn: resets given as "in 30s" or a time of
// day resolve against it.
var turnEnd = time.Date(2026, 12, 1, 11, 7, 31, 0, time.FixedZone("CET", 3600))

func TestParseTurnUsage(t *testing.T) {
	for _, c := range []struct {
		file, kind string
		session    string
		final      string // "" for a failed turn
		usage      *Usage
		cumulative bool
		rateLimit  *RateLimit
		errorHas   string
	}{
		{file: "claude-ok.json", kind: "claude", session: "6f1c7a52-3b0e-4c1d-9a55-2f7e8d9c0b11", final: "Fixed the parser; the tests pass.",
			usage: &Usage{InputTokens: 1192, OutputTokens: 750, CacheReadTokens: 31022, CacheWriteTokens: 4210,
				CostUSD: 0.048216, CostKnown: true, Model: "claude-sonnet-4-5-20250929"}, cumulative: true},
		{file: "claude-429.json", kind: "claude", session: "6f1c7a52-3b0e-4c1d-9a55-2f7e8d9c0b11",
			usage: &Usage{InputTokens: 1192, OutputTokens: 750, CacheReadTokens: 31022, CacheWriteTokens: 4210,
				CostUSD: 0.048216, CostKnown: true, Model: "claude-sonnet-4-5-20250929"}, cumulative: true,
			rateLimit: &RateLimit{Kind: RateLimited}, errorHas: "API Error: Request rejected (429)"},
		{file: "claude-529.json", kind: "claude", session: "0c5d1f1e-7a7b-4c2e-8d9f-0a1b2c3d4e5f",
			usage: &Usage{CostKnown: true}, cumulative: true,
			rateLimit: &RateLimit{Kind: Overloaded}, errorHas: "Repeated 529 Overloaded errors"},
		{file: "claude-usage-limit.json", kind: "claude", session: "0c5d1f1e-7a7b-4c2e-8d9f-0a1b2c3d4e5f",
			usage: &Usage{CostKnown: true}, cumulative: true,
			rateLimit: &RateLimit{Kind: RateLimited}, errorHas: "You've hit your limit"},

		{file: "codex-ok.jsonl", kind: "codex", session: "019a3c52-7d1e-7b20-9a11-5c2f8e4d1b07", final: "The tests pass.",
			usage: &Usage{InputTokens: 24763 - 19200, CacheReadTokens: 19200, OutputTokens: 1432}, cumulative: true},
		{file: "codex-429.jsonl", kind: "codex", session: "019a3c52-7d1e-7b20-9a11-5c2f8e4d1b07",
			rateLimit: &RateLimit{Kind: RateLimited}, errorHas: "last status: 429 Too Many Requests"},
		{file: "codex-usage-limit.jsonl", kind: "codex", session: "019a3c52-7d1e-7b20-9a11-5c2f8e4d1b07",
			rateLimit: &RateLimit{Kind: RateLimited, ResetAt: time.Date(2026, 12, 1, 15, 4, 0, 0, turnEnd.Location())},
			errorHas:  "You've hit your usage limit"},
		{file: "codex-pace.jsonl", kind: "codex", session: "019a3c60-1111-7222-8333-944455566677",
			rateLimit: &RateLimit{Kind: RateLimited, ResetAt: turnEnd.Add(2500 * time.Millisecond)}, errorHas: "Rate limit reached"},
		{file: "codex-overloaded.jsonl", kind: "codex", session: "019a3c61-aaaa-7bbb-8ccc-9dddeeefff00",
			rateLimit: &RateLimit{Kind: Overloaded}, errorHas: "at capacity"},
		{file: "codex-quota.jsonl", kind: "codex", session: "019a3c62-aaaa-7bbb-8ccc-9dddeeefff01",
			errorHas: "Quota exceeded"}, // waiting does not lift it: a failed turn

		{file: "opencode-ok.jsonl", kind: "opencode", session: "ses_5a1b2c3d4e5fXk9QwErTyUiOp", final: "main.go declares package main.",
			usage: &Usage{InputTokens: 1580, OutputTokens: 142, CacheReadTokens: 19700, CacheWriteTokens: 1200, CostUSD: 0.0043, CostKnown: true}},
		{file: "opencode-429.jsonl", kind: "opencode", session: "ses_5a1b2c3d4e5fXk9QwErTyUiOp",
			rateLimit: &RateLimit{Kind: RateLimited, ResetAt: turnEnd.Add(30 * time.Second)}, errorHas: "Rate limit exceeded"},
		{file: "opencode-overloaded.jsonl", kind: "opencode", session: "ses_9z8y7x6w5v4uQwErTyUiOpAs",
			rateLimit: &RateLimit{Kind: Overloaded}, errorHas: "Overloaded"},

		{file: "pi-ok.jsonl", kind: "pi", session: "agent-fleet-w1-0123456789ab", final: "Done.",
			usage: &Usage{InputTokens: 2330, OutputTokens: 44, CacheReadTokens: 2176, CostUSD: 0.00122, CostKnown: true, Model: "gpt-4.1-mini"}},
		{file: "pi-429.jsonl", kind: "pi", session: "agent-fleet-w1-0123456789ab",
			usage: &Usage{CostKnown: true, Model: "claude-sonnet-4-5"}, rateLimit: &RateLimit{Kind: RateLimited}, errorHas: "rate_limit_error"},
		{file: "pi-overloaded.jsonl", kind: "pi", session: "agent-fleet-w1-0123456789ab",
			usage: &Usage{CostKnown: true, Model: "claude-sonnet-4-5"}, rateLimit: &RateLimit{Kind: Overloaded}, errorHas: "overloaded_error"},
	} {
		t.Run(c.file, func(t *testing.T) {
			r := ParseTurnOutputAt(c.kind, turnOutput(t, c.file), turnEnd)
			require.Equal(t, c.session, r.Session)
			require.Equal(t, c.final, r.Final)
			require.Equal(t, c.final == "", r.Failed, r.Error)
			if c.errorHas != "" {
				require.Contains(t, r.Error, c.errorHas)
			}
			if c.usage == nil {
				require.Nil(t, r.Usage)
			} else {
				require.NotNil(t, r.Usage)
				require.InDelta(t, c.usage.CostUSD, r.Usage.CostUSD, 1e-9)
				got := *r.Usage
				got.CostUSD = c.usage.CostUSD
				require.Equal(t, *c.usage, got)
			}
			require.Equal(t, c.cumulative, r.UsageCumulative)
			if c.rateLimit == nil {
				require.Nil(t, r.RateLimit)
			} else {
				require.NotNil(t, r.RateLimit, r.Error)
				require.Equal(t, c.rateLimit.Kind, r.RateLimit.Kind)
				require.True(t, c.rateLimit.ResetAt.Equal(r.RateLimit.ResetAt), "reset %s, want %s", r.RateLimit.ResetAt, c.rateLimit.ResetAt)
			}
		})
	}
}

// A Claude Code result without per-model totals: the main loop's usage of
// the call, which is the turn's own, and no cost (total_cost_usd would be
// a running total).
func TestClaudeMainLoopUsage(t *testing.T) {
	r := ParseTurnOutputAt("claude", []byte(`{"type":"result","subtype":"success","is_error":false,"result":"ok","session_id":"s",`+
		`"total_cost_usd":0.3,"usage":{"input_tokens":5,"output_tokens":7,"cache_read_input_tokens":11,"cache_creation_input_tokens":13}}`), turnEnd)
	require.Equal(t, &Usage{InputTokens: 5, OutputTokens: 7, CacheReadTokens: 11, CacheWriteTokens: 13}, r.Usage)
	require.False(t, r.UsageCumulative)
}

// Claude Code and Codex report a conversation's running totals, carried
// across a resume: a turn is the difference from the last report of the
// same conversation.
func TestTurnUsageOfRunningTotals(t *testing.T) {
	first := ParseTurnOutputAt("claude", turnOutput(t, "claude-ok.json"), turnEnd)
	u, base := TurnUsage(first, nil)
	require.Equal(t, first.Usage, u, "a conversation without a baseline: all of it is the turn's")
	require.Equal(t, first.Session, base.Session)

	second := ParseTurnOutputAt("claude", turnOutput(t, "claude-resumed.json"), turnEnd)
	u, base2 := TurnUsage(second, base)
	require.Equal(t, int64(4), u.InputTokens)
	require.Equal(t, int64(120), u.OutputTokens)
	require.Equal(t, int64(35232), u.CacheReadTokens)
	require.Equal(t, int64(310), u.CacheWriteTokens)
	require.InDelta(t, 0.0129, u.CostUSD, 1e-9)
	require.True(t, u.CostKnown)
	require.Equal(t, "claude-sonnet-4-5-20250929", u.Model)
	require.Equal(t, *second.Usage, base2.Totals)

	// A rate-limited resume reports the totals restored, nothing spent.
	limited := ParseTurnOutputAt("claude", turnOutput(t, "claude-429.json"), turnEnd)
	u, _ = TurnUsage(limited, base)
	require.Zero(t, u.Tokens())
	require.Zero(t, u.CostUSD)

	// Totals below the baseline: the conversation counted afresh.
	u, base3 := TurnUsage(first, base2)
	require.Equal(t, first.Usage, u)
	require.Equal(t, *first.Usage, base3.Totals)

	// Another conversation's totals are all the turn's own.
	other := second
	other.Session = "another"
	u, _ = TurnUsage(other, base)
	require.Equal(t, second.Usage, u)

	// A report of nothing (a crash) leaves the baseline.
	crash := TurnResult{Session: first.Session, Usage: &Usage{CostKnown: true}, UsageCumulative: true}
	u, kept := TurnUsage(crash, base2)
	require.Zero(t, u.Tokens())
	require.Equal(t, base2, kept)

	// A harness reporting each turn's own usage is taken as it is.
	own := ParseTurnOutputAt("pi", turnOutput(t, "pi-ok.jsonl"), turnEnd)
	u, kept = TurnUsage(own, base2)
	require.Equal(t, own.Usage, u)
	require.Equal(t, base2, kept)

	// No usage reported: nothing to count.
	u, kept = TurnUsage(TurnResult{Failed: true}, base2)
	require.Nil(t, u)
	require.Equal(t, base2, kept)
}

func TestUsageTotals(t *testing.T) {
	var tot UsageTotals
	require.False(t, tot.CostKnown(), "no turn: no cost known")
	tot.Add(Usage{InputTokens: 10, OutputTokens: 5, CacheReadTokens: 100, CacheWriteTokens: 20, CostUSD: 0.5, CostKnown: true, Model: "m1"})
	require.True(t, tot.CostKnown())
	tot.Add(Usage{InputTokens: 1, OutputTokens: 1}) // Codex: no cost
	require.Equal(t, 2, tot.Turns)
	require.Equal(t, 1, tot.UnpricedTurns)
	require.False(t, tot.CostKnown())
	require.Equal(t, int64(137), tot.Tokens())
	require.Equal(t, "m1", tot.Model, "a turn that names no model keeps the last")
	var all UsageTotals
	all.Merge(tot)
	all.Merge(UsageTotals{Turns: 1, OutputTokens: 3, CostUSD: 0.25, Model: "m2"})
	require.Equal(t, 3, all.Turns)
	require.Equal(t, int64(140), all.Tokens())
	require.InDelta(t, 0.75, all.CostUSD, 1e-12)
	require.Equal(t, "m1", all.Model)
}

func TestRateLimitResets(t *testing.T) {
	now := turnEnd
	for _, c := range []struct {
		text string
		want time.Time
	}{
		{"Please try again in 11.054s.", now.Add(11054 * time.Millisecond)},
		{"try again in 20 seconds", now.Add(20 * time.Second)},
		{"Rate limited; retry after 2 minutes", now.Add(2 * time.Minute)},
		{"try again in 500ms", now.Add(500 * time.Millisecond)},
		{"You've hit your usage limit. Try again at 3:04 PM.", time.Date(2026, 12, 1, 15, 4, 0, 0, now.Location())},
		{"You've hit your usage limit. Try again at 9:15 AM.", time.Date(2026, 12, 2, 9, 15, 0, 0, now.Location())}, // past today: tomorrow
		{"You've hit your usage limit. Try again at Dec 5th, 2026 3:04 PM.", time.Date(2026, 12, 5, 15, 4, 0, 0, now.Location())},
		{"or try again at Jan 2nd, 2027 at 10:00 AM.", time.Date(2027, 1, 2, 10, 0, 0, 0, now.Location())},
		{"API Error: Request rejected (429)", time.Time{}},
	} {
		require.True(t, c.want.Equal(resetOfText(c.text, now)), "%q: %s, want %s", c.text, resetOfText(c.text, now), c.want)
	}
	require.True(t, now.Add(1500*time.Millisecond).Equal(resetOfHeaders(map[string]string{"Retry-After-Ms": "1500", "retry-after": "9"}, now)))
	require.True(t, now.Add(9*time.Second).Equal(resetOfHeaders(map[string]string{"retry-after": "9"}, now)))
	at := time.Date(2026, 12, 1, 10, 30, 0, 0, time.UTC)
	require.True(t, at.Equal(resetOfHeaders(map[string]string{"Retry-After": at.Format(http.TimeFormat)}, now)))
	require.True(t, resetOfHeaders(map[string]string{"x-other": "1"}, now).IsZero())

	for text, want := range map[string]string{
		"exceeded retry limit, last status: 429 Too Many Requests":     RateLimited,
		"exceeded retry limit, last status: 503 Service Unavailable":   Overloaded,
		"exceeded retry limit, last status: 500 Internal Server Error": "",
		"Quota exceeded. Check your plan and billing details.":         "",
		"insufficient_quota: you exceeded your current quota":          "",
		"No API key for provider anthropic":                            "",
		`529 {"type":"error","error":{"type":"overloaded_error"}}`:     Overloaded,
		"Provider is overloaded":                                       Overloaded,
		"Too Many Requests":                                            RateLimited,
	} {
		require.Equal(t, want, rateLimitOfText(text), text)
	}
}
