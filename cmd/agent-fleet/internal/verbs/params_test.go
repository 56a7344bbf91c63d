package verbs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// agent_fleet refuses arguments its action would ignore.
func TestDecodeRefusesArgumentsItWouldIgnore(t *testing.T) {
	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"action": "renew", "id": "w1", "lease": "2h"}, "lease"},
		{map[string]any{"action": "stop", "id": "w1", "force": true}, "force"},
		{map[string]any{"action": "status", "id": "w1", "lines": float64(10)}, "lines"},
		{map[string]any{"action": "list", "command": []any{"true"}}, "command"},
		{map[string]any{"action": "cleanup", "acknowledge": true}, "acknowledge"},
		{map[string]any{"action": "spawn", "id": "w1", "execute": true}, "execute"},
		{map[string]any{"action": "list", "id": "w1"}, "id"},
		{map[string]any{"action": "spawn", "id": "w1", "kind": "claude", "task": "t", "lease": "1h", "env": map[string]any{"K": "v"}}, ""},
		{map[string]any{"action": "adopt", "all": true}, ""},
		{map[string]any{"action": "logs", "id": "w1", "lines": float64(5)}, ""},
		{map[string]any{"action": "prune", "all": true, "acknowledge": true, "olderThan": "1h"}, ""},
		{map[string]any{"action": "list", "permission": ""}, ""},
	} {
		_, err := Decode(c.args)
		if c.want == "" {
			require.NoError(t, err, "%v", c.args)
			continue
		}
		require.Error(t, err, "%v", c.args)
		require.Contains(t, err.Error(), "does not take "+c.want)
	}
}

// A spawn's arguments land in its request exactly as the CLI's flags put
// them there: the same parsers serve both surfaces.
func TestDecodeSpawnMatchesTheFlags(t *testing.T) {
	a, err := Decode(map[string]any{"action": "spawn", "id": "w1", "kind": "codex", "role": "r", "cwd": "/tmp", "task": "t",
		"command": []any{"codex", "--x"}, "env": map[string]any{"B": "2", "A": "1"}, "model": "m", "effort": "high",
		"permission": "read-only", "turnTimeout": "45m", "lease": "30m", "maxRuntime": "2h",
		"profile": "workspace", "allowDegraded": true})
	require.NoError(t, err)
	var b Args
	b.Action = "spawn"
	flags := map[string][]string{"id": {"w1"}, "kind": {"codex"}, "role": {"r"}, "cwd": {"/tmp"}, "task": {"t"},
		"env": {"A=1", "B=2"}, "model": {"m"}, "effort": {"high"}, "permission": {"read-only"},
		"turn-timeout": {"45m"}, "lease": {"30m"}, "max-runtime": {"2h"},
		"profile": {"workspace"}, "allow-degraded": {"true"}}
	seen := map[string]bool{}
	for _, p := range SpawnFlags() {
		seen[p.Flag] = true
		for _, v := range flags[p.Flag] {
			require.NoError(t, p.SetFlag(&b, v), p.Flag)
		}
	}
	for flag := range flags {
		require.True(t, seen[flag], "--%s is a spawn flag", flag)
	}
	b.Spawn.Command = []string{"codex", "--x"} // after -- on the CLI
	require.Equal(t, b, a)

	for _, bad := range []map[string]any{
		{"action": "spawn", "id": "w1", "lease": "soon"},
		{"action": "spawn", "id": "w1", "maxRuntime": "-1m"},
		{"action": "spawn", "id": "w1", "profile": "sandboxed"},
		{"action": "list", "allowDegraded": true},
		{"action": "logs", "id": "w1", "lines": 1.5},
		{"action": "fly"},
	} {
		_, err := Decode(bad)
		require.Error(t, err, "%v", bad)
	}
}

// Every param is in the schema, every schema property is a param, and
// each param names the actions that take it.
func TestSchemaIsTheParams(t *testing.T) {
	props := Schema()["properties"].(map[string]any)
	require.Len(t, props, len(Params)+1)
	for _, p := range Params {
		require.Contains(t, props, p.Name)
		require.NotEmpty(t, p.Actions, p.Name)
		for _, a := range p.Actions {
			require.Contains(t, Actions, a, p.Name)
		}
	}
}

