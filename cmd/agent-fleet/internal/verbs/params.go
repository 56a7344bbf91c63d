package verbs

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// Param is one argument of the fleet verbs, declared once: its agent_fleet
// property (Name, Schema) and, for spawn's options, its CLI flag (Flag,
// Usage). Both surfaces set it through the same parser.
type Param struct {
	// Name is the agent_fleet property.
	Name string
	// Schema is the property's JSON schema (type, enum, limits,
	// description).
	Schema map[string]any
	// Actions are the actions that take it.
	Actions []string
	// Flag is the CLI flag of the actions that take it ("" when the CLI
	// gives it otherwise: the command after --, or a verb's own flags).
	Flag string
	// Usage is the flag's help; Default its default as help shows it.
	Usage, Default string
	// Usages, when set, is the help per action, where one flag means
	// something else to each (Flags puts it in Usage).
	Usages map[string]string
	// Repeatable flags are given once per value (--env K=V).
	Repeatable bool
	// FlagType names the flag's value type in help ("string", "duration").
	FlagType string
	// NoValue is what a flag given without "=value" sets ("": the flag
	// needs a value).
	NoValue string

	fromText func(a *Args, s string) error // a flag's value
	fromJSON func(a *Args, v any) error    // agent_fleet's decoded value
}

// SetFlag applies a CLI flag's value.
func (p *Param) SetFlag(a *Args, s string) error { return p.fromText(a, s) }

// SpawnFlags are the params that are spawn's CLI flags.
func SpawnFlags() []*Param { return Flags("spawn") }

// Flags are the params that are action's CLI flags.
func Flags(action string) []*Param {
	var out []*Param
	for _, p := range Params {
		if p.Flag != "" && slices.Contains(p.Actions, action) {
			if u, ok := p.Usages[action]; ok {
				c := *p
				c.Usage, p = u, &c
			}
			out = append(out, p)
		}
	}
	return out
}

// stringParam sets a string field.
func stringParam(p Param, field func(*Args) *string) *Param {
	p.fromText = func(a *Args, s string) error { *field(a) = s; return nil }
	p.fromJSON = func(a *Args, v any) error {
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("want a string, not %T", v)
		}
		return p.fromText(a, s)
	}
	return &p
}

// oneOfParam sets a string field to one of allowed.
func oneOfParam(p Param, allowed []string, field func(*Args) *string) *Param {
	q := stringParam(p, field)
	set := q.fromText
	q.fromText = func(a *Args, s string) error {
		if !slices.Contains(allowed, s) {
			return fmt.Errorf("%s must be one of %s, not %q", p.Name, strings.Join(allowed, ", "), s)
		}
		return set(a, s)
	}
	return q
}

// durationParam sets a duration field from a Go duration such as 30m (0
// is the default; negative ones are refused).
func durationParam(p Param, field func(*Args) *time.Duration) *Param {
	if p.FlagType == "" {
		p.FlagType = "duration"
	}
	label := p.Name
	if p.Flag != "" {
		label = strings.ReplaceAll(p.Flag, "-", " ")
	}
	p.fromText = func(a *Args, s string) error {
		d, err := ParseDuration(s)
		if err != nil || d < 0 {
			return fmt.Errorf("%s must be a duration such as 30m or 7d, not %q", label, s)
		}
		*field(a) = d
		return nil
	}
	p.fromJSON = func(a *Args, v any) error {
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("%s must be a duration string such as \"30m\"", label)
		}
		return p.fromText(a, s)
	}
	return &p
}

// boolParam sets a bool field (agent_fleet only: the CLI's flags for them
// are the verbs' own).
func boolParam(p Param, field func(*Args) *bool) *Param {
	p.fromJSON = func(a *Args, v any) error {
		b, ok := v.(bool)
		if !ok {
			return fmt.Errorf("want true or false, not %T", v)
		}
		*field(a) = b
		return nil
	}
	return &p
}

