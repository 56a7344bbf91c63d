// Package teams answers "who is my team": intercom_team resolution (fleet
// registry → TmuxDeck manifest → same-scope live roster → standalone, spec
// §7), named teams with private scopes (§7.2), the Boss
// team-only contract (§7.3) and read-only inbox inspection by a manager
// (§7.4). The orchestrator/workers.json view the TypeScript adapters read
// is fleet's, kept beside the registry it mirrors.
//
// teams imports only intercom and manifest. The fleet registry reaches it
// through the Registry interface, which cmd implements.
package teams

import (
	"fmt"
	"os"
	"strings"
)

// Source is where a team came from (spec §7.5).
type Source string

const (
	SourceOrchestrator Source = "orchestrator" // the fleet registry (or Boss metadata)
	SourceManifest     Source = "manifest"     // a TmuxDeck manifest
	SourceLiveRoster   Source = "live_roster"  // the same-scope live sessions
	SourceStandalone   Source = "standalone"   // no team
)

// describeSource says in words where t came from. An orchestrator team
// not read from the fleet registry by this process is a Boss run's.
func (t *Team) describeSource() string {
	switch t.Source {
	case SourceOrchestrator:
		if !t.fromRegistry {
			return "a Boss run's metadata, not the fleet registry's"
		}
		return "the fleet registry's"
	case SourceManifest:
		return "a TmuxDeck manifest's"
	case SourceLiveRoster:
		return "the sessions live in your scope"
	case SourceStandalone:
		return "none"
	}
	return string(t.Source)
}

// Team is a session's team as intercom_team reports it: the text of Format
// and, as structuredContent, this value's JSON (spec §7.5).
type Team struct {
	Source     Source    `json:"source"`
	TeamID     string    `json:"teamId,omitempty"`
	Self       Self      `json:"self"`
	Manager    *Endpoint `json:"manager,omitempty"`
	Controller *Endpoint `json:"controller,omitempty"`
	Coworkers  []Member  `json:"coworkers"`

	// fromRegistry marks a team resolved from the fleet registry: the only
	// kind whose manager may inspect a coworker's inbox (§7.4). It never
	// leaves the process that resolved the team.
	fromRegistry bool
}

// Self is the caller within its team.
type Self struct {
	ID        string `json:"id"`
	WorkerID  string `json:"workerId,omitempty"`
	IsManager bool   `json:"isManager"`
	Role      string `json:"role,omitempty"`
}

// Endpoint is a manager or controller target and whether it is connected.
type Endpoint struct {
	Target    string `json:"target"`
	Connected bool   `json:"connected"`
}

// Member is one coworker. Target is what to send to.
type Member struct {
	ID        string `json:"id"`
	Target    string `json:"target"`
	Harness   string `json:"harness,omitempty"`
	Role      string `json:"role,omitempty"`
	State     string `json:"state,omitempty"`
	Connected bool   `json:"connected"`
}

// FromRegistry reports whether the team was resolved from the fleet
// registry in this process.
func (t *Team) FromRegistry() bool { return t.fromRegistry }

// Format renders a team as the adapters' intercom_team text (spec §7.5).
func Format(t *Team) string {
	manager := "unknown"
	if t.Manager != nil {
		manager = t.Manager.Target + " " + connectedTag(t.Manager.Connected)
	}
	lines := []string{"Manager: " + manager}
	you := "You: " + t.Self.ID
	if t.Self.IsManager {
		you += " [manager]"
	}
	lines = append(lines, you)
	if t.Controller != nil {
		lines = append(lines, "Controller: "+t.Controller.Target+" [connected]")
	}
	if len(t.Coworkers) == 0 {
		lines = append(lines, "Coworkers: none")
	} else {
		lines = append(lines, "Coworkers:")
		for _, c := range t.Coworkers {
			var meta []string
			for _, v := range []string{c.Harness, c.Role, c.State} {
				if v != "" {
					meta = append(meta, v)
				}
			}
			line := fmt.Sprintf("- %s target=%s", c.ID, c.Target)
			if len(meta) > 0 {
				line += " (" + strings.Join(meta, ", ") + ")"
			}
			lines = append(lines, line+" "+connectedTag(c.Connected))
		}
	}
	return strings.Join(lines, "\n")
}

func connectedTag(ok bool) string {
	if ok {
		return "[connected]"
	}
	return "[not connected]"
}

// Environment variables team resolution reads (spec Appendix B). They are
// the same names fleet sets on workers; teams does not import fleet.
const (
	EnvWorkerID      = "AGENT_INTERCOM_WORKER_ID"
	EnvRunID         = "AGENT_INTERCOM_RUN_ID"
	EnvOwned         = "AGENT_INTERCOM_OWNED"
	EnvManagerTarget = "AGENT_INTERCOM_MANAGER_TARGET"
	EnvManagerID     = "AGENT_INTERCOM_MANAGER_SESSION_ID"
	EnvScope         = "AGENT_INTERCOM_SCOPE_ID"
	EnvManifest      = "AGENT_INTERCOM_TEAM_MANIFEST"
)

// Env is the environment teams reads, and a scope switch writes (so that
// what the process starts afterwards inherits the team).
type Env interface {
	LookupEnv(key string) (string, bool)
	Setenv(key, value string) error
}

// ProcessEnv is the process environment.
var ProcessEnv Env = processEnv{}

type processEnv struct{}

func (processEnv) LookupEnv(k string) (string, bool) { return os.LookupEnv(k) }
func (processEnv) Setenv(k, v string) error          { return os.Setenv(k, v) }

// MapEnv is an Env over a map (tests; the environment of a command run
// inside a team). Not safe for concurrent writes.
type MapEnv map[string]string

func (m MapEnv) LookupEnv(k string) (string, bool) { v, ok := m[k]; return v, ok }
func (m MapEnv) Setenv(k, v string) error          { m[k] = v; return nil }

// getenv is the value of k, "" when unset.
func getenv(e Env, k string) string {
	v, _ := e.LookupEnv(k)
	return v
}

// trimmed is the value of k with surrounding blanks removed ("" when unset
// or blank), as the adapters' stringValue reads it.
func trimmed(e Env, k string) string { return strings.TrimSpace(getenv(e, k)) }
