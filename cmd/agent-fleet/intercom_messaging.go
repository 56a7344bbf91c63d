package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/teams"
)

type sendOptions struct {
	Factory *factory.Factory
	IO      *factory.IOStreams
	JSON    bool
	Req     intercom.SendRequest
	att     attachmentFlags
	team    string
}

func newSendCmd(f *factory.Factory, runF func(*sendOptions) error) *cobra.Command {
	opts := &sendOptions{Factory: f, IO: f.IO}
	cmd := &cobra.Command{
		Use:   "send TO [TEXT|-]",
		Short: "Send a message and wait until the recipient has stored it",
		Long: `Send a message to TO (a session id, a unique name, or a unique id prefix of
at least 4 characters; a member of one of your named teams by name from any
scope) and wait until the broker reports it delivered. The message is kept
in your durable outbox until then. Exit 8 means the outcome is unknown: no
answer came (the message stays in the outbox and is sent again on your next
registration), or the recipient was handed it but did not acknowledge it in
time (DELIVERY_TIMEOUT: it may still read it, and nothing is sent again).

TO team:NAME (or --team NAME with only the text) sends to every connected
member of a team you belong to, team:NAME/manager or team:NAME/member to
those of that role, and * to the members of all your teams: one message
(and message id) each, every outcome reported. With TO and --team NAME, the
message is to TO in that team (needed when you share several teams).
workflow: targets are refused: agent-fleet has no workflows.`,
		Example: `  agent-fleet intercom send alpha "tests pass on main"
  agent-fleet intercom send --team billing "release at 5"
  git diff | agent-fleet intercom send alpha - --attach-snippet fix.go=fix.go`,
		Args: targetAndText,
		RunE: func(cmd *cobra.Command, args []string) error {
			to, idx := args[0], 1
			if opts.team != "" && len(args) == 1 {
				to, idx = teams.TeamTargetPrefix+opts.team, 0
			}
			text, err := messageBody(f.IO.In, args, idx)
			if err != nil {
				return err
			}
			att, err := opts.att.load()
			if err != nil {
				return err
			}
			opts.Req = intercom.SendRequest{To: to, Text: text, Attachments: att}
			if idx == 1 {
				opts.Req.Team = opts.team
			}
			if runF != nil {
				return runF(opts)
			}
			return sendRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the result as JSON")
	cmd.Flags().StringVar(&opts.team, "team", "", "the named team: alone with the text, send to its members; with TO, the team the message is in")
	opts.att.register(cmd)
	return cmd
}

func sendRun(ctx context.Context, opts *sendOptions) error {
	o, err := opts.Factory.OneShot(ctx)
	if err != nil {
		return err
	}
	defer o.Close()
	res, err := o.Ops.Send(ctx, opts.Req)
	if err != nil {
		return err
	}
	return reportSend(opts.IO, opts.JSON, res, "Message sent to")
}

// reportSend prints a send or reply outcome; a failed delivery is an error
// (with its exit code) after the result is printed.
func reportSend(io *factory.IOStreams, asJSON bool, res *intercom.SendResult, what string) error {
	if asJSON {
		if err := output.PrintJSON(io.Out, res); err != nil {
			return err
		}
	} else if res.Recipients != nil {
		fmt.Fprintln(io.Out, output.TeamSendText(res))
	} else if res.OK {
		fmt.Fprintln(io.Out, output.SentText(res, what))
	}
	if !res.OK {
		return output.DeliveryFailed("message to "+strconv.Quote(res.To), output.NotDelivered(res), res.Code, res.Reason, res.Accepted)
	}
	return nil
}

type askOptions struct {
	Factory *factory.Factory
	IO      *factory.IOStreams
	JSON    bool
	Timeout time.Duration
	Req     intercom.AskRequest
	att     attachmentFlags
}

func newAskCmd(f *factory.Factory, runF func(*askOptions) error) *cobra.Command {
	opts := &askOptions{Factory: f, IO: f.IO}
	cmd := &cobra.Command{
		Use:   "ask TO [TEXT|-]",
		Short: "Ask a question and wait for the reply",
		Long: `Ask TO a question and print its reply, waiting up to --timeout (45s by
default, as intercom_ask does; at most 2m). Without a session holder, the ask
is cancelled when --timeout runs out and the command says so; when your
session is held (listen, mcp), a late reply lands in the holder: see
"agent-fleet intercom pending" (a listen consuming the session prints it).`,
		Example: `  agent-fleet intercom ask alpha "is the migration done?"
  agent-fleet intercom ask alpha "ok to deploy?" --timeout 30s --json`,
		Args: targetAndText,
		RunE: func(cmd *cobra.Command, args []string) error {
			text, err := messageBody(f.IO.In, args, 1)
			if err != nil {
				return err
			}
			att, err := opts.att.load()
			if err != nil {
				return err
			}
			if opts.Timeout <= 0 || opts.Timeout > intercom.MaxAskWait {
				return factory.Usagef("--timeout must be between 1ms and %s", intercom.MaxAskWait)
			}
			opts.Req = intercom.AskRequest{To: args[0], Text: text, Attachments: att, Wait: opts.Timeout, Team: opts.Req.Team}
			if runF != nil {
				return runF(opts)
			}
			return askRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print the result as JSON")
	cmd.Flags().StringVar(&opts.Req.Team, "team", "", "the named team the ask is in (when you share several with TO)")
	cmd.Flags().DurationVar(&opts.Timeout, "timeout", intercom.AskTimeout, fmt.Sprintf("how long to wait for the reply, at most %s (intercom_ask's default too)", intercom.MaxAskWait))
	opts.att.register(cmd)
	return cmd
}

func askRun(ctx context.Context, opts *askOptions) error {
	o, err := opts.Factory.OneShot(ctx)
	if err != nil {
		return err
	}
	defer o.Close()
	req := opts.Req
	req.OnTimeout = intercom.DeferOnTimeout
	if !o.Holder {
		req.OnTimeout = intercom.CancelOnTimeout // nobody would receive a late reply
	}
	res, err := o.Ops.Ask(ctx, req)
	if err != nil {
		return err
	}
	out := opts.IO.Out
	if opts.JSON {
		if err := output.PrintJSON(out, res); err != nil {
			return err
		}
	}
	switch {
	case !res.OK:
		return output.DeliveryFailed("ask to "+strconv.Quote(res.To), "failed", res.Code, res.Reason, res.Accepted)
	case res.Replied:
		if !opts.JSON {
			fmt.Fprintln(out, output.ReplyText(res.Reply))
		}
		return nil
	case res.Pending:
		if !opts.JSON {
			fmt.Fprintf(out, "No reply from %q within %s. The ask stays open: %s.\n", res.To, req.Wait, output.LateReplyWhere(res.ListenerPID))
		}
		return nil
	default:
		return output.NoReply(res, req.Wait, factory.ErrAskTimeout)
	}
}

type replyOptions struct {
	Factory *factory.Factory
	IO      *factory.IOStreams
	JSON    bool
	Req     intercom.ReplyRequest
	att     attachmentFlags
}

func newReplyCmd(f *factory.Factory, runF func(*replyOptions) error) *cobra.Command {
	opts := &replyOptions{Factory: f, IO: f.IO}
	cmd := &cobra.Command{
		Use:   "reply [TEXT|-]",
		Short: "Reply to a pending ask",
		Long: `Reply to an ask you received. With one pending ask, no selector is needed;
otherwise choose it with --ask-id (from "agent-fleet intercom pending"), or
with the sender (--to) and, for several asks of one sender, --which.`,
		Example: `  agent-fleet intercom reply "yes, go ahead"
  agent-fleet intercom reply --ask-id ask-3Jc… "done"
  agent-fleet intercom reply --to beta --which oldest "first answer"`,
		Args: optionalArg("text"),
		RunE: func(cmd *cobra.Command, args []string) error {
			text, err := messageBody(f.IO.In, args, 0)
			if err != nil {
				return err
			}
			if opts.Req.Attachments, err = opts.att.load(); err != nil {
				return err
			}
			if opts.Req.Which != "" && opts.Req.Which != "oldest" && opts.Req.Which != "latest" {
				return factory.Usagef("--which must be oldest or latest")
			}
			opts.Req.Text = text
			if runF != nil {
				return runF(opts)
			}
			return replyRun(cmd.Context(), opts)
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&opts.JSON, "json", false, "print the result as JSON")
	fs.StringVar(&opts.Req.AskID, "ask-id", "", "the ask to answer (from pending)")
	fs.StringVar(&opts.Req.To, "to", "", "the sender whose ask to answer (id or name)")
	fs.StringVar(&opts.Req.Which, "which", "", "oldest or latest, when the sender has several asks")
	fs.StringVar(&opts.Req.ContextID, "context-id", "", "the message to answer, any message (from pending)")
	fs.StringVar(&opts.Req.Team, "team", "", "must be the original message's team (a reply keeps it)")
	opts.att.register(cmd)
	return cmd
}

func replyRun(ctx context.Context, opts *replyOptions) error {
	o, err := opts.Factory.OneShot(ctx)
	if err != nil {
		return err
	}
	defer o.Close()
	res, err := o.Ops.Reply(ctx, opts.Req)
	if err != nil {
		return err
	}
	return reportSend(opts.IO, opts.JSON, res, "Reply sent to")
}
