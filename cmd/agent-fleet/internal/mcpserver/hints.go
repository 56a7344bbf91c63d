package mcpserver

import "regexp"

// toolHints rewrites the CLI commands and flags that fleet and team errors
// suggest ("adopt it first (agent-fleet adopt w1)", "--acknowledge") into
// the tool call or argument that does the same, for an agent with no
// shell, and says plainly when only the CLI can; what it does not know
// stays as it is. structuredContent keeps the CLI's text
// (json_contract_test.go).
func toolHints(text string) string {
	for _, h := range cliHints {
		text = h.re.ReplaceAllString(text, h.to)
	}
	return text
}

var cliHints = []struct {
	re *regexp.Regexp
	to string
}{
	{regexp.MustCompile(`agent-fleet forget ([\w.-]+) --acknowledge`), `agent_fleet {action: "forget", id: "$1", acknowledge: true}`},
	{regexp.MustCompile(`agent-fleet prune --all --acknowledge`), `agent_fleet {action: "prune", all: true, acknowledge: true}`},
	{regexp.MustCompile(`agent-fleet list --all`), `agent_fleet {action: "list", all: true}`},
	{regexp.MustCompile(`agent-fleet (adopt|resume|stop|renew|status|logs) ([\w.-]+)`), `agent_fleet {action: "$1", id: "$2"}`},
	{regexp.MustCompile(`adopt with --force`), `adopt with force: true`},
	{regexp.MustCompile(`confirm with --acknowledge \(agent_fleet: acknowledge: true\)`), `confirm with acknowledge: true`},
	{regexp.MustCompile(`needs --acknowledge`), `needs acknowledge: true`},
	{regexp.MustCompile(`stop --kill sends`), `stop with kill: true sends`},
	{regexp.MustCompile(`--(memory|cpu|tasks) needs`), `$1 needs`},
	{regexp.MustCompile(`agent-fleet doctor (shows|says)`), `agent_fleet {action: "doctor"} $1`},
	{regexp.MustCompile(`or name its executable after -- \(agent-fleet spawn --kind ([\w-]+) … -- (\S+)\)`),
		`or name its executable in command (agent_fleet {action: "spawn", kind: "$1", command: ["$2"], …})`},
	// Teams: intercom_team and intercom_join do what the teams verbs do,
	// except delete, and leaving a team a session was started in.
	{regexp.MustCompile(`\(agent-fleet teams list shows yours\)`), `(intercom_team lists yours)`},
	{regexp.MustCompile(`\(agent-fleet teams join NAME\)`), `(join one with intercom_join {name: "…"})`},
	{regexp.MustCompile(`\(--team, or team in the tool\)`), `(pass team)`},
	{regexp.MustCompile(`as agent-fleet team \(intercom_team\) lists it`), `as intercom_team lists it`},
	{regexp.MustCompile(`delete the team instead \(agent-fleet teams delete ([\w-]+)\)`),
		`delete the team instead, which no tool does: only the CLI can (agent-fleet teams delete $1)`},
	{regexp.MustCompile(`end it, then leave \(agent-fleet teams leave ([\w-]+)\)`),
		`only the CLI can make it leave once the session has ended (agent-fleet teams leave $1)`},
}
