package main

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/teams"
)

// sessionOptions are what the intercom verbs that only look hold.
type sessionOptions struct {
	Factory *factory.Factory
	IO      *factory.IOStreams
	JSON    bool
}

func newWhoamiCmd(f *factory.Factory, runF func(*sessionOptions) error) *cobra.Command {
	opts := &sessionOptions{Factory: f, IO: f.IO}
	cmd := &cobra.Command{
		Use:     "whoami",
		Short:   "Print this session's identity",
		Example: "  agent-fleet intercom whoami --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(opts)
			}
			return whoamiRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print as JSON")
	return cmd
}

// whoamiRun answers from the environment, or from the session's holder
// when one runs (it may have been started with another name).
func whoamiRun(ctx context.Context, opts *sessionOptions) error {
	p, id, err := opts.Factory.SessionIdentity()
	if err != nil {
		return err
	}
	res := &intercom.WhoamiResult{SessionID: id.SessionID, Name: id.Name, Cwd: id.Cwd, Model: id.Model}
	if hc, err := intercom.DialHolder(ctx, p, id.SessionID); err == nil {
		if r, err := hc.Whoami(ctx); err == nil {
			res = r
		}
	}
	return output.Show(opts.IO.Out, opts.JSON, res, output.WhoamiText(res))
}

type sessionsOptions struct {
	sessionOptions
	Req intercom.ListRequest
}

func newSessionsCmd(f *factory.Factory, runF func(*sessionsOptions) error) *cobra.Command {
	opts := &sessionsOptions{sessionOptions: sessionOptions{Factory: f, IO: f.IO}}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the sessions you can reach",
		Long: `List connected sessions in your scope. --where narrows it to sessions in your
working directory ("directory") or git repository ("repo"); when it leaves
every session out, list says how many others are connected ("others" in
--json).`,
		Example: "  agent-fleet intercom list\n  agent-fleet intercom list --where repo --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if w := opts.Req.Where; w != "" && w != "machine" && w != "directory" && w != "repo" {
				return factory.Usagef("--where must be machine, directory or repo")
			}
			if runF != nil {
				return runF(opts)
			}
			return sessionsRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print as JSON")
	cmd.Flags().StringVar(&opts.Req.Where, "where", "machine", "machine, directory or repo")
	cmd.Flags().BoolVar(&opts.Req.IncludeSelf, "include-self", false, "include this session")
	return cmd
}

func sessionsRun(ctx context.Context, opts *sessionsOptions) error {
	o, err := opts.Factory.OneShot(ctx)
	if err != nil {
		return err
	}
	defer o.Close()
	res, err := o.Ops.List(ctx, opts.Req)
	if err != nil {
		return err
	}
	return output.Show(opts.IO.Out, opts.JSON, res, output.HostSessionsText(res, opts.Req.Where, output.CLI, opts.Factory.NodeName()))
}

type pendingOptions struct {
	sessionOptions
	Req intercom.PendingRequest
	// InboxOf is a manager's read-only look at an owned coworker's
	// pending asks (spec §7.4).
	InboxOf string
}

