package fleet

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet/harness"
)

// A registry made by a build that knew schema 1 opens under this one: its
// records upgrade in place, with no usage and no budget, and take usage
// from then on.
func TestSchema1RegistryUpgrades(t *testing.T) {
	ctx := context.Background()
	path := registryPath(t)
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))

	// Schema 1 as it shipped: migration 0 → 1 alone, with one worker.
	raw, err := sql.Open("sqlite", dsn(path, time.Second, false))
	require.NoError(t, err)
	for _, stmt := range migrations[0] {
		_, err := raw.Exec(stmt)
		require.NoError(t, err)
	}
	_, err = raw.Exec(`INSERT INTO meta (key, value) VALUES ('registry_id', 'old-one'), ('created_at_ms', '1')`)
	require.NoError(t, err)
	_, err = raw.Exec(`INSERT INTO generations (id, generation, updated_at_ms) VALUES ('old', 1, 1)`)
	require.NoError(t, err)
	_, err = raw.Exec(`INSERT INTO runs (id, run_id, generation, created_at_ms) VALUES ('old', '0123456789ab', 1, 1)`)
	require.NoError(t, err)
	_, err = raw.Exec(`INSERT INTO workers (id, run_id, generation, kind, unit, state, manager, created_at_ms, updated_at_ms)
		VALUES ('old', '0123456789ab', 1, 'claude', 'agent-fleet-worker-old-0123456789ab.service', 'running', 'boss', 1000, 1000)`)
	require.NoError(t, err)
	_, err = raw.Exec(`PRAGMA user_version = 1`)
	require.NoError(t, err)
	require.NoError(t, raw.Close())

	r := openTestRegistry(t, path, nil)
	var v int
	require.NoError(t, r.db.QueryRow(`PRAGMA user_version`).Scan(&v))
	require.Equal(t, RegistrySchemaVersion, v)
	require.Equal(t, "old-one", r.ID(), "the same file, upgraded")
	w, err := r.GetRun(ctx, "old", "0123456789ab")
	require.NoError(t, err)
	require.Equal(t, "boss", w.Manager)
	require.Zero(t, w.Usage)
	require.True(t, w.Budget.IsZero())
	require.True(t, w.PausedUntil.IsZero())
	require.NoError(t, r.Check(ctx))

	w, err = r.RecordTurnUsage(ctx, TurnUsage{ID: "old", RunID: "0123456789ab", Turn: 1, EndedAt: time.UnixMilli(5000), Manager: "boss",
		Usage: harness.Usage{InputTokens: 10, OutputTokens: 2, CostUSD: 0.01, CostKnown: true, Model: "m"}})
	require.NoError(t, err)
	require.Equal(t, 1, w.Usage.Turns)
	require.Equal(t, int64(12), w.Usage.Tokens())
}

func TestTurnUsageTotalsAndReport(t *testing.T) {
	ctx := context.Background()
	clock := newTestClock()
	r := openTestRegistry(t, registryPath(t), clock)
	add := func(id, kind, manager string) *Worker {
		w := &Worker{ID: id, Kind: kind, Manager: manager, FirstManager: manager, Budget: Budget{Tokens: 1000}}
		require.NoError(t, r.Reserve(ctx, w))
		return w
	}
	a, b, c := add("a", "claude", "boss"), add("b", "codex", "boss"), add("c", "claude", "other")
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	record := func(w *Worker, turn int, at time.Duration, manager string, u harness.Usage) *Worker {
		t.Helper()
		out, err := r.RecordTurnUsage(ctx, TurnUsage{ID: w.ID, RunID: w.RunID, Turn: turn, EndedAt: t0.Add(at), Manager: manager, Usage: u})
		require.NoError(t, err)
		return out
	}
	record(a, 1, 0, "boss", harness.Usage{InputTokens: 100, OutputTokens: 50, CacheReadTokens: 1000, CacheWriteTokens: 200, CostUSD: 0.25, CostKnown: true, Model: "sonnet"})
	got := record(a, 2, time.Hour, "boss", harness.Usage{InputTokens: 10, OutputTokens: 5, CostUSD: 0.05, CostKnown: true, Model: "opus"})
	require.Equal(t, harness.UsageTotals{Turns: 2, InputTokens: 110, OutputTokens: 55, CacheReadTokens: 1000, CacheWriteTokens: 200,
		CostUSD: 0.30, Model: "opus"}, roundCost(got.Usage))
	require.Equal(t, Budget{Tokens: 1000}, got.Budget, "recording usage keeps the budget")
	record(b, 1, 2*time.Hour, "boss", harness.Usage{InputTokens: 7000, CacheReadTokens: 3000, OutputTokens: 400}) // Codex: no cost
	record(c, 1, 3*time.Hour, "other", harness.Usage{InputTokens: 1, OutputTokens: 1, CostUSD: 1.5, CostKnown: true, Model: "sonnet"})

	_, err := r.RecordTurnUsage(ctx, TurnUsage{ID: a.ID, RunID: a.RunID, Turn: 2, EndedAt: t0, Usage: harness.Usage{InputTokens: 1}})
	require.ErrorIs(t, err, ErrConflict, "a turn is counted once")
	got, err = r.GetRun(ctx, a.ID, a.RunID)
	require.NoError(t, err)
	require.Equal(t, 2, got.Usage.Turns)
	_, err = r.RecordTurnUsage(ctx, TurnUsage{ID: "nobody", RunID: a.RunID, Turn: 1})
	require.ErrorIs(t, err, ErrNotFound)

	rep, err := r.UsageReport(ctx, time.Time{}, "")
	require.NoError(t, err)
	require.Equal(t, UsageByWorker, rep.By)
	require.Len(t, rep.Groups, 3)
	require.Equal(t, []string{"c", "a", "b"}, keys(rep), "costliest first; no cost last")
	ga := rep.Groups[1]
	require.Equal(t, 2, ga.Totals.Turns)
	require.Equal(t, 1, ga.Runs)
	require.Equal(t, []string{"opus", "sonnet"}, ga.Models)
	require.Equal(t, t0, ga.First)
	require.Equal(t, t0.Add(time.Hour), ga.Last)
	require.InDelta(t, 0.30, ga.Totals.CostUSD, 1e-9)
	require.True(t, ga.Totals.CostKnown())
	require.Equal(t, 1, rep.Groups[2].Totals.UnpricedTurns)
	require.False(t, rep.Groups[2].Totals.CostKnown())
	require.Equal(t, 4, rep.Total.Turns)
	require.InDelta(t, 1.80, rep.Total.CostUSD, 1e-9)
	require.Equal(t, 1, rep.Total.UnpricedTurns)

	rep, err = r.UsageReport(ctx, time.Time{}, UsageByManager)
	require.NoError(t, err)
	require.Equal(t, []string{"other", "boss"}, keys(rep))
	require.Equal(t, 3, rep.Groups[1].Totals.Turns)
	require.Equal(t, 2, rep.Groups[1].Runs)

	rep, err = r.UsageReport(ctx, t0.Add(90*time.Minute), UsageByKind)
	require.NoError(t, err)
	require.Equal(t, []string{"claude", "codex"}, keys(rep), "since: turns that ended then or later")
	require.Equal(t, 1, rep.Groups[0].Totals.Turns)

	_, err = r.UsageReport(ctx, time.Time{}, "model")
	require.ErrorIs(t, err, ErrInvalidRequest)

	// Forgetting the records keeps what they spent.
	finish(t, r, c, StateExited)
	_, err = r.Forget(ctx, "c", "")
	require.NoError(t, err)
	rep, err = r.UsageReport(ctx, time.Time{}, UsageByWorker)
	require.NoError(t, err)
	require.Contains(t, keys(rep), "c")
}

