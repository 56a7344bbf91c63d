// Package systemd holds the systemd user units agent-fleet installs (the
// janitor's service and timer) as templates, for `agent-fleet install` and
// for people installing them by hand.
package systemd

import (
	"embed"
	"strings"
)

//go:embed agent-fleet-cleanup.service agent-fleet-cleanup.timer
var files embed.FS

// Janitor units, in the order they are written and enabled.
const (
	CleanupService = "agent-fleet-cleanup.service"
	CleanupTimer   = "agent-fleet-cleanup.timer"
)

// Names are the installed units' names.
var Names = []string{CleanupService, CleanupTimer}

// Render fills the templates in: binary is the absolute path of the
// agent-fleet executable, agentDir the absolute agent directory the janitor
// works on. Paths with spaces are quoted for systemd.
func Render(binary, agentDir string) map[string][]byte {
	r := strings.NewReplacer("@BINARY@", word(binary), "@AGENT_DIR@", escape(agentDir))
	out := map[string][]byte{}
	for _, name := range Names {
		data, err := files.ReadFile(name)
		if err != nil {
			panic(err) // embedded above: cannot happen
		}
		out[name] = []byte(r.Replace(string(data)))
	}
	return out
}

// escape protects a value inside a quoted systemd string: '\\', '"', and
// '%' (a specifier).
func escape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "%", "%%").Replace(s)
}

// word makes a path one word of ExecStart= (where '$' expands too).
func word(s string) string {
	s = strings.ReplaceAll(escape(s), "$", "$$")
	if strings.ContainsAny(s, " \t") {
		return `"` + s + `"`
	}
	return s
}
