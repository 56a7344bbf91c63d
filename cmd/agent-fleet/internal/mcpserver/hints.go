package mcpserver

import "regexp"

// toolHints rewrites the CLI commands that fleet errors suggest ("adopt it
// first (agent-fleet adopt w1)") into the agent_fleet call that does the
// same, for an agent with no shell; what it does not know stays as it is.
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
}