func keys(rep *UsageReport) []string {
	var out []string
	for _, g := range rep.Groups {
		out = append(out, g.Key)
	}
	return out
}

func roundCost(t harness.UsageTotals) harness.UsageTotals {
	t.CostUSD = float64(int64(t.CostUSD*1e6+0.5)) / 1e6
	return t
}

func TestBudget(t *testing.T) {
	usd, tokens := 5.0, int64(1000)
	b := BudgetChange{USD: &usd}.apply(Budget{Tokens: 200})
	require.Equal(t, Budget{USD: 5, Tokens: 200}, b, "a change sets only what it gives")
	spent, how := b.Spent(harness.UsageTotals{CostUSD: 4.99, InputTokens: 199})
	require.False(t, spent, how)
	spent, how = b.Spent(harness.UsageTotals{CostUSD: 5.02})
	require.True(t, spent)
	require.Equal(t, "$5.02 of $5.00", how)
	_, how = Budget{USD: 0.001}.Spent(harness.UsageTotals{CostUSD: 0.0046})
	require.Equal(t, "$0.0046 of $0.001", how, "amounts under a cent are not $0.00")
	spent, how = b.Spent(harness.UsageTotals{OutputTokens: 150, CacheReadTokens: 60})
	require.True(t, spent)
	require.Equal(t, "210 of 200 tokens", how)
	spent, _ = Budget{}.Spent(harness.UsageTotals{CostUSD: 1e9})
	require.False(t, spent, "no budget is never spent")

	require.NoError(t, BudgetChange{USD: &usd, Tokens: &tokens}.check("claude"))
	require.NoError(t, BudgetChange{}.check("exec"))
	require.ErrorIs(t, BudgetChange{Tokens: &tokens}.check("exec"), ErrInvalidRequest)
	require.ErrorIs(t, BudgetChange{USD: &usd}.check("codex"), ErrInvalidRequest, "codex reports no cost")
	require.NoError(t, BudgetChange{Tokens: &tokens}.check("codex"))
	neg, zero := -1.0, int64(0)
	require.ErrorIs(t, BudgetChange{USD: &neg}.check("pi"), ErrInvalidRequest)
	require.ErrorIs(t, BudgetChange{Tokens: &zero}.check("pi"), ErrInvalidRequest)
}

// Claude Code refuses bypassPermissions as root outside a sandbox it
// knows of: such a spawn is refused at once, not failed at every turn.
func TestClaudeBypassAsRootIsRefused(t *testing.T) {
	full := SpawnRequest{Kind: "claude", Permission: "full"}
	err := checkClaudeBypassAsRoot(full, 0)
	require.ErrorIs(t, err, ErrInvalidRequest)
	require.ErrorContains(t, err, "--env IS_SANDBOX=1")
	require.ErrorIs(t, checkClaudeBypassAsRoot(SpawnRequest{Kind: "claude", Permission: "bypassPermissions"}, 0), ErrInvalidRequest)
	require.NoError(t, checkClaudeBypassAsRoot(full, 1000), "not root")
	require.NoError(t, checkClaudeBypassAsRoot(SpawnRequest{Kind: "claude", Permission: "full", Env: []string{"IS_SANDBOX=1"}}, 0))
	require.NoError(t, checkClaudeBypassAsRoot(SpawnRequest{Kind: "claude", Permission: "workspace-write"}, 0))
	require.NoError(t, checkClaudeBypassAsRoot(SpawnRequest{Kind: "codex", Permission: "full"}, 0))
}