// flagBoolParam is boolParam with a CLI flag (--name alone means true).
func flagBoolParam(p Param, field func(*Args) *bool) *Param {
	q := boolParam(p, field)
	if q.NoValue == "" {
		q.NoValue = "true" // a bare --flag is true
	}
	q.fromText = func(a *Args, s string) error {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%s must be true or false, not %q", p.Flag, s)
		}
		*field(a) = b
		return nil
	}
	return q
}

func profileNames() []string {
	out := []string{}
	for _, p := range fleet.Profiles {
		out = append(out, string(p))
	}
	return out
}

// spawnFlag makes p one of spawn's options and CLI flags.
func spawnFlag(p Param, flag, usage string) Param {
	p.Actions, p.Flag, p.Usage = []string{"spawn"}, flag, usage
	if p.FlagType == "" {
		p.FlagType = "string"
	}
	return p
}

// budgetUSDParam sets Args.Budget.USD: a positive amount of US dollars
// ("2.50", "$2.50").
func budgetUSDParam(p Param) *Param {
	p.FlagType = "float"
	p.fromText = func(a *Args, s string) error {
		v, err := strconv.ParseFloat(strings.TrimPrefix(strings.TrimSpace(s), "$"), 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return fmt.Errorf("budget usd must be a positive amount of US dollars such as 2.50, not %q", s)
		}
		a.Budget.USD = &v
		return nil
	}
	p.fromJSON = func(a *Args, v any) error {
		f, ok := v.(float64)
		if !ok || !(f > 0) || math.IsInf(f, 0) {
			return fmt.Errorf("want a positive number of US dollars")
		}
		a.Budget.USD = &f
		return nil
	}
	return &p
}

// budgetTokensParam sets Args.Budget.Tokens: a positive whole number, on
// the CLI also with a k or M suffix ("500k", "2M").
func budgetTokensParam(p Param) *Param {
	p.FlagType = "count"
	p.fromText = func(a *Args, s string) error {
		t, mult := strings.TrimSpace(s), 1.0
		switch {
		case strings.HasSuffix(t, "k"), strings.HasSuffix(t, "K"):
			t, mult = t[:len(t)-1], 1e3
		case strings.HasSuffix(t, "M"):
			t, mult = t[:len(t)-1], 1e6
		}
		f, err := strconv.ParseFloat(t, 64)
		n := f * mult
		if err != nil || n < 1 || n != math.Trunc(n) || n > math.MaxInt64/2 {
			return fmt.Errorf("budget tokens must be a positive whole number such as 500000 or 500k, not %q", s)
		}
		v := int64(n)
		a.Budget.Tokens = &v
		return nil
	}
	p.fromJSON = func(a *Args, v any) error {
		f, ok := v.(float64)
		if !ok || f < 1 || f != math.Trunc(f) || f > math.MaxInt64/2 {
			return fmt.Errorf("want a positive whole number of tokens")
		}
		n := int64(f)
		a.Budget.Tokens = &n
		return nil
	}
	return &p
}

// limitParam sets one of Args.Spawn.Limits through set (a fleet parser,
// whose ErrInvalidLimit error says what it takes); agent_fleet gives it
// as a string, or tasks as a number.
func limitParam(p Param, set func(a *Args, s string) error) *Param {
	p.fromText = set
	p.fromJSON = func(a *Args, v any) error {
		switch v := v.(type) {
		case string:
			return set(a, v)
		case float64:
			return set(a, strconv.FormatFloat(v, 'f', -1, 64))
		}
		return fmt.Errorf("want a string such as \"512M\", \"50%%\" or \"256\"")
	}
	return &p
}

// sinceParam sets Args.Since: a duration back from now (a Go duration, or
// whole days: "24h", "7d") or a time (RFC 3339, or a local date
// 2026-12-01).
func sinceParam(p Param) *Param {
	p.FlagType = "duration|time"
	p.fromText = func(a *Args, s string) error {
		t, err := ParseSince(s, time.Now())
		if err != nil {
			return err
		}
		a.Since = t
		return nil
	}
	p.fromJSON = func(a *Args, v any) error {
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("want a string: a duration such as \"24h\" or a time")
		}
		return p.fromText(a, s)
	}
	return &p
}

