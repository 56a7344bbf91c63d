package teams

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// Boss is the Pi Boss team contract (spec §7.3): six trusted-local
// variables that put a session in a four-role Boss team. Any of them set
// activates it; any defect makes it a deny-all scope. In team-only mode
// (the default) the session reaches exactly its live canonical teammates by
// exact id — no names, prefixes or case folding — inbound messages from
// anyone else are rejected before they touch the inbox, the outbox is not
// replayed and listing is disabled; local visibility widens discovery, but
// sends still need exact live ids. The Pi readiness control handshake is
// not implemented, so lower roles cannot reach the controller at all.
type Boss struct {
	// Present: at least one of the six variables is set.
	Present bool
	// Valid: the contract is complete and consistent; else Reason says why.
	Valid  bool
	Reason string
	// Restricted: team-only visibility, or an invalid contract (deny-all).
	Restricted bool

	RunID            string   // boss-<lowercase uuid>
	RunSuffix        string   // its last 12 characters
	Role             string   // manager, worker, scout or adversary
	ControllerTarget string   // the Boss controller's exact session id
	ManagerTarget    string   // boss-manager-<suffix>
	TeamTargets      []string // boss-{manager,worker,scout,adversary}-<suffix>
	SelfTarget       string   // boss-<role>-<suffix>: the id this session must have
	Visibility       string   // team-only or local
}

// The Boss variables.
const (
	EnvBossRunID      = "AGENT_INTERCOM_BOSS_RUN_ID"
	EnvBossRole       = "AGENT_INTERCOM_BOSS_ROLE"
	EnvBossController = "AGENT_INTERCOM_BOSS_CONTROLLER_TARGET"
	EnvBossManager    = "AGENT_INTERCOM_BOSS_MANAGER_TARGET"
	EnvBossTeam       = "AGENT_INTERCOM_BOSS_TEAM_TARGETS"
	EnvBossVisibility = "AGENT_INTERCOM_BOSS_VISIBILITY"
)

// BossEnvNames are the six variables of the contract.
var BossEnvNames = []string{EnvBossRunID, EnvBossRole, EnvBossController, EnvBossManager, EnvBossTeam, EnvBossVisibility}

// Boss error codes (spec §3.3, client-side tool codes).
const (
	BossMetadataInvalid    = "BOSS_TEAM_METADATA_INVALID"
	BossScopeDenied        = "BOSS_TEAM_SCOPE_DENIED"
	BossTargetNotConnected = "BOSS_TEAM_TARGET_NOT_CONNECTED"
)

// BossError is a Boss refusal; errors.Is(err, ErrBossDenied) holds, and
// for BossTargetNotConnected errors.Is(err, intercom.ErrTargetNotFound)
// too: a target that is not connected is not found (exit 3), Boss or not.
type BossError struct {
	Code    string
	Message string
}

func (e *BossError) Error() string     { return e.Code + ": " + e.Message }
func (e *BossError) ErrorCode() string { return e.Code }
func (e *BossError) Is(target error) bool {
	return target == ErrBossDenied || target == intercom.ErrTargetNotFound && e.Code == BossTargetNotConnected
}

