package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/intercom"
)

func newWhoamiCmd(s *streams) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "whoami",
		Short:   "Print this session's identity",
		Example: "  agent-fleet intercom whoami --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, id, err := resolveIdentity()
			if err != nil {
				return err
			}
			res := &intercom.WhoamiResult{SessionID: id.SessionID, Name: id.Name, Cwd: id.Cwd, Model: id.Model}
			if hc, err := intercom.DialHolder(cmd.Context(), mustPaths(), id.SessionID); err == nil {
				if r, err := hc.Whoami(cmd.Context()); err == nil {
					res = r
				}
			}
			if asJSON {
				return printJSON(s.Out, res)
			}
			fmt.Fprintf(s.Out, "session_id: %s\nname: %s\ncwd: %s\n", res.SessionID, res.Name, res.Cwd)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func mustPaths() intercom.Paths {
	p, _ := intercom.DefaultPaths()
	return p
}

func newListCmd(s *streams) *cobra.Command {
	var asJSON bool
	req := intercom.ListRequest{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the sessions you can reach",
		Long: `List connected sessions in your scope. --where narrows it to sessions in your
working directory ("directory") or git repository ("repo").`,
		Example: "  agent-fleet intercom list\n  agent-fleet intercom list --where repo --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if req.Where != "" && req.Where != "machine" && req.Where != "directory" && req.Where != "repo" {
				return &usageError{fmt.Errorf("--where must be machine, directory or repo")}
			}
			o, err := openOneShot(cmd.Context())
			if err != nil {
				return err
			}
			defer o.close()
			res, err := o.ops.List(cmd.Context(), req)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(s.Out, res)
			}
			if len(res.Sessions) == 0 {
				fmt.Fprintln(s.Out, "No intercom sessions connected.")
				return nil
			}
			for _, v := range res.Sessions {
				fmt.Fprintln(s.Out, sessionLine(v))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	cmd.Flags().StringVar(&req.Where, "where", "machine", "machine, directory or repo")
	cmd.Flags().BoolVar(&req.IncludeSelf, "include-self", false, "include this session")
	return cmd
}

// sessionLine is the adapters' list line:
// - <name> (<id first 8>) - <cwd> (<model>) [self, same cwd, <status>]
func sessionLine(v intercom.SessionView) string {
	name := v.Name
	if name == "" {
		name = v.ID
	}
	short := v.ID
	if len(short) > 8 {
		short = short[:8]
	}
	var tags []string
	if v.Self {
		tags = append(tags, "self")
	}
	if v.SameCwd {
		tags = append(tags, "same cwd")
	}
	if v.Status != "" {
		tags = append(tags, v.Status)
	}
	line := fmt.Sprintf("- %s (%s) - %s (%s)", name, short, v.Cwd, v.Model)
	if len(tags) > 0 {
		line += " [" + strings.Join(tags, ", ") + "]"
	}
	return line
}

func newPendingCmd(s *streams) *cobra.Command {
	var asJSON bool
	var inboxOf string
	req := intercom.PendingRequest{}
	cmd := &cobra.Command{
		Use:   "pending",
		Short: "Show unread messages and asks waiting for your reply",
		Example: `  agent-fleet intercom pending
  agent-fleet intercom pending --ask-id ask-3Jc…
  agent-fleet intercom pending --mark-read --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if inboxOf != "" {
				return runInboxOf(cmd.Context(), s, inboxOf, req, asJSON)
			}
			o, err := openOneShot(cmd.Context())
			if err != nil {
				return err
			}
			defer o.close()
			res, err := o.ops.Pending(cmd.Context(), req)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(s.Out, res)
			}
			printPending(s, res, req.AskID != "")
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	cmd.Flags().StringVar(&req.AskID, "ask-id", "", "show one pending ask in full")
	cmd.Flags().BoolVar(&req.MarkRead, "mark-read", false, "mark the listed messages read")
	cmd.Flags().StringVar(&inboxOf, "inbox-of", "", "a manager's read-only look at an owned coworker's pending asks (its exact target from agent-fleet team)")
	return cmd
}

func printPending(s *streams, res *intercom.PendingResult, full bool) {
	if full && len(res.Asks) == 1 {
		a := res.Asks[0]
		fmt.Fprintf(s.Out, "Pending ask %s\nFrom: %s\n\n%s\n", a.AskID, senderLabel(a.From), a.Text)
		for _, att := range a.Attachments {
			fmt.Fprintf(s.Out, "---\nAttachment: %s\n%s\n", att.Name, att.Content)
		}
		return
	}
	if len(res.Unread) == 0 && len(res.Asks) == 0 {
		fmt.Fprintln(s.Out, "No unread messages and no pending asks.")
		return
	}
	for _, m := range res.Unread {
		if m.ExpectsReply {
			continue // listed with the asks
		}
		fmt.Fprintf(s.Out, "- %s: %s\n", senderLabel(m.From), m.Text)
	}
	if len(res.Asks) > 0 {
		fmt.Fprintln(s.Out, "Pending asks:")
		for _, a := range res.Asks {
			sender := a.From.Name
			if sender == "" {
				sender = a.From.ID
			}
			line := fmt.Sprintf("- %s · %s", a.AskID, sender)
			if a.Selector != "" {
				line += " · " + a.Selector
			}
			line += fmt.Sprintf(" · %ds ago", a.ElapsedSeconds)
			if a.DeferredAt != 0 {
				line += " · async"
			}
			fmt.Fprintln(s.Out, line+" · "+a.Preview)
		}
	}
}

func newStatusCmd(s *streams) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "status",
		Short:   "Show this session's connection and queues",
		Example: "  agent-fleet intercom status --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, err := openOneShot(cmd.Context())
			if err != nil {
				return err
			}
			defer o.close()
			res, err := o.ops.Status(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(s.Out, res)
			}
			yes := map[bool]string{true: "Yes", false: "No"}
			fmt.Fprintf(s.Out, "Connected: %s\nSession ID: %s\nHeld by a session holder: %s\nActive sessions: %d\nUnread messages: %d\nQueued outbound messages: %d\nPending asks: %d\n",
				yes[res.Connected], res.SessionID, yes[o.holder], res.ActiveSessions, res.Unread, res.Outbox, res.PendingAsks)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func newSetSummaryCmd(s *streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "set-summary [TEXT|-]",
		Short: "Publish a short status others see in their session list",
		Long: `Publish a short status (at most 400 characters) for others to see. It lasts
while your session is registered: use it from a session holder (listen, mcp).`,
		Example: `  agent-fleet intercom set-summary "refactoring the parser"`,
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			text, err := messageText(s, args, 0)
			if err != nil {
				return err
			}
			o, err := openOneShot(cmd.Context())
			if err != nil {
				return err
			}
			defer o.close()
			if err := o.ops.SetSummary(cmd.Context(), text); err != nil {
				return err
			}
			if !o.holder {
				// Published, but gone with this command's registration.
				fmt.Fprintln(s.Out, "Summary published for this command's registration only: no session holder runs for your id, so it ends now. Run it while agent-fleet intercom listen (or agent-fleet mcp) holds your session.")
				return nil
			}
			fmt.Fprintln(s.Out, "Summary updated.")
			return nil
		},
	}
	return cmd
}
