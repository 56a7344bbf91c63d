package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/teams"
)

// openTeamSession is the CLI's session for team commands: through the live
// holder of its id, or registered for the length of the command. The
// returned function releases it.
func openTeamSession(ctx context.Context) (*sessionTeam, func(), error) {
	p, id, err := resolveIdentity()
	if err != nil {
		return nil, nil, err
	}
	st, err := newSessionTeam(p, id)
	if err != nil {
		return nil, nil, err
	}
	if hc, err := intercom.DialHolder(ctx, p, id.SessionID); err == nil {
		st.through(p, hc)
		return st, st.close, nil
	}
	sess, err := intercom.OpenSession(ctx, intercom.SessionConfig{
		Paths: p, Identity: id, Start: brokerStarter(), AskTTL: askTTL(), AskWait: askWait(),
		Filter: st.filter(), ReplayFilter: st.replay(),
	})
	if err != nil {
		st.close()
		return nil, nil, err
	}
	st.own(p, sess)
	return st, func() { _ = sess.Close(); st.close() }, nil
}

type teamOptions struct{ json bool }

func newTeamCmd(s *streams) *cobra.Command {
	opts := &teamOptions{}
	cmd := &cobra.Command{
		Use:   "team",
		Short: "Show your manager and coworkers",
		Long: `Show the team of this session (intercom_team): its manager and coworkers,
and whether each is connected. The first that applies wins:

  1. the fleet: a worker's current manager (it follows adoption) and the
     other live workers of that manager; or the workers this session manages;
  2. the TmuxDeck manifest named by AGENT_INTERCOM_TEAM_MANIFEST (a broken
     manifest is an error, never a fall-through);
  3. the live sessions of this session's scope (AGENT_INTERCOM_SCOPE_ID, a
     named team), the manager from AGENT_INTERCOM_MANAGER_TARGET;
  4. standalone.

Send to a coworker with agent-fleet intercom send <target> …`,
		Example: "  agent-fleet team\n  agent-fleet team --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runTeam(cmd.Context(), s, opts)
		},
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print the team as JSON (intercom_team's structured form)")
	return cmd
}

func runTeam(ctx context.Context, s *streams, opts *teamOptions) error {
	st, release, err := openTeamSession(ctx)
	if err != nil {
		return err
	}
	defer release()
	team, err := st.service().Team(ctx)
	if err != nil {
		return err
	}
	if opts.json {
		return printJSON(s.Out, team)
	}
	_, err = fmt.Fprintln(s.Out, teams.Format(team))
	return err
}

func newTeamsCmd(s *streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "teams",
		Short: "Create, join and list named teams",
		Long: `A named team is a private intercom scope with a name (the named teams of the
Codex and OpenCode adapters, in <agentDir>/intercom/named-teams.json). Its
members see only each other in intercom list and team; a session outside it
cannot find them by name. The creator is the manager. The scope itself is
never printed.

teams create and teams join move a running session holder of your id
(agent-fleet intercom listen, agent-fleet mcp) into the team in place. With
-- CMD they run CMD inside the team instead. Fleet workers, orchestrator-owned
sessions, TmuxDeck team members and Boss participants cannot join.`,
		Example: `  agent-fleet teams create billing
  agent-fleet teams join billing
  agent-fleet teams join billing -- claude
  agent-fleet teams list`,
	}
	cmd.AddCommand(newTeamsJoinCmd(s, true), newTeamsJoinCmd(s, false), newTeamsListCmd(s))
	return cmd
}

type teamsJoinOptions struct {
	create bool
	json   bool
}