var (
	bossRunIDRe = regexp.MustCompile(`^boss-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	bossRoles   = []string{"manager", "worker", "scout", "adversary"}
)

// ReadBoss reads the contract from env, all or nothing.
func ReadBoss(env Env) *Boss {
	if env == nil {
		env = ProcessEnv
	}
	present := false
	for _, k := range BossEnvNames {
		if _, ok := env.LookupEnv(k); ok {
			present = true
		}
	}
	if !present {
		return &Boss{}
	}
	invalid := func(reason string) *Boss {
		return &Boss{Present: true, Restricted: true, Reason: reason}
	}
	runID, _ := env.LookupEnv(EnvBossRunID)
	if !exactNonEmpty(runID) || !bossRunIDRe.MatchString(runID) {
		return invalid(EnvBossRunID + " must match boss-<lowercase UUID>")
	}
	suffix := runID[len(runID)-12:]
	role, _ := env.LookupEnv(EnvBossRole)
	if !slices.Contains(bossRoles, role) {
		return invalid(EnvBossRole + " must be manager, worker, scout, or adversary")
	}
	controller, _ := env.LookupEnv(EnvBossController)
	if !exactNonEmpty(controller) {
		return invalid(EnvBossController + " must be a non-empty exact stable session ID")
	}
	manager, _ := env.LookupEnv(EnvBossManager)
	if !exactNonEmpty(manager) {
		return invalid(EnvBossManager + " must be a non-empty exact stable session ID")
	}
	if manager == controller {
		return invalid("Boss Controller and Manager targets must be distinct")
	}
	expected := make([]string, len(bossRoles))
	for i, r := range bossRoles {
		expected[i] = "boss-" + r + "-" + suffix
	}
	if manager != expected[0] {
		return invalid(EnvBossManager + " must equal " + expected[0])
	}
	teamJSON, _ := env.LookupEnv(EnvBossTeam)
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(teamJSON), &raw); err != nil || raw == nil {
		return invalid(EnvBossTeam + " must be a JSON array of exact stable session IDs")
	}
	set := map[string]bool{}
	for _, r := range raw {
		var s string
		if len(strings.TrimSpace(string(r))) == 0 || strings.TrimSpace(string(r))[0] != '"' || json.Unmarshal(r, &s) != nil || !exactNonEmpty(s) {
			return invalid(EnvBossTeam + " must be a JSON array of exact stable session IDs")
		}
		set[s] = true
	}
	if len(raw) != len(expected) || len(set) != len(expected) || !allIn(expected, set) {
		return invalid(EnvBossTeam + " must contain exactly the canonical manager, worker, scout, and adversary session IDs for the run")
	}
	if set[controller] {
		return invalid(EnvBossController + " must be distinct from every canonical team target")
	}
	visibility, set2 := env.LookupEnv(EnvBossVisibility)
	if !set2 {
		visibility = "team-only"
	}
	if visibility != "team-only" && visibility != "local" {
		return invalid(EnvBossVisibility + " must be team-only or local")
	}
	return &Boss{Present: true, Valid: true, Restricted: visibility == "team-only",
		RunID: runID, RunSuffix: suffix, Role: role, ControllerTarget: controller, ManagerTarget: manager,
		TeamTargets: expected, SelfTarget: "boss-" + role + "-" + suffix, Visibility: visibility}
}

// exactNonEmpty: non-empty, no surrounding blanks, no control characters.
func exactNonEmpty(v string) bool {
	if v == "" || v != strings.TrimFunc(v, func(r rune) bool { return unicode.IsSpace(r) || r == '\uFEFF' }) {
		return false
	}
	return strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) < 0
}

func allIn(list []string, set map[string]bool) bool {
	for _, v := range list {
		if !set[v] {
			return false
		}
	}
	return true
}

// Usable returns nil when the contract is absent, or present, valid and
// naming selfID; else the BOSS_TEAM_METADATA_INVALID refusal. A session
// whose contract is not usable must not take part at all (deny-all).
func (b *Boss) Usable(selfID string) error {
	switch {
	case b == nil || !b.Present:
		return nil
	case !b.Valid:
		return &BossError{Code: BossMetadataInvalid, Message: "Boss team scope is unavailable: " + b.Reason}
	case selfID != b.SelfTarget:
		return &BossError{Code: BossMetadataInvalid, Message: fmt.Sprintf("Boss session identity mismatch: expected %s, received %s", b.SelfTarget, selfID)}
	}
	return nil
}

// allowed is the exact ids a team-only session may address: the four
// canonical teammates, plus the controller for the manager (nil: not
// restricted).
func (b *Boss) allowed() map[string]bool {
	if b == nil || !b.Restricted {
		return nil
	}
	out := map[string]bool{}
	if !b.Valid {
		return out
	}
	for _, t := range b.TeamTargets {
		out[t] = true
	}
	if b.Role == "manager" {
		out[b.ControllerTarget] = true
	}
	return out
}

// ResolveTarget admits a send target: only an exact live session id, and in
// team-only mode only an allowed one. Without a contract every target
// passes unchanged.
func (b *Boss) ResolveTarget(target, selfID string, sessions []Session) (string, error) {
	if b == nil || !b.Present {
		return target, nil
	}
	if err := b.Usable(selfID); err != nil {
		return "", err
	}
	if allowed := b.allowed(); allowed != nil && !allowed[target] {
		return "", &BossError{Code: BossScopeDenied,
			Message: fmt.Sprintf("Boss team scope denied exact session ID %q; use an exact ID returned by intercom_team", target)}
	}
	for _, s := range sessions {
		if s.ID == target {
			return target, nil
		}
	}
	return "", &BossError{Code: BossTargetNotConnected, Message: fmt.Sprintf("Boss target exact session ID %q is not connected", target)}
}

// AuthorizeSender admits an inbound sender: in team-only mode only an
// allowed exact id.
func (b *Boss) AuthorizeSender(senderID, selfID string) error {
	if b == nil || !b.Present {
		return nil
	}
	if err := b.Usable(selfID); err != nil {
		return err
	}
	if allowed := b.allowed(); allowed != nil && !allowed[senderID] {
		return &BossError{Code: BossScopeDenied,
			Message: fmt.Sprintf("Boss team scope denied inbound exact session ID %q for role=%s", senderID, b.Role)}
	}
	return nil
}

// Filter is the session's inbound filter (intercom.SessionConfig.Filter):
// a refused sender's message is rejected with "<code>: <why>" before it
// touches the inbox, so its sender sees CONFLICTING_MESSAGE_ID. nil when
// there is no contract.
func (b *Boss) Filter(selfID string) func(from wire.SessionInfo, msg *wire.MessageInfo) string {
	if b == nil || !b.Present {
		return nil
	}
	return func(from wire.SessionInfo, _ *wire.MessageInfo) string {
		if err := b.AuthorizeSender(from.ID, selfID); err != nil {
			return err.Error()
		}
		return ""
	}
}

// ReplayFilter drops every queued outbox entry while a contract is present
// (intercom.SessionConfig.ReplayFilter); nil without one.
func (b *Boss) ReplayFilter() func(to string) bool {
	if b == nil || !b.Present {
		return nil
	}
	return func(string) bool { return false }
}

// FilterSessions keeps self plus the live sessions the contract lets the
// session see (all of them with local visibility).
func (b *Boss) FilterSessions(sessions []Session, selfID string) []Session {
	if b == nil || !b.Present {
		return sessions
	}
	allowed := b.allowed()
	usable := b.Usable(selfID) == nil
	var out []Session
	for _, s := range sessions {
		if s.ID == selfID || (usable && (allowed == nil || allowed[s.ID])) {
			out = append(out, s)
		}
	}
	return out
}

// Team is the Boss team of a team-only session: its live canonical
// teammates by exact id, the manager, and for the manager the controller.
func (b *Boss) Team(selfID string, sessions []Session) (*Team, error) {
	if err := b.Usable(selfID); err != nil {
		return nil, err
	}
	live := func(id string) bool {
		for _, s := range sessions {
			if s.ID == id {
				return true
			}
		}
		return false
	}
	isManager := b.Role == "manager"
	t := &Team{Source: SourceOrchestrator, Self: Self{ID: selfID, IsManager: isManager}, Coworkers: []Member{}}
	switch {
	case isManager:
		t.Manager = &Endpoint{Target: selfID, Connected: true}
	case live(b.ManagerTarget):
		t.Manager = &Endpoint{Target: b.ManagerTarget, Connected: true}
	}
	if t.Manager != nil {
		t.TeamID = t.Manager.Target
	}
	if isManager && live(b.ControllerTarget) {
		t.Controller = &Endpoint{Target: b.ControllerTarget, Connected: true}
	}
	for _, target := range b.TeamTargets {
		if target == selfID || target == b.ManagerTarget || target == b.ControllerTarget || !live(target) {
			continue
		}
		t.Coworkers = append(t.Coworkers, Member{ID: target, Target: target, Connected: true})
	}
	return t, nil
}
