package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/intercom"
)

type listenOptions struct {
	Factory     *factory.Factory
	IO          *factory.IOStreams
	JSON        bool
	KeepUnread  bool
	NotifyLines bool
	Share       bool
}

func newListenCmd(f *factory.Factory, runF func(*listenOptions) error) *cobra.Command {
	opts := &listenOptions{Factory: f, IO: f.IO}
	cmd := &cobra.Command{
		Use:   "listen",
		Short: "Hold this session and print every message it receives",
		Long: `Register this session, keep it registered across broker restarts, store every
inbound message durably before acknowledging it, and print each one: unread
ones first, then new ones as they arrive, until interrupted. With --json each
message is one JSON object per line.

While listen runs it holds the session: other agent-fleet intercom commands
under the same id act through it. If another process already holds the
session (agent-fleet mcp, a worker), listen streams from that holder
instead, and takes the session over when that process goes, even after a
kill -9. One listen at a time prints and consumes a session's messages: a
second one is refused (exit 4) with the pid of the first; --keep-unread
only watches and is not counted.

--notify-lines prints one short line per batch of new mail instead, leaving
it unread: a wake-up for harnesses that watch output (docs/wakeups.md).

--share (or AGENT_FLEET_SHARE=1) asks this host's node (agent-fleet node run)
to announce the session to the other hosts after every registration
(docs/federation.md); without a node the session stays on this host.

It says on stderr, once it runs, as whom it listens and where; stdout
carries only the messages.`,
		Example: `  AGENT_INTERCOM_SESSION_ID=alpha agent-fleet intercom listen
  agent-fleet intercom listen --json | while read -r msg; do …; done
  agent-fleet intercom listen --notify-lines   # one line per batch, for a watching harness`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(opts)
			}
			return listenRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print one JSON object per message")
	cmd.Flags().BoolVar(&opts.KeepUnread, "keep-unread", false, "leave printed messages unread")
	cmd.Flags().BoolVar(&opts.Share, "share", false, "ask this host's node to announce the session to the other hosts (also AGENT_FLEET_SHARE=1)")
	cmd.Flags().BoolVar(&opts.NotifyLines, "notify-lines", false, "print one short line per batch of new messages instead of the messages, leaving them unread")
	return cmd
}

// listenRun holds the session (or streams from its live holder, taking
// the session over when that holder goes) and prints what arrives.
func listenRun(ctx context.Context, opts *listenOptions) error {
	f := opts.Factory
	p, id, err := f.Identity()
	if err != nil {
		return err
	}
	s, err := f.Attach(ctx, p, id, factory.AttachOptions{Mode: intercom.AttachHold, Logger: f.Logger("warn"), Share: opts.Share})
	if err != nil {
		return err
	}
	defer s.Close()
	// One line on stderr says that it runs, and as whom; stdout carries
	// only the messages (--json stays one object per line).
	starts := 0
	started := func() {
		starts++
		if starts == 1 {
			fmt.Fprintln(opts.IO.Err, output.ListeningText(id.SessionID, id.Name, p.BrokerSocket(), s.Holder))
			return
		}
		fmt.Fprintln(opts.IO.Err, output.ListeningAgainText(id.SessionID))
	}
	req := intercom.ListenRequest{KeepUnread: opts.KeepUnread, Started: started}
	if opts.NotifyLines {
		return intercom.WatchBatches(ctx, s.Ops, req, output.NoticePrinter(opts.IO.Out, opts.JSON, output.CLIReader))
	}
	return s.Ops.Listen(ctx, req, func(m *intercom.MessageView) error {
		return output.Show(opts.IO.Out, opts.JSON, m, output.MessageText(m))
	})
}
