package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
)

type teamOptions struct {
	Factory *factory.Factory
	IO      *factory.IOStreams
	JSON    bool
}

func newTeamCmd(f *factory.Factory, runF func(*teamOptions) error) *cobra.Command {
	opts := &teamOptions{Factory: f, IO: f.IO}
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
After it, the rosters of your named teams (--json: teams). Send to a
coworker with agent-fleet intercom send <target> …`,
		Example: "  agent-fleet team\n  agent-fleet team --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(opts)
			}
			return teamRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the team as JSON (intercom_team's structured form)")
	return cmd
}

// teamRun resolves the team through the session's live holder, or as a
// session registered for the command.
func teamRun(ctx context.Context, opts *teamOptions) error {
	o, err := opts.Factory.OneShot(ctx)
	if err != nil {
		return err
	}
	defer o.Close()
	team, err := o.Team.Service().Team(ctx)
	if err != nil {
		return err
	}
	rosters, _ := o.Team.Service().Rosters(ctx, "") // as intercom_team: best effort
	text, structured := output.TeamView(team, rosters)
	return output.Show(opts.IO.Out, opts.JSON, structured, text)
}
