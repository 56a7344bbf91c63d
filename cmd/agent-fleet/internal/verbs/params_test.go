package verbs

import (
	"testing"

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
		"permission": "read-only", "turnTimeout": "45m", "lease": "30m", "maxRuntime": "2h"})
	require.NoError(t, err)
	var b Args
	b.Action = "spawn"
	flags := map[string][]string{"id": {"w1"}, "kind": {"codex"}, "role": {"r"}, "cwd": {"/tmp"}, "task": {"t"},
		"env": {"A=1", "B=2"}, "model": {"m"}, "effort": {"high"}, "permission": {"read-only"},
		"turn-timeout": {"45m"}, "lease": {"30m"}, "max-runtime": {"2h"}}
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