func newPendingCmd(f *factory.Factory, runF func(*pendingOptions) error) *cobra.Command {
	opts := &pendingOptions{sessionOptions: sessionOptions{Factory: f, IO: f.IO}}
	cmd := &cobra.Command{
		Use:   "pending",
		Short: "Show unread messages and asks waiting for your reply",
		Example: `  agent-fleet intercom pending
  agent-fleet intercom pending --ask-id ask-3Jc…
  agent-fleet intercom pending --mark-read --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.InboxOf != "" && opts.Req.MarkRead {
				return factory.Usage(errors.New("--mark-read cannot be used with --inbox-of: inspecting another session's inbox is read-only"))
			}
			if cmd.Flags().Changed("inbox-of") {
				if opts.InboxOf == "" {
					return factory.Usage(errors.New("--inbox-of is empty: give the exact target of an owned coworker, as agent-fleet team lists it"))
				}
				if _, id, err := f.Identity(); err == nil && id.SessionID == opts.InboxOf {
					return factory.Usagef("--inbox-of %s is your own inbox: agent-fleet intercom pending shows it", opts.InboxOf)
				}
			}
			if runF != nil {
				return runF(opts)
			}
			return pendingRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print as JSON")
	cmd.Flags().StringVar(&opts.Req.AskID, "ask-id", "", "show one pending ask in full")
	cmd.Flags().BoolVar(&opts.Req.MarkRead, "mark-read", false, "mark the listed messages read")
	cmd.Flags().StringVar(&opts.InboxOf, "inbox-of", "", "a manager's read-only look at an owned coworker's pending asks (its exact target from agent-fleet team)")
	return cmd
}

// pendingRun lists the session's own pending mail, or with --inbox-of a
// coworker's pending asks: in the session's holder when one runs (which
// resolves the team with its own scope), else in this process.
func pendingRun(ctx context.Context, opts *pendingOptions) error {
	o, err := opts.Factory.OneShot(ctx)
	if err != nil {
		return err
	}
	defer o.Close()
	out := opts.IO.Out
	if opts.InboxOf != "" {
		insp, err := o.Team.Service().InspectInbox(ctx, teams.InspectRequest{Session: opts.InboxOf, AskID: opts.Req.AskID})
		if err != nil {
			return err
		}
		return output.Show(out, opts.JSON, insp, output.InspectionText(insp, opts.Req.AskID != ""))
	}
	res, err := o.Ops.Pending(ctx, opts.Req)
	if err != nil {
		return err
	}
	return output.Show(out, opts.JSON, res, output.PendingText(res, opts.Req.AskID != ""))
}

func newSessionStatusCmd(f *factory.Factory, runF func(*sessionOptions) error) *cobra.Command {
	opts := &sessionOptions{Factory: f, IO: f.IO}
	cmd := &cobra.Command{
		Use:     "status",
		Short:   "Show this session's connection and queues",
		Example: "  agent-fleet intercom status --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(opts)
			}
			return sessionStatusRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print as JSON")
	return cmd
}

func sessionStatusRun(ctx context.Context, opts *sessionOptions) error {
	o, err := opts.Factory.OneShot(ctx)
	if err != nil {
		return err
	}
	defer o.Close()
	res, err := o.Ops.Status(ctx)
	if err != nil {
		return err
	}
	if st, err := opts.Factory.NodeStatus(ctx); err == nil {
		res.Routing = st.AsRouting()
	}
	return output.Show(opts.IO.Out, opts.JSON, res, output.SessionStatusText(res, o.Holder))
}

type setSummaryOptions struct {
	sessionOptions
	Text string
}

func newSetSummaryCmd(f *factory.Factory, runF func(*setSummaryOptions) error) *cobra.Command {
	opts := &setSummaryOptions{sessionOptions: sessionOptions{Factory: f, IO: f.IO}}
	cmd := &cobra.Command{
		Use:   "set-summary [TEXT|-]",
		Short: "Publish a short status others see in their session list",
		Long: `Publish a short status (at most 400 characters) for others to see. It lasts
while your session is registered: use it from a session holder (listen, mcp).`,
		Example: `  agent-fleet intercom set-summary "refactoring the parser"`,
		Args:    optionalArg("text"),
		RunE: func(cmd *cobra.Command, args []string) error {
			text, err := messageText(f.IO.In, args, 0)
			if err != nil {
				return err
			}
			opts.Text = text
			if runF != nil {
				return runF(opts)
			}
			return setSummaryRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, `print {"ok", "summary", "held"} as JSON`)
	return cmd
}

// summaryResult is set-summary's outcome as --json prints it: the summary
// published, and whether a session holder keeps it (else it ended with the
// command's registration).
type summaryResult struct {
	OK      bool   `json:"ok"`
	Summary string `json:"summary"`
	Held    bool   `json:"held"`
}

func setSummaryRun(ctx context.Context, opts *setSummaryOptions) error {
	o, err := opts.Factory.OneShot(ctx)
	if err != nil {
		return err
	}
	defer o.Close()
	if err := o.Ops.SetSummary(ctx, opts.Text); err != nil {
		return err
	}
	text := "Summary updated."
	if !o.Holder {
		// Published, but gone with this command's registration.
		text = "Summary published for this command's registration only: no session holder runs for your id, so it ends now. Run it while agent-fleet intercom listen (or agent-fleet mcp) holds your session."
	}
	return output.Show(opts.IO.Out, opts.JSON, summaryResult{OK: true, Summary: opts.Text, Held: o.Holder}, text)
}