// ParseDuration reads a Go duration ("90m", "36h") or whole days ("7d",
// 24 h each), as the since filters take them.
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if days, ok := strings.CutSuffix(t, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 || n > 100_000 {
			return 0, fmt.Errorf("%q is not a whole number of days", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(t)
}

// DurationValue is a flag value (a pflag.Value, without this engine
// importing the flag package) of a duration as ParseDuration reads it.
func DurationValue(d *time.Duration) *Duration { return (*Duration)(d) }

// Duration is a duration flag that takes whole days too (DurationValue).
type Duration time.Duration

func (v *Duration) String() string { return time.Duration(*v).String() }
func (v *Duration) Type() string   { return "duration" }
func (v *Duration) Set(s string) error {
	d, err := ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as 168h or 7d: %w", err)
	}
	*v = Duration(d)
	return nil
}

// ParseSince reads a usage report's start: a duration back from now (a Go
// duration, or whole days, "7d") or a time (RFC 3339, or a date in now's
// location, meaning its midnight). A start in the future is refused.
func ParseSince(s string, now time.Time) (time.Time, error) {
	bad := fmt.Errorf("since must be a duration such as 24h or 7d, or a time such as 2026-12-01 or 2026-12-01T10:00:00Z, not %q", s)
	t := strings.TrimSpace(s)
	if days, ok := strings.CutSuffix(t, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 {
			return time.Time{}, bad
		}
		return now.AddDate(0, 0, -n), nil
	}
	if d, err := time.ParseDuration(t); err == nil {
		if d < 0 {
			return time.Time{}, bad
		}
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02"} {
		if at, err := time.ParseInLocation(layout, t, now.Location()); err == nil {
			if at.After(now) {
				return time.Time{}, fmt.Errorf("since %q is in the future", s)
			}
			return at, nil
		}
	}
	return time.Time{}, bad
}

func props(kv ...any) map[string]any {
	m := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

// DefaultWorktreeBranch is what --worktree given alone stands for: a new
// branch agent-fleet/<id>, as help shows it (a branch of that literal
// name would need quoting in every shell: nobody asks for it by accident).
const DefaultWorktreeBranch = "agent-fleet/<id>"

// Params are every fleet verb's arguments besides action.
var Params = []*Param{
	stringParam(Param{Name: "id", Actions: takesID, Flag: "id", FlagType: "string",
		Usage:  "worker id (required): letters, digits, _ and -, at most 64",
		Schema: props("type", "string", "pattern", intercom.SessionIDPattern, "description", "worker id (spawn, status, stop, wait, logs, adopt, forget; renew: omit for all yours; stop and wait: or ids; stop: or all)")},
		func(a *Args) *string { return &a.ID }),
	stringParam(spawnFlag(Param{Name: "kind", Default: "exec",
		Schema: props("type", "string", "enum", []any{"exec", "claude", "codex", "opencode", "pi"}, "description", "worker kind (default exec): exec runs command; claude, codex, opencode and pi run that coding agent as a coworker — a turn for task, then one per batch of intercom messages it gets; each turn's final answer reaches you")},
		"kind", "worker kind: exec, claude, codex, opencode or pi"), func(a *Args) *string { return &a.Spawn.Kind }),
	stringParam(spawnFlag(Param{Name: "role", Schema: props("type", "string", "maxLength", 64, "description", "the worker's role (builder, reviewer, …)")},
		"role", "the worker's role (builder, reviewer, …)"), func(a *Args) *string { return &a.Spawn.Role }),
	stringParam(spawnFlag(Param{Name: "cwd", Schema: props("type", "string", "description", "working directory (default: this session's)")},
		"cwd", "working directory (default: the current one)"), func(a *Args) *string { return &a.Spawn.Cwd }),
	stringParam(spawnFlag(Param{Name: "task", Schema: props("type", "string", "maxLength", 8000, "description", "the task (a coding agent's first turn)")},
		"task", "the task the worker was spawned for (a coding agent's first turn)"), func(a *Args) *string { return &a.Spawn.Task }),
	{Name: "command", Actions: []string{"spawn"},
		Schema: props("type", "array", "items", props("type", "string"), "minItems", 1, "description", "argv of an exec worker (argv[0] is looked up on PATH); for a coding-agent kind, the harness executable to use (and arguments put before every turn's), default the installed one"),
		fromJSON: func(a *Args, v any) error {
			list, ok := v.([]any)
			if !ok {
				return fmt.Errorf("want an array of strings")
			}
			a.Spawn.Command = nil
			for _, e := range list {
				s, ok := e.(string)
				if !ok {
					return fmt.Errorf("want an array of strings")
				}
				a.Spawn.Command = append(a.Spawn.Command, s)
			}
			return nil
		}},
	{Name: "env", Actions: []string{"spawn"}, Flag: "env", Repeatable: true, FlagType: "stringArray",
		Usage:    "extra environment NAME=value (repeatable; values are not recorded)",
		Schema:   props("type", "object", "additionalProperties", props("type", "string"), "description", "extra environment; values are never recorded"),
		fromText: func(a *Args, s string) error { a.Spawn.Env = append(a.Spawn.Env, s); return nil },
		fromJSON: func(a *Args, v any) error {
			m, ok := v.(map[string]any)
			if !ok {
				return fmt.Errorf("want an object of strings")
			}
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				s, ok := m[k].(string)
				if !ok {
					return fmt.Errorf("env %s: want a string", k)
				}
				a.Spawn.Env = append(a.Spawn.Env, k+"="+s)
			}
			return nil
		}},
	stringParam(spawnFlag(Param{Name: "model", Schema: props("type", "string", "description", "coding agents: the harness's model")},
		"model", "model (coding-agent kinds)"), func(a *Args) *string { return &a.Spawn.Model }),
	stringParam(spawnFlag(Param{Name: "effort", Schema: props("type", "string", "description", "coding agents: reasoning effort (claude low…max, codex low…xhigh, pi off…max, opencode a variant)")},
		"effort", "reasoning effort (claude: low…max; codex: low…xhigh; pi: off…max; opencode: a model variant)"), func(a *Args) *string { return &a.Spawn.Effort }),
	stringParam(spawnFlag(Param{Name: "permission",
		Schema: props("type", "string", "enum", anys(append([]string{""}, harness.PermissionValues()...)), "description", "coding agents: read-only, workspace-write or full (default: the harness's own configuration); claude also takes its own permission modes, codex danger-full-access")},
		"permission", "permission mode (coding-agent kinds): read-only, workspace-write or full; default: the harness's own configuration"), func(a *Args) *string { return &a.Spawn.Permission }),
	oneOfParam(spawnFlag(Param{Name: "profile",
		Schema: props("type", "string", "enum", anys(profileNames()), "description", "sandbox: trusted (the user's full rights), workspace (writes only to cwd and the harness's own state; credentials, agent sockets and the user bus hidden), readonly (workspace with cwd read-only too). Default: workspace for coding agents, readonly for read-only ones, trusted for exec. A profile this host cannot enforce fails unless allowDegraded")},
		"profile", "sandbox: trusted, workspace or readonly (default: workspace for coding agents, readonly for --permission read-only, trusted for exec)"),
		profileNames(), func(a *Args) *string { return &a.Spawn.Profile }),
	flagBoolParam(spawnFlag(Param{Name: "allowDegraded", FlagType: "bool",
		Schema: props("type", "boolean", "description", "spawn: run a named profile without the properties this user manager cannot enforce (status reports what is missing) instead of failing")},
		"allow-degraded", "run --profile without what this user manager cannot enforce (status says what) instead of failing"),
		func(a *Args) *bool { return &a.Spawn.AllowDegraded }),
	durationParam(spawnFlag(Param{Name: "turnTimeout", FlagType: "duration",
		Schema: props("type", "string", "description", "coding agents: end a turn after this long, a Go duration (default 2h)")},
		"turn-timeout", "end a coding agent's turn after this long (default 2h)"), func(a *Args) *time.Duration { return &a.Spawn.TurnTimeout }),
	durationParam(spawnFlag(Param{Name: "permissionWait", FlagType: "duration",
		Schema: props("type", "string", "description", "claude workers (and codex with workspace-write): how long a permission prompt, sent to you as an ask (reply allow, deny or always), waits for your answer before it is denied, a Go duration (default 5m, at most 10m)")},
		"permission-wait", "claude (and workspace-write codex) workers: wait this long for your answer to a permission prompt before denying it (default 5m, at most 10m)"), func(a *Args) *time.Duration { return &a.Spawn.PermissionWait }),
	durationParam(spawnFlag(Param{Name: "lease", FlagType: "duration",
		Schema: props("type", "string", "description", "idle lease as a Go duration, e.g. 30m (absent or 0: none for a person, the fleet default for agents)")},
		"lease", "idle lease (unset or 0: none for a person, the fleet default for agents)"), func(a *Args) *time.Duration { return &a.Spawn.Lease }),
	durationParam(spawnFlag(Param{Name: "maxRuntime", FlagType: "duration",
		Schema: props("type", "string", "description", "stop the worker after this long, a Go duration (default: no limit)")},
		"max-runtime", "stop the worker after this long (0 = no limit)"), func(a *Args) *time.Duration { return &a.Spawn.MaxRuntime }),
	limitParam(spawnFlag(Param{Name: "memory", FlagType: "size",
		Schema: props("type", "string", "description", "MemoryMax= of the worker's unit: a size such as \"512M\" or \"2G\" (powers of 1024); past it the OOM killer ends the worker, and status says so")},
		"memory", "memory limit (MemoryMax=): 512M, 2G; past it the OOM killer ends the worker"),
		func(a *Args, s string) error {
			n, err := fleet.ParseMemoryLimit(s)
			a.Spawn.Limits.MemoryMax = n
			return err
		}),
	limitParam(spawnFlag(Param{Name: "cpu", FlagType: "percent",
		Schema: props("type", "string", "description", "CPUQuota= of the worker's unit: a percentage of one CPU, \"50%\" (half a CPU) or \"200%\" (two)")},
		"cpu", "CPU quota (CPUQuota=) in percent of one CPU: 50%, 200%"),
		func(a *Args, s string) error {
			n, err := fleet.ParseCPUQuota(s)
			a.Spawn.Limits.CPUQuotaPercent = n
			return err
		}),
	limitParam(spawnFlag(Param{Name: "tasks", FlagType: "count",
		Schema: props("type", "integer", "minimum", fleet.MinTasksLimit, "description", "TasksMax= of the worker's unit: at most this many processes and threads, e.g. 256")},
		"tasks", "task limit (TasksMax=): processes and threads, at least 20"),
		func(a *Args, s string) error {
			n, err := fleet.ParseTasksLimit(s)
			a.Spawn.Limits.TasksMax = n
			return err
		}),
	budgetUSDParam(Param{Name: "budgetUsd", Actions: []string{"spawn", "renew"}, Flag: "budget-usd",
		Usage:  "coding agents: start no turn once the turns cost this many US dollars, as the harness reports cost (renew: the new budget)",
		Schema: props("type", "number", "exclusiveMinimum", 0, "description", "coding agents: start no turn once the turns cost this many US dollars (as the harness reports cost; not codex, which reports none); renew: the new budget, and a batch kept for a spent budget then runs")}),
	budgetTokensParam(Param{Name: "budgetTokens", Actions: []string{"spawn", "renew"}, Flag: "budget-tokens",
		Usage:  "coding agents: start no turn once the turns used this many tokens, cache included (500k, 2M; renew: the new budget)",
		Schema: props("type", "integer", "minimum", 1, "description", "coding agents: start no turn once the turns used this many tokens (input, output and cache, as the harness reports them); renew: the new budget")}),
	sinceParam(Param{Name: "since", Actions: []string{"usage", "logs"}, Flag: "since",
		Usages: map[string]string{
			"usage": "only turns that ended since then: a duration back (24h, 7d) or a time (2026-12-01, RFC 3339); default: all",
			"logs":  "only lines written since then: a duration back (10m, 24h) or a time (2026-12-01, RFC 3339); without -n, every one of them",
		},
		Schema: props("type", "string", "description", "usage: only turns that ended since then; logs: only lines written since then. A duration back from now (\"24h\", \"7d\", \"10m\") or a time (\"2026-12-01\", RFC 3339); default: every one")}),
	oneOfParam(Param{Name: "by", Actions: []string{"usage"}, Flag: "by", FlagType: "string", Default: "worker",
		Usage:  "group by worker, manager or kind",
		Schema: props("type", "string", "enum", anys(fleet.UsageBy), "description", "usage: group the totals by worker (default), manager or kind")},
		fleet.UsageBy, func(a *Args) *string { return &a.By }),
	{Name: "worktree", Actions: []string{"spawn"}, Flag: "worktree", FlagType: "branch", NoValue: DefaultWorktreeBranch,
		Usage: "work in a git worktree of its own, made from the HEAD of the repository --cwd is in, on BRANCH " +
			"(checked out if it exists, else created from HEAD; default a new agent-fleet/<id>)",
		Schema: props("type", "boolean", "description", "work in a git worktree of its own, made from HEAD of the repository cwd is in, on a new branch agent-fleet/<id> (or branch); it becomes the worker's cwd, and forget/prune remove it only once its work is committed and merged or pushed"),
		fromText: func(a *Args, s string) error {
			a.Spawn.Worktree = true
			if s != DefaultWorktreeBranch {
				a.Spawn.Branch = s
			}
			return nil
		},
		fromJSON: func(a *Args, v any) error {
			b, ok := v.(bool)
			if !ok {
				return fmt.Errorf("want true or false")
			}
			a.Spawn.Worktree = b
			return nil
		}},
	stringParam(Param{Name: "branch", Actions: []string{"spawn"},
		Schema: props("type", "string", "description", "the worktree's branch (implies worktree): checked out if it exists and no other worktree has it, else created from HEAD; default agent-fleet/<id>")},
		func(a *Args) *string { return &a.Spawn.Branch }),
	stringParam(Param{Name: "host", Actions: RemoteActions, Flag: "host", FlagType: "string",
		Usage:  "run it on that host (its node name) of the hosts this one is joined to",
		Schema: props("type", "string", "pattern", "^[a-z0-9][a-z0-9-]{0,62}$", "description", "spawn, status, stop, logs, adopt, wait: on that host (its node name) of the hosts this one is joined to over NATS; you stay the manager. Default: this host (and for an id this host does not know, the host whose records have it)")},
		func(a *Args) *string { return &a.Host }),
	{Name: "ids", Actions: []string{"stop", "wait"},
		Schema: props("type", "array", "items", props("type", "string", "pattern", intercom.SessionIDPattern), "minItems", 1,
			"description", "stop: several workers at once (instead of id), each reported; wait: the workers to wait for"),
		fromJSON: func(a *Args, v any) error {
			list, ok := v.([]any)
			if !ok {
				return fmt.Errorf("want an array of worker ids")
			}
			a.IDs = nil
			for _, e := range list {
				s, ok := e.(string)
				if !ok || s == "" {
					return fmt.Errorf("want an array of worker ids")
				}
				a.IDs = append(a.IDs, s)
			}
			return nil
		}},
	boolParam(Param{Name: "all", Actions: []string{"list", "adopt", "prune", "stop"},
		Schema: props("type", "boolean", "description", "list: every manager's workers; adopt: every orphan (live workers of disconnected agent managers whose lease expired); prune: every manager's records; stop: every live worker of yours")},
		func(a *Args) *bool { return &a.All }),
	durationParam(Param{Name: "timeout", Actions: []string{"stop", "wait"},
		Schema: props("type", "string", "description", fmt.Sprintf("stop: how long a worker has between SIGTERM and SIGKILL, a Go duration (default 10s); wait: how long to wait (default %s; call again to wait longer)", ToolWaitTimeout))},
		func(a *Args) *time.Duration { return &a.Timeout }),
	boolParam(Param{Name: "any", Actions: []string{"wait"},
		Schema: props("type", "boolean", "description", "wait: return once one of the workers has ended, not all")},
		func(a *Args) *bool { return &a.Any }),
	boolParam(Param{Name: "kill", Actions: []string{"stop"},
		Schema: props("type", "boolean", "description", "stop: SIGKILL at once, without SIGTERM first")},
		func(a *Args) *bool { return &a.Kill }),
	boolParam(Param{Name: "force", Actions: []string{"adopt"},
		Schema: props("type", "boolean", "description", "adopt even though the worker's manager is connected")},
		func(a *Args) *bool { return &a.Force }),
	boolParam(Param{Name: "acknowledge", Actions: []string{"forget", "prune"},
		Schema: props("type", "boolean", "description", "forget/prune delete history: must be true")},
		func(a *Args) *bool { return &a.Acknowledge }),
	durationParam(Param{Name: "olderThan", Actions: []string{"prune"},
		Schema: props("type", "string", "description", "prune: only workers that ended longer ago than this Go duration (default: every ended worker)")},
		func(a *Args) *time.Duration { return &a.OlderThan }),
	boolParam(Param{Name: "execute", Actions: []string{"cleanup"},
		Schema: props("type", "boolean", "description", "cleanup: act instead of previewing")},
		func(a *Args) *bool { return &a.Execute }),
	boolParam(Param{Name: "timestamps", Actions: []string{"logs"},
		Schema: props("type", "boolean", "description", "logs: give each line the time it was written (\"times\", RFC 3339, \"\" when unknown)")},
		func(a *Args) *bool { return &a.Timestamps }),
	{Name: "lines", Actions: []string{"logs"},
		Schema: props("type", "integer", "minimum", 1, "maximum", 500, "description", fmt.Sprintf("log lines (default %d)", DefaultLogLines)),
		fromJSON: func(a *Args, v any) error {
			f, ok := v.(float64)
			if !ok || f != math.Trunc(f) {
				return fmt.Errorf("want a whole number")
			}
			a.Lines = int(f)
			return nil
		}},
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// Schema is agent_fleet's input schema: action plus Params, strict.
func Schema() map[string]any {
	properties := map[string]any{"action": props("type", "string", "enum", anys(Actions))}
	for _, p := range Params {
		properties[p.Name] = p.Schema
	}
	return map[string]any{"type": "object", "additionalProperties": false, "required": []any{"action"}, "properties": properties}
}

// Decode turns agent_fleet's decoded arguments into Args. An argument its
// action would ignore is refused (it must not look applied), as is one of
// the wrong type. Errors are usage errors.
func Decode(m map[string]any) (Args, error) {
	var a Args
	a.Action, _ = m["action"].(string)
	if !slices.Contains(Actions, a.Action) {
		return a, factory.Usagef("unknown action %q (one of %s)", a.Action, strings.Join(Actions, ", "))
	}
	for _, p := range Params {
		v, given := m[p.Name]
		if !given || isEmpty(v) {
			continue
		}
		if !slices.Contains(p.Actions, a.Action) {
			return a, factory.Usagef("agent_fleet %s does not take %s: leave it out (it would be ignored).", a.Action, p.Name)
		}
		if err := p.fromJSON(&a, v); err != nil {
			return a, factory.Usagef("agent_fleet %s: %s: %v", a.Action, p.Name, err)
		}
	}
	for k := range m {
		if k != "action" && !slices.ContainsFunc(Params, func(p *Param) bool { return p.Name == k }) {
			return a, factory.Usagef("agent_fleet has no argument %q", k)
		}
	}
	return a, nil
}

// isEmpty: a value that gives nothing ("", false, 0, [], {}) is as if not
// given, as the tool's omitempty arguments always were.
func isEmpty(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case string:
		return v == ""
	case bool:
		return !v
	case float64:
		return v == 0
	case []any:
		return len(v) == 0
	case map[string]any:
		return len(v) == 0
	}
	return false
}