func newTeamsJoinCmd(s *streams, create bool) *cobra.Command {
	opts := &teamsJoinOptions{create: create}
	use, short := "join NAME [-- CMD ARGS…]", "Join a named team (or run CMD in it)"
	example := "  agent-fleet teams join billing\n  agent-fleet teams join billing -- codex"
	if create {
		use, short = "create NAME [-- CMD ARGS…]", "Create a named team and manage it (or run CMD in it)"
		example = "  agent-fleet teams create billing\n  agent-fleet teams create billing -- claude"
	}
	cmd := &cobra.Command{
		Use:     use,
		Short:   short,
		Example: example,
		Args: func(cmd *cobra.Command, args []string) error {
			if n := cmd.ArgsLenAtDash(); n > 1 || (n < 0 && len(args) != 1) || len(args) == 0 || n == 0 {
				return &usageError{errors.New("give one team name, then optionally -- CMD ARGS…")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTeamsJoin(cmd.Context(), s, opts, args[0], args[1:])
		},
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print the outcome as JSON")
	return cmd
}

func runTeamsJoin(ctx context.Context, s *streams, opts *teamsJoinOptions, name string, command []string) error {
	if err := teams.ValidateTeamName(name); err != nil {
		return &usageError{err}
	}
	p, id, err := resolveIdentity()
	if err != nil {
		return err
	}
	if why := teams.ManagedReason(teams.ProcessEnv, teams.ReadBoss(nil)); why != "" {
		return fmt.Errorf("%w: %s", teams.ErrManagedSession, why)
	}
	req := teams.JoinRequest{Name: name, Create: opts.create}
	if len(command) > 0 {
		return runInTeam(ctx, s, p, id.SessionID, req, command)
	}
	hc, herr := intercom.DialHolder(ctx, p, id.SessionID)
	if herr != nil {
		if !opts.create {
			if _, _, err := teams.NewStore(p).Lookup(name); err != nil {
				return err // no such team: that first
			}
			return &usageError{fmt.Errorf("%w: no session holder runs for %s, so there is nothing to move into team %s; "+
				"run a command in it (agent-fleet teams join %s -- CMD), or start agent-fleet intercom listen (or agent-fleet mcp) first",
				teams.ErrNoSwitch, id.SessionID, name, name)}
		}
		team, _, err := teams.NewStore(p).Create(ctx, name, id.SessionID)
		if err != nil {
			return err
		}
		if opts.json {
			return printJSON(s.Out, &teams.JoinResult{OK: true, Team: team.Name, Role: "manager", Manager: team.ManagerSessionID, Created: true})
		}
		fmt.Fprintf(s.Out, "Created team %s; you (%s) manage it.\n", team.Name, id.SessionID)
		fmt.Fprintf(s.Out, "No session holder runs for %s, so no session moved into it. Run a command in the team with\n"+
			"  agent-fleet teams join %s -- CMD\nor start agent-fleet intercom listen (or agent-fleet mcp) and run agent-fleet teams join %s.\n",
			id.SessionID, team.Name, team.Name)
		return nil
	}
	st, err := newSessionTeam(p, id)
	if err != nil {
		return err
	}
	defer st.close()
	st.through(p, hc)
	res, err := st.service().Join(ctx, req)
	if err != nil {
		return err
	}
	if opts.json {
		return printJSON(s.Out, res)
	}
	printJoined(s, res, id.SessionID)
	return nil
}

func printJoined(s *streams, res *teams.JoinResult, self string) {
	verb := "Joined team " + res.Team
	if res.Created {
		verb = "Created team " + res.Team + " and joined it"
	}
	fmt.Fprintf(s.Out, "%s as %s (manager: %s).\n", verb, res.Role, res.Manager)
	fmt.Fprintf(s.Out, "Session %s now sees only its team: agent-fleet team lists it.\n", self)
}

// runInTeam runs command with the team's scope and manager in its
// environment (creating the team first for create), in place of this
// process where the platform allows (see execInTeam).
func runInTeam(ctx context.Context, s *streams, p intercom.Paths, self string, req teams.JoinRequest, command []string) error {
	store := teams.NewStore(p)
	var team teams.NamedTeam
	var scope teams.Scope
	var err error
	if req.Create {
		team, scope, err = store.Create(ctx, req.Name, self)
	} else {
		team, scope, err = store.Lookup(req.Name)
	}
	if err != nil {
		return err
	}
	path, err := exec.LookPath(command[0])
	if err != nil {
		return &usageError{fmt.Errorf("run %s in team %s: %w", command[0], team.Name, err)}
	}
	return execInTeam(s, path, command, teamEnv(os.Environ(), scope, team.ManagerSessionID))
}

// teamEnv is env with the team's scope and manager target set.
func teamEnv(env []string, scope teams.Scope, manager string) []string {
	out := make([]string, 0, len(env)+2)
	for _, kv := range env {
		if strings.HasPrefix(kv, teams.EnvScope+"=") || strings.HasPrefix(kv, teams.EnvManagerTarget+"=") {
			continue
		}
		out = append(out, kv)
	}
	return append(out, teams.EnvScope+"="+scope.Value(), teams.EnvManagerTarget+"="+manager)
}

func newTeamsListCmd(s *streams) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List the named teams (never their scopes)",
		Example: "  agent-fleet teams list --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := namedTeams(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(s.Out, list)
			}
			printNamedTeams(s, list)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

// namedTeams lists the named teams, marking the one the caller's session is
// in: its holder's scope when a holder runs, else AGENT_INTERCOM_SCOPE_ID.
func namedTeams(ctx context.Context) ([]teams.NamedTeam, error) {
	p, id, err := resolveIdentity()
	if err != nil {
		return nil, err
	}
	local := teams.NewService(teams.ServiceConfig{Paths: p, Ops: teams.DeniedOps(intercom.WhoamiResult{SessionID: id.SessionID}, intercom.ErrNotConnected)})
	if hc, err := intercom.DialHolder(ctx, p, id.SessionID); err == nil {
		return viaHolder{remote: teams.HolderTeams{Client: hc}, local: local}.NamedTeams(ctx)
	}
	return local.NamedTeams(ctx)
}

func printNamedTeams(s *streams, list []teams.NamedTeam) {
	if len(list) == 0 {
		fmt.Fprintln(s.Out, "No named teams. Create one with agent-fleet teams create NAME.")
		return
	}
	for _, t := range list {
		line := fmt.Sprintf("- %s (manager: %s)", t.Name, t.ManagerSessionID)
		if t.Joined {
			line += " [joined]"
		}
		fmt.Fprintln(s.Out, line)
	}
}
