package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/teams"
)

func newTeamsCmd(f *factory.Factory) *cobra.Command {
	h := verbs.TeamsHelp["teams"]
	cmd := &cobra.Command{Use: h.Use, Short: h.Short, Long: h.Long, Example: h.Example}
	cmd.AddCommand(newTeamsJoinCmd(f, true), newTeamsJoinCmd(f, false), newTeamsVerbCmd(f, "leave"), newTeamsVerbCmd(f, "delete"), newTeamsVerbCmd(f, "list"))
	return cmd
}

type teamsOptions struct {
	Factory *factory.Factory
	IO      *factory.IOStreams
	JSON    bool
	Verb    string
	Req     teams.JoinRequest
	// Command runs in the team instead of moving a holder into it.
	Command []string
}

func newTeamsJoinCmd(f *factory.Factory, create bool) *cobra.Command {
	opts := &teamsOptions{Factory: f, IO: f.IO, Verb: "join", Req: teams.JoinRequest{Create: create}}
	if create {
		opts.Verb = "create"
	}
	h := verbs.TeamsHelp[opts.Verb]
	cmd := &cobra.Command{Use: h.Use, Short: h.Short, Example: h.Example,
		Args: func(cmd *cobra.Command, args []string) error {
			if n := cmd.ArgsLenAtDash(); n > 1 || (n < 0 && len(args) != 1) || len(args) == 0 || n == 0 {
				return factory.Usage(errors.New("give one team name, then optionally -- CMD ARGS…"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Req.Name, opts.Command = args[0], args[1:]
			if err := teams.ValidateTeamName(opts.Req.Name); err != nil {
				return factory.Usage(err)
			}
			return teamsRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the outcome as JSON")
	if !create {
		cmd.Flags().BoolVar(&opts.Req.Stay, "stay", false, "record the membership without moving the session into the team's scope")
	}
	return cmd
}

func newTeamsVerbCmd(f *factory.Factory, verb string) *cobra.Command {
	opts, h := &teamsOptions{Factory: f, IO: f.IO, Verb: verb}, verbs.TeamsHelp[verb]
	args := map[string]cobra.PositionalArgs{"leave": cobra.MaximumNArgs(1), "delete": cobra.ExactArgs(1), "list": cobra.NoArgs}[verb]
	cmd := &cobra.Command{Use: h.Use, Short: h.Short, Long: h.Long, Example: h.Example,
		Args: func(cmd *cobra.Command, a []string) error {
			if err := args(cmd, a); err != nil {
				return factory.Usage(err)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, a []string) error {
			if len(a) == 1 {
				if opts.Req.Name = a[0]; teams.ValidateTeamName(a[0]) != nil {
					return factory.Usage(teams.ValidateTeamName(a[0]))
				}
			}
			return teamsRun(cmd.Context(), opts)
		}}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the outcome as JSON")
	return cmd
}

// teamsRun runs a teams verb as the caller's session: through its live
// holder (which a join, leave or delete can move), else on the store.
func teamsRun(ctx context.Context, opts *teamsOptions) error {
	f, out, req := opts.Factory, opts.IO.Out, opts.Req
	p, id, err := f.Identity()
	if err != nil {
		return err
	}
	if why := teams.ManagedReason(teams.ProcessEnv, teams.ReadBoss(nil)); why != "" && (opts.Verb == "join" || opts.Verb == "create") {
		return fmt.Errorf("%w: %s", teams.ErrManagedSession, why)
	}
	if len(opts.Command) > 0 && req.Stay {
		return factory.Usagef("--stay keeps a session out of the team's scope, and a command run with -- CMD runs in it: give one or the other")
	} else if len(opts.Command) > 0 {
		return runInTeam(ctx, opts.IO, p, id.SessionID, req, opts.Command)
	}
	st, release, err := f.SessionTeam(p, id)
	if err != nil {
		return err
	}
	defer release()
	svc, _ := teams.ForSession(ctx, p, id, st)
	var res any
	var text func() string
	switch opts.Verb {
	case "leave", "delete":
		var r *teams.LeaveResult
		if opts.Verb == "leave" {
			r, err = svc.Leave(ctx, teams.LeaveRequest{Name: req.Name})
		} else {
			r, err = svc.Delete(ctx, teams.LeaveRequest{Name: req.Name})
		}
		res, text = r, func() string { return output.LeftText(r) }
	case "list":
		var list []teams.NamedTeam
		list, err = svc.NamedTeams(ctx)
		res, text = list, func() string { return output.NamedTeamsText(list, output.CLI) }
	default:
		var r *teams.JoinResult
		r, err = svc.Join(ctx, req)
		res, text = r, func() string { return output.JoinedText(r, id.SessionID, output.CLI) }
	}
	if err != nil {
		return err
	}
	return output.Show(out, opts.JSON, res, text())
}

// runInTeam runs command with the team's scope and manager in its
// environment (creating the team first for create; the caller's id goes
// on the roster), in place of this process where the platform allows (see
// execInTeam).
func runInTeam(ctx context.Context, io *factory.IOStreams, p intercom.Paths, self string, req teams.JoinRequest, command []string) error {
	// Looked up first: a command that cannot run leaves no membership (or
	// team) behind, and exits 3 as a spawn of it does.
	path, err := exec.LookPath(command[0])
	if err != nil {
		return fmt.Errorf("run %s in team %s: %w: %w", command[0], req.Name, fleet.ErrCommandNotFound, err)
	}
	team, scope, err := teams.NewStore(p).Join(ctx, teams.MembershipRequest{Name: req.Name, Self: self, Create: req.Create})
	if err != nil {
		return err
	}
	return execInTeam(io, path, command, scope.Env(os.Environ(), team.ManagerSessionID))
}