// Budgets, spawn's and renew's, parse alike on both surfaces; bad ones are
// usage errors.
func TestBudgetParams(t *testing.T) {
	for _, action := range []string{"spawn", "renew"} {
		a, err := Decode(map[string]any{"action": action, "id": "w1", "budgetUsd": 2.5, "budgetTokens": float64(500000)})
		require.NoError(t, err)
		b := Args{Action: action, ID: "w1"}
		for _, p := range Flags(action) {
			switch p.Flag {
			case "budget-usd":
				require.NoError(t, p.SetFlag(&b, "$2.50"))
			case "budget-tokens":
				require.NoError(t, p.SetFlag(&b, "500k"))
			case "id":
				require.NoError(t, p.SetFlag(&b, "w1"))
			}
		}
		require.Equal(t, a, b, action)
		require.Equal(t, 2.5, *a.Budget.USD)
		require.Equal(t, int64(500000), *a.Budget.Tokens)
	}
	p := paramNamed(t, "budgetTokens")
	var a Args
	require.NoError(t, p.SetFlag(&a, "2M"))
	require.Equal(t, int64(2_000_000), *a.Budget.Tokens)
	for _, bad := range []string{"-1", "0", "1.5", "lots", "2G"} {
		require.Error(t, p.SetFlag(&a, bad), bad)
	}
	usd := paramNamed(t, "budgetUsd")
	for _, bad := range []string{"-1", "0", "NaN", "Inf", "five"} {
		require.Error(t, usd.SetFlag(&a, bad), bad)
	}
	for _, bad := range []map[string]any{
		{"action": "spawn", "id": "w1", "budgetUsd": -2.0},
		{"action": "spawn", "id": "w1", "budgetTokens": 1.5},
		{"action": "spawn", "id": "w1", "budgetTokens": "lots"},
		{"action": "list", "budgetUsd": 1.0},
		{"action": "usage", "by": "model"},
		{"action": "usage", "since": "soon"},
	} {
		_, err := Decode(bad)
		require.Error(t, err, "%v", bad)
	}

	a, err := Decode(map[string]any{"action": "renew", "budgetUsd": 3.0})
	require.NoError(t, err)
	require.ErrorContains(t, a.Check(), "renew sets a budget for one worker", "a budget is for one worker")
}

func paramNamed(t *testing.T, name string) *Param {
	for _, p := range Params {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no param %s", name)
	return nil
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.FixedZone("CET", 3600))
	for s, want := range map[string]time.Time{
		"24h":                  now.Add(-24 * time.Hour),
		"90m":                  now.Add(-90 * time.Minute),
		"7d":                   now.AddDate(0, 0, -7),
		"2026-11-30":           time.Date(2026, 11, 30, 0, 0, 0, 0, now.Location()),
		"2026-11-30 08:15":     time.Date(2026, 11, 30, 8, 15, 0, 0, now.Location()),
		"2026-12-01T10:00:00Z": time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
	} {
		got, err := ParseSince(s, now)
		require.NoError(t, err, s)
		require.True(t, want.Equal(got), "%s: %s, want %s", s, got, want)
	}
	for _, bad := range []string{"", "yesterday", "-1h", "-2d", "2027-01-01"} {
		_, err := ParseSince(bad, now)
		require.Error(t, err, bad)
	}
	a, err := Decode(map[string]any{"action": "usage", "since": "24h", "by": "manager"})
	require.NoError(t, err)
	require.Equal(t, "manager", a.By)
	require.WithinDuration(t, time.Now().Add(-24*time.Hour), a.Since, time.Minute)
}

// --worktree alone, --worktree=BRANCH, and agent_fleet's worktree and
// branch ask for the same worktrees.
func TestWorktreeParams(t *testing.T) {
	flag := paramNamed(t, "worktree")
	require.Equal(t, "worktree", flag.Flag)
	require.Equal(t, DefaultWorktreeBranch, flag.NoValue, "the flag takes an optional value")
	var alone, named Args
	require.NoError(t, flag.SetFlag(&alone, flag.NoValue))
	require.NoError(t, flag.SetFlag(&named, "fix/login"))
	require.True(t, alone.Spawn.Worktree)
	require.Empty(t, alone.Spawn.Branch, "the fleet names the default branch after the worker")
	require.Equal(t, "fix/login", named.Spawn.Branch)

	a, err := Decode(map[string]any{"action": "spawn", "id": "w1", "worktree": true})
	require.NoError(t, err)
	require.Equal(t, alone.Spawn, a.Spawn)
	a, err = Decode(map[string]any{"action": "spawn", "id": "w1", "branch": "fix/login"})
	require.NoError(t, err)
	require.Equal(t, "fix/login", a.Spawn.Branch, "a branch implies a worktree (fleet.SpawnRequest)")
	_, err = Decode(map[string]any{"action": "spawn", "id": "w1", "worktree": "yes"})
	require.Error(t, err)
	_, err = Decode(map[string]any{"action": "status", "id": "w1", "worktree": true})
	require.ErrorContains(t, err, "does not take worktree")
}

// Durations take whole days as the since filters do: prune --older-than 7d.
func TestParseDuration(t *testing.T) {
	for s, want := range map[string]time.Duration{"7d": 7 * 24 * time.Hour, "0d": 0, "36h": 36 * time.Hour, " 90m ": 90 * time.Minute} {
		d, err := ParseDuration(s)
		require.NoError(t, err, s)
		require.Equal(t, want, d, s)
	}
	for _, s := range []string{"7x", "1.5d", "-1d", "d", ""} {
		_, err := ParseDuration(s)
		require.Error(t, err, s)
	}
	var d time.Duration
	require.NoError(t, DurationValue(&d).Set("7d"))
	require.Equal(t, 7*24*time.Hour, d)
}
