package teams

import (
	"errors"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// Errors of team operations. Each maps to one CLI exit code in cmd.
var (
	// ErrRegistry: the fleet registry could not be read while the caller is
	// a worker, so its team is unknown (never guessed from elsewhere).
	ErrRegistry = errors.New("fleet registry unavailable")
	// ErrManagedSession: a managed session (a fleet worker, an owned
	// session, a TmuxDeck team member or a Boss participant) cannot join or
	// create a named team, not even without moving (spec §7.2).
	ErrManagedSession = errors.New("a managed session cannot join or create a named team")
	// ErrInvalidTeamName: a team name that does not match TeamNamePattern.
	ErrInvalidTeamName = errors.New("team name must match " + TeamNamePattern)
	// ErrTeamNotFound: no named team has that exact name.
	ErrTeamNotFound = errors.New("no named team with that name")
	// ErrTeamExists: a named team with that name (in any letter case)
	// already exists.
	ErrTeamExists = errors.New("a named team with that name already exists")
	// ErrStore: named-teams.json cannot be read as the §7.2 format; it is
	// left untouched.
	ErrStore = errors.New("named-teams.json is not in the expected format")
	// ErrLocked: named-teams.lock stayed held past the 5 s deadline.
	ErrLocked = errors.New("named teams are locked by another process")
	// ErrNoSwitch: this process cannot move the session to another scope
	// (no session holder runs for it here).
	ErrNoSwitch = errors.New("no session holder to switch")
	// ErrInspectionDenied: manager inbox inspection refused (spec §7.4).
	ErrInspectionDenied = errors.New("pending-ask inbox inspection denied")
	// ErrBossDenied: the Boss team scope refused a target or an operation
	// (BOSS_TEAM_SCOPE_DENIED, BOSS_TEAM_METADATA_INVALID or
	// BOSS_TEAM_TARGET_NOT_CONNECTED; see *BossError).
	ErrBossDenied = errors.New("boss team scope denied")
	// ErrNotMember: the session is not on the named team's roster, so it
	// may not leave it, address it (team:NAME) or resolve its members.
	ErrNotMember = errors.New("not a member of that team")
	// ErrNotManager: only a team's manager may delete it or add other
	// sessions to it.
	ErrNotManager = errors.New("only the team's manager may do that")
	// ErrManagerLeaves: a manager cannot leave the team it manages (its
	// roster must keep it); it deletes the team instead.
	ErrManagerLeaves = errors.New("a team's manager cannot leave it")
	// ErrHomeTeam: the session was started in this team's scope, so it
	// cannot move out of it; it ends and starts again outside.
	ErrHomeTeam = errors.New("the session was started in that team")
)

// ErrTeamChoice: the sender and the target share several named teams and
// the send names none. It is also intercom.ErrAmbiguousTarget (exit 7),
// but the way out is naming the team, not a fuller session id.
var ErrTeamChoice error = teamChoice{}

type teamChoice struct{}

func (teamChoice) Error() string        { return intercom.ErrAmbiguousTarget.Error() }
func (teamChoice) Is(target error) bool { return target == intercom.ErrAmbiguousTarget }
