package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/teams"
)

func newTeamsCmd(f *factory.Factory) *cobra.Command {
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
	cmd.AddCommand(newTeamsJoinCmd(f, true, nil), newTeamsJoinCmd(f, false, nil), newTeamsListCmd(f, nil))
	return cmd
}

type teamsJoinOptions struct {
	Factory *factory.Factory
	IO      *factory.IOStreams
	JSON    bool
	Create  bool
	Name    string
	// Command runs in the team instead of moving a holder into it.
	Command []string
}

func newTeamsJoinCmd(f *factory.Factory, create bool, runF func(*teamsJoinOptions) error) *cobra.Command {
	opts := &teamsJoinOptions{Factory: f, IO: f.IO, Create: create}
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
				return factory.Usage(errors.New("give one team name, then optionally -- CMD ARGS…"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Name, opts.Command = args[0], args[1:]
			if err := teams.ValidateTeamName(opts.Name); err != nil {
				return factory.Usage(err)
			}
			if runF != nil {
				return runF(opts)
			}
			return teamsJoinRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the outcome as JSON")
	return cmd
}

func teamsJoinRun(ctx context.Context, opts *teamsJoinOptions) error {
	f, out := opts.Factory, opts.IO.Out
	name := opts.Name
	p, id, err := f.Identity()
	if err != nil {
		return err
	}
	if why := teams.ManagedReason(teams.ProcessEnv, teams.ReadBoss(nil)); why != "" {
		return fmt.Errorf("%w: %s", teams.ErrManagedSession, why)
	}
	req := teams.JoinRequest{Name: name, Create: opts.Create}
	if len(opts.Command) > 0 {
		return runInTeam(ctx, opts.IO, p, id.SessionID, req, opts.Command)
	}
	hc, herr := intercom.DialHolder(ctx, p, id.SessionID)
	if herr != nil {
		if !opts.Create {
			if _, _, err := teams.NewStore(p).Lookup(name); err != nil {
				return err // no such team: that first
			}
			return factory.Usage(fmt.Errorf("%w: no session holder runs for %s, so there is nothing to move into team %s; "+
				"run a command in it (agent-fleet teams join %s -- CMD), or start agent-fleet intercom listen (or agent-fleet mcp) first",
				teams.ErrNoSwitch, id.SessionID, name, name))
		}
		team, _, err := teams.NewStore(p).Create(ctx, name, id.SessionID)
		if err != nil {
			return err
		}
		if opts.JSON {
			return output.PrintJSON(out, &teams.JoinResult{OK: true, Team: team.Name, Role: "manager", Manager: team.ManagerSessionID, Created: true})
		}
		fmt.Fprintf(out, "Created team %s; you (%s) manage it.\n", team.Name, id.SessionID)
		fmt.Fprintf(out, "No session holder runs for %s, so no session moved into it. Run a command in the team with\n"+
			"  agent-fleet teams join %s -- CMD\nor start agent-fleet intercom listen (or agent-fleet mcp) and run agent-fleet teams join %s.\n",
			id.SessionID, team.Name, team.Name)
		return nil
	}
	st, release, err := f.SessionTeam(p, id)
	if err != nil {
		return err
	}
	defer release()
	st.Through(p, hc)
	res, err := st.Service().Join(ctx, req)
	if err != nil {
		return err
	}
	return output.Show(out, opts.JSON, res, output.JoinedText(res, id.SessionID, output.CLI))
}

// runInTeam runs command with the team's scope and manager in its
// environment (creating the team first for create), in place of this
// process where the platform allows (see execInTeam).
func runInTeam(ctx context.Context, io *factory.IOStreams, p intercom.Paths, self string, req teams.JoinRequest, command []string) error {
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
		return factory.Usage(fmt.Errorf("run %s in team %s: %w", command[0], team.Name, err))
	}
	return execInTeam(io, path, command, teamEnv(os.Environ(), scope, team.ManagerSessionID))
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

type teamsListOptions struct {
	Factory *factory.Factory
	IO      *factory.IOStreams
	JSON    bool
}

func newTeamsListCmd(f *factory.Factory, runF func(*teamsListOptions) error) *cobra.Command {
	opts := &teamsListOptions{Factory: f, IO: f.IO}
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List the named teams (never their scopes)",
		Example: "  agent-fleet teams list --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(opts)
			}
			return teamsListRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print as JSON")
	return cmd
}

// teamsListRun lists the named teams, marking the one the caller's session
// is in: its holder's scope when a holder runs, else
// AGENT_INTERCOM_SCOPE_ID.
func teamsListRun(ctx context.Context, opts *teamsListOptions) error {
	p, id, err := opts.Factory.Identity()
	if err != nil {
		return err
	}
	local := teams.NewService(teams.ServiceConfig{Paths: p, Ops: teams.DeniedOps(intercom.WhoamiResult{SessionID: id.SessionID}, intercom.ErrNotConnected)})
	var list []teams.NamedTeam
	if hc, err := intercom.DialHolder(ctx, p, id.SessionID); err == nil {
		list, err = teams.ViaHolder{Remote: teams.HolderTeams{Client: hc}, Local: local}.NamedTeams(ctx)
		if err != nil {
			return err
		}
	} else if list, err = local.NamedTeams(ctx); err != nil {
		return err
	}
	return output.Show(opts.IO.Out, opts.JSON, list, output.NamedTeamsText(list, output.CLI))
}
