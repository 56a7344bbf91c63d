package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/intercom"
)

type listenOptions struct {
	json       bool
	keepUnread bool
}

func newListenCmd(s *streams) *cobra.Command {
	opts := &listenOptions{}
	cmd := &cobra.Command{
		Use:   "listen",
		Short: "Hold this session and print every message it receives",
		Long: `Register this session, keep it registered across broker restarts, store every
inbound message durably before acknowledging it, and print each one: unread
ones first, then new ones as they arrive, until interrupted. With --json each
message is one JSON object per line.

While listen runs it holds the session: other agent-fleet intercom commands
under the same id act through it. If another process already holds the
session, listen streams from that holder instead.`,
		Example: `  AGENT_INTERCOM_SESSION_ID=alpha agent-fleet intercom listen
  agent-fleet intercom listen --json | while read -r msg; do …; done`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runListen(cmd.Context(), s, opts)
		},
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print one JSON object per message")
	cmd.Flags().BoolVar(&opts.keepUnread, "keep-unread", false, "leave printed messages unread")
	return cmd
}

func runListen(ctx context.Context, s *streams, opts *listenOptions) error {
	p, id, err := resolveIdentity()
	if err != nil {
		return err
	}
	emit := func(m *intercom.MessageView) error {
		if opts.json {
			return printJSON(s.Out, m)
		}
		return printMessage(s, m)
	}
	req := intercom.ListenRequest{KeepUnread: opts.keepUnread}
	team, err := newSessionTeam(p, id)
	if err != nil {
		return err
	}
	defer team.close()
	if hc, err := intercom.DialHolder(ctx, p, id.SessionID); err == nil {
		return hc.Listen(ctx, req, emit)
	}
	activity := startActivity(p, id.SessionID, newLogger(s.Err, "warn"))
	defer activity.Close()
	sess, err := intercom.OpenSession(ctx, intercom.SessionConfig{
		Paths: p, Identity: id, Start: brokerStarter(), AskTTL: askTTL(), AskWait: askWait(), Reconnect: true,
		Filter: team.filter(), ReplayFilter: team.replay(),
		Logger: newLogger(s.Err, "warn"), OnMessage: activity.OnMessage,
	})
	if err != nil {
		return err
	}
	defer sess.Close()
	ops, extra := team.hold(p, sess, newLogger(s.Err, "warn"))
	holder, err := intercom.ListenHolder(intercom.HolderConfig{Paths: p, SessionID: id.SessionID, Ops: ops, Logger: newLogger(s.Err, "warn"), Extra: extra})
	if err != nil && !errors.Is(err, intercom.ErrHeld) {
		return err
	}
	if holder != nil {
		hctx, stop := context.WithCancel(ctx)
		defer stop()
		done := make(chan struct{})
		go func() {
			_ = holder.Serve(hctx)
			close(done)
		}()
		defer func() { stop(); <-done }()
	}
	return sess.Listen(ctx, req, emit)
}

func printMessage(s *streams, m *intercom.MessageView) error {
	at := time.UnixMilli(int64(m.ReceivedAt)).Format("15:04:05")
	head := fmt.Sprintf("[%s] %s", at, senderLabel(m.From))
	switch {
	case m.ExpectsReply:
		head += fmt.Sprintf(" asks (reply with: agent-fleet intercom reply --ask-id %s …)", m.AskID)
	case m.ReplyTo != "":
		head += " replied"
	}
	if _, err := fmt.Fprintf(s.Out, "%s:\n%s\n", head, m.Text); err != nil {
		return err
	}
	printAttachments(s, m)
	return nil
}
