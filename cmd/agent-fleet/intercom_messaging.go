package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/intercom"
)

type sendOptions struct {
	json bool
	att  attachmentFlags
}

func newSendCmd(s *streams) *cobra.Command {
	opts := &sendOptions{}
	cmd := &cobra.Command{
		Use:   "send TO [TEXT|-]",
		Short: "Send a message and wait until the recipient has stored it",
		Long: `Send a message to TO (a session id, a unique name, or a unique id prefix of
at least 4 characters) and wait until the broker reports it delivered. The
message is kept in your durable outbox until then; if the outcome cannot be
known (exit 8), it is retried from the outbox on your next registration.`,
		Example: `  agent-fleet intercom send alpha "tests pass on main"
  git diff | agent-fleet intercom send alpha - --attach-snippet fix.go=fix.go`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			text, err := messageText(s, args, 1)
			if err != nil {
				return err
			}
			att, err := opts.att.load()
			if err != nil {
				return err
			}
			return runSend(cmd.Context(), s, opts, intercom.SendRequest{To: args[0], Text: text, Attachments: att})
		},
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print the result as JSON")
	opts.att.register(cmd)
	return cmd
}

func runSend(ctx context.Context, s *streams, opts *sendOptions, req intercom.SendRequest) error {
	o, err := openOneShot(ctx)
	if err != nil {
		return err
	}
	defer o.close()
	res, err := o.ops.Send(ctx, req)
	if err != nil {
		return err
	}
	return reportSend(s, opts.json, res, "Message sent to")
}

// reportSend prints a send or reply outcome; a failed delivery is an error
// (with its exit code) after the result is printed.
func reportSend(s *streams, asJSON bool, res *intercom.SendResult, what string) error {
	if asJSON {
		if err := printJSON(s.Out, res); err != nil {
			return err
		}
	} else if res.OK {
		fmt.Fprintf(s.Out, "%s %s.\n", what, res.To)
	}
	if !res.OK {
		return fmt.Errorf("message to %q was not delivered: %w", res.To,
			&intercom.DeliveryError{Code: res.Code, Reason: res.Reason, Accepted: res.Accepted})
	}
	return nil
}

type askOptions struct {
	json    bool
	timeout time.Duration
	att     attachmentFlags
}

func newAskCmd(s *streams) *cobra.Command {
	opts := &askOptions{}
	cmd := &cobra.Command{
		Use:   "ask TO [TEXT|-]",
		Short: "Ask a question and wait for the reply",
		Long: `Ask TO a question and print its reply. Without a session holder, the ask is
cancelled when --timeout runs out and the command says so; when your session
is held (listen, mcp), a late reply lands in the holder: see
"agent-fleet intercom pending".`,
		Example: `  agent-fleet intercom ask alpha "is the migration done?"
  agent-fleet intercom ask alpha "ok to deploy?" --timeout 30s --json`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			text, err := messageText(s, args, 1)
			if err != nil {
				return err
			}
			att, err := opts.att.load()
			if err != nil {
				return err
			}
			if opts.timeout <= 0 || opts.timeout > intercom.MaxAskWait {
				return &usageError{fmt.Errorf("--timeout must be between 1ms and %s", intercom.MaxAskWait)}
			}
			return runAsk(cmd.Context(), s, opts, intercom.AskRequest{To: args[0], Text: text, Attachments: att, Wait: opts.timeout})
		},
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print the result as JSON")
	cmd.Flags().DurationVar(&opts.timeout, "timeout", intercom.MaxAskWait, "how long to wait for the reply")
	opts.att.register(cmd)
	return cmd
}

func runAsk(ctx context.Context, s *streams, opts *askOptions, req intercom.AskRequest) error {
	o, err := openOneShot(ctx)
	if err != nil {
		return err
	}
	defer o.close()
	req.OnTimeout = intercom.DeferOnTimeout
	if !o.holder {
		req.OnTimeout = intercom.CancelOnTimeout // nobody would receive a late reply
	}
	res, err := o.ops.Ask(ctx, req)
	if err != nil {
		return err
	}
	if opts.json {
		if err := printJSON(s.Out, res); err != nil {
			return err
		}
	}
	switch {
	case !res.OK:
		return fmt.Errorf("ask to %q failed: %w", res.To, &intercom.DeliveryError{Code: res.Code, Reason: res.Reason, Accepted: res.Accepted})
	case res.Replied:
		if !opts.json {
			fmt.Fprintf(s.Out, "Reply from %s:\n%s\n", senderLabel(res.Reply.From), res.Reply.Text)
			printAttachments(s, res.Reply)
		}
		return nil
	case res.Pending:
		if !opts.json {
			fmt.Fprintf(s.Out, "No reply from %q within %s. The ask stays open: the reply will appear in `agent-fleet intercom pending`.\n", res.To, req.Wait)
		}
		return nil
	default:
		return fmt.Errorf("no reply from %q within %s; the ask was cancelled: %w", res.To, req.Wait, errAskTimeout)
	}
}

func printAttachments(s *streams, m *intercom.MessageView) {
	for _, a := range m.Attachments {
		fmt.Fprintf(s.Out, "---\nAttachment: %s\n%s\n", a.Name, a.Content)
	}
}

type replyOptions struct {
	json  bool
	askID string
	to    string
	which string
	att   attachmentFlags
}

func newReplyCmd(s *streams) *cobra.Command {
	opts := &replyOptions{}
	cmd := &cobra.Command{
		Use:   "reply [TEXT|-]",
		Short: "Reply to a pending ask",
		Long: `Reply to an ask you received. With one pending ask, no selector is needed;
otherwise choose it with --ask-id (from "agent-fleet intercom pending"), or
with the sender (--to) and, for several asks of one sender, --which.`,
		Example: `  agent-fleet intercom reply "yes, go ahead"
  agent-fleet intercom reply --ask-id ask-3Jc… "done"
  agent-fleet intercom reply --to beta --which oldest "first answer"`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			text, err := messageText(s, args, 0)
			if err != nil {
				return err
			}
			att, err := opts.att.load()
			if err != nil {
				return err
			}
			if opts.which != "" && opts.which != "oldest" && opts.which != "latest" {
				return &usageError{fmt.Errorf("--which must be oldest or latest")}
			}
			o, err := openOneShot(cmd.Context())
			if err != nil {
				return err
			}
			defer o.close()
			res, err := o.ops.Reply(cmd.Context(), intercom.ReplyRequest{Text: text, Attachments: att,
				AskID: opts.askID, To: opts.to, Which: opts.which})
			if err != nil {
				return err
			}
			return reportSend(s, opts.json, res, "Reply sent to")
		},
	}
	f := cmd.Flags()
	f.BoolVar(&opts.json, "json", false, "print the result as JSON")
	f.StringVar(&opts.askID, "ask-id", "", "the ask to answer (from pending)")
	f.StringVar(&opts.to, "to", "", "the sender whose ask to answer (id or name)")
	f.StringVar(&opts.which, "which", "", "oldest or latest, when the sender has several asks")
	opts.att.register(cmd)
	return cmd
}
