package verbs

// TeamsHelp is the help of teams and its verbs.
var TeamsHelp = map[string]Help{
	"teams": {
		Use:   "teams",
		Short: "Create, join, leave, delete and list named teams",
		Long: `A named team is a roster of sessions with a name and a private intercom scope
(the named teams of the Codex and OpenCode adapters, in
<agentDir>/intercom/named-teams.json). A session may belong to several
teams; the creator is the manager. Members of a team reach each other by
name from any scope (agent-fleet looks the name up in the roster and sends
to the exact session id); a session that shares no team with them cannot
find them by name. Messages between members of one shared team carry the
team's name. The scope itself is never printed.

teams create and teams join move a running session holder of your id
(agent-fleet intercom listen, agent-fleet mcp) into the team's scope in
place, keeping its other memberships; --stay records the membership
without moving. With -- CMD they run CMD inside the team instead. teams
leave gives one up (with no name: the team whose scope the session is in,
back to the scope it started in); teams delete removes a team you manage.
Fleet workers, orchestrator-owned sessions, TmuxDeck team members and Boss
participants (managed sessions) cannot join or create a named team at all,
--stay included.`,
		Example: `  agent-fleet teams create billing
  agent-fleet teams join billing
  agent-fleet teams join billing -- claude
  agent-fleet teams list
  agent-fleet teams leave billing
  agent-fleet teams delete billing`,
	},
	"join": {
		Use:     "join NAME [-- CMD ARGS…]",
		Short:   "Join a named team (or run CMD in it); other memberships stay",
		Example: "  agent-fleet teams join billing\n  agent-fleet teams join billing --stay\n  agent-fleet teams join billing -- codex",
	},
	"create": {
		Use:     "create NAME [-- CMD ARGS…]",
		Short:   "Create a named team and manage it (or run CMD in it)",
		Example: "  agent-fleet teams create billing\n  agent-fleet teams create billing -- claude",
	},
	"leave": {
		Use:   "leave [NAME]",
		Short: "Leave a named team (no name: the one you are in, back home)",
		Long: `Take your session off a team's roster. When it is the team whose scope your
session holder is in, the holder moves back to the scope the session was
started in (its home); with no NAME, that team is the one left. A manager
cannot leave its own team (delete it instead), and a session started in a
team (teams join NAME -- CMD) cannot leave that one while it runs; its
membership outlives it: leave once it ended.`,
		Example: "  agent-fleet teams leave billing\n  agent-fleet teams leave",
	},
	"delete": {
		Use:   "delete NAME",
		Short: "Delete a named team you manage",
		Long: `Remove a team from named-teams.json; only its manager may (others exit 4).
A holder of yours in its scope moves back home; other sessions still in
that scope keep seeing each other until they leave it or end.`,
		Example: "  agent-fleet teams delete billing",
	},
	"list": {
		Use:     "list",
		Short:   "List the named teams with live member counts (never their scopes)",
		Example: "  agent-fleet teams list\n  agent-fleet teams list --json",
	},
}
