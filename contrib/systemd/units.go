// Package systemd holds the systemd user units agent-fleet installs as
// templates, for `agent-fleet install` and for people installing them by
// hand: the intercom broker's socket and service (socket activation), the
// janitor's service and timer, and the node service of a host joined to
// others over NATS (install --node).
package systemd

import (
	"embed"
	"fmt"
	"strings"
	"unicode"
)

//go:embed agent-fleet-broker.socket agent-fleet-broker.service agent-fleet-cleanup.service agent-fleet-cleanup.timer agent-fleet-node.service
var files embed.FS

// The installed units.
const (
	// BrokerSocket listens on the broker socket and starts BrokerService on
	// the first connection.
	BrokerSocket  = "agent-fleet-broker.socket"
	BrokerService = "agent-fleet-broker.service"
	// CleanupTimer runs CleanupService, the janitor, every five minutes.
	CleanupService = "agent-fleet-cleanup.service"
	CleanupTimer   = "agent-fleet-cleanup.timer"
	// NodeService runs `agent-fleet node run`: the broker of this host
	// joined to the others over NATS, in place of BrokerSocket.
	NodeService = "agent-fleet-node.service"
)

// Names are the installed units' names, in the order they are written.
var Names = []string{BrokerSocket, BrokerService, CleanupService, CleanupTimer}

// NodeNames are the units install --node writes: Names and NodeService.
var NodeNames = append(append([]string(nil), Names...), NodeService)

// Enabled are the units that are enabled and started; the services are
// started by them.
var Enabled = []string{BrokerSocket, CleanupTimer}

// NodeEnabled are the units install --node enables and starts: the node
// serves the broker socket itself, so BrokerSocket stays disabled.
var NodeEnabled = []string{NodeService, CleanupTimer}

// Params fill the templates in.
type Params struct {
	// Binary is the absolute path of the agent-fleet executable.
	Binary string
	// AgentDir is the absolute agent directory the units serve.
	AgentDir string
	// BrokerSocket is the absolute path of that directory's broker socket
	// (intercom.Paths.BrokerSocket).
	BrokerSocket string
}

// Check refuses values no unit file can carry: relative paths and control
// characters (a newline would end the setting).
func (p Params) Check() error {
	for _, v := range []struct{ what, path string }{{"binary", p.Binary}, {"agent directory", p.AgentDir}, {"broker socket", p.BrokerSocket}} {
		if !strings.HasPrefix(v.path, "/") {
			return fmt.Errorf("%s %q is not an absolute path", v.what, v.path)
		}
		if strings.ContainsFunc(v.path, unicode.IsControl) {
			return fmt.Errorf("%s %q contains a control character, which a unit file cannot hold", v.what, v.path)
		}
	}
	return nil
}

// Render fills every template in, NodeNames (call Check first). Paths with spaces are
// quoted for systemd where the setting is split into words, and '%' is
// escaped everywhere (it starts a specifier).
func Render(p Params) map[string][]byte {
	r := strings.NewReplacer(
		"@BINARY@", word(p.Binary),
		"@AGENT_DIR@", escape(p.AgentDir),
		"@BROKER_SOCKET@", specifiers(p.BrokerSocket),
		"@BROKER_SOCKET_DESC@", specifiers(p.BrokerSocket),
	)
	out := map[string][]byte{}
	for _, name := range NodeNames {
		data, err := files.ReadFile(name)
		if err != nil {
			panic(err) // embedded above: cannot happen
		}
		out[name] = []byte(r.Replace(string(data)))
	}
	return out
}

// specifiers protects a value that systemd takes verbatim but for '%'
// specifiers (ListenStream=, Description=).
func specifiers(s string) string { return strings.ReplaceAll(s, "%", "%%") }

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

// Binary returns the executable an installed service file runs: the first
// word of its ExecStart=, unquoted and unescaped as Render wrote it. ok is
// false when the file has no ExecStart=.
func Binary(service []byte) (path string, ok bool) {
	for _, line := range strings.Split(string(service), "\n") {
		v, found := strings.CutPrefix(strings.TrimSpace(line), "ExecStart=")
		if !found {
			continue
		}
		quoted := strings.HasPrefix(v, `"`)
		if quoted {
			v = v[1:]
		}
		var b strings.Builder
	scan:
		for i := 0; i < len(v); i++ {
			c := v[i]
			switch {
			case c == '\\' && i+1 < len(v):
				i++
				b.WriteByte(v[i])
			case quoted && c == '"', !quoted && (c == ' ' || c == '\t'):
				break scan
			default:
				b.WriteByte(c)
			}
		}
		return strings.NewReplacer("%%", "%", "$$", "$").Replace(b.String()), true
	}
	return "", false
}
