package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// Claude Code's channels: an MCP server that declares the experimental
// capability channelCapability may push channelMethod notifications,
// which Claude Code puts before its model as a user message
// <channel source="SERVER" KEY="VALUE"…>content</channel> and acts on at
// once, also when the session is idle. Claude Code listens only to a
// server that its user named with --channels (an allowlisted plugin) or
// --dangerously-load-development-channels server:NAME, and only over the
// legacy (initialize) handshake: docs/wakeups.md.
const (
	channelCapability = "claude/channel"
	channelMethod     = "notifications/claude/channel"
	// channelClient is the clientInfo.name Claude Code sends: only it
	// knows the notification, so only it gets one.
	channelClient = "claude-code"
)

// channelParams are a channel notification's params: content is the
// text, each meta key (an identifier) becomes an attribute of the tag.
type channelParams struct {
	Content string            `json:"content"`
	Meta    map[string]string `json:"meta,omitempty"`
}

// pushRetry is the pause before a failed inbox watch is started again.
const pushRetry = time.Second

// Channel pushes the session's inbound mail into the MCP client's model:
// each batch (intercom.WatchBatches) becomes one channel notification
// that points at intercom_pending, never the messages themselves (the
// inbox stays the source of truth).
type Channel struct {
	ops intercom.Ops
	log *slog.Logger

	mu      sync.Mutex
	conn    mcp.Connection
	cancel  context.CancelFunc
	done    chan struct{}
	stopped bool
}

// NewChannel is the push of ops's mail; Transport and the server options
// of New (Options.Channel) connect it to a client.
func NewChannel(ops intercom.Ops, log *slog.Logger) *Channel {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Channel{ops: ops, log: log}
}

// Transport wraps the server's transport so that the channel can write
// its notifications on the same connection.
func (c *Channel) Transport(t mcp.Transport) mcp.Transport { return channelTransport{t, c} }

type channelTransport struct {
	mcp.Transport
	c *Channel
}

func (t channelTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.Transport.Connect(ctx)
	if err == nil {
		t.c.mu.Lock()
		t.c.conn = conn
		t.c.mu.Unlock()
	}
	return conn, err
}

// serverOptions makes opts declare the channel and start it once a
// client that knows channels is initialized. Claude Code takes channel
// notifications only on a connection of the legacy handshake, so the
// server offers no protocol version from 2026-07-28 on (whose stateless
// revision has no unsolicited notifications on stdio).
func (c *Channel) serverOptions(opts *mcp.ServerOptions) {
	opts.Capabilities.Experimental = map[string]any{channelCapability: map[string]any{}}
	for _, v := range mcp.SupportedProtocolVersions() {
		if v < "2026-07-28" {
			opts.SupportedProtocolVersions = append(opts.SupportedProtocolVersions, v)
		}
	}
	opts.InitializedHandler = func(_ context.Context, req *mcp.InitializedRequest) {
		p := req.Session.InitializeParams()
		if p == nil || p.ClientInfo == nil || p.ClientInfo.Name != channelClient {
			c.log.Debug("no channel push: the client is not Claude Code")
			return
		}
		c.start()
	}
}

// start runs the push until Stop.
func (c *Channel) start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil || c.conn == nil || c.stopped {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel, c.done = cancel, make(chan struct{})
	go func() {
		defer close(c.done)
		for ctx.Err() == nil {
			err := intercom.WatchBatches(ctx, c.ops, intercom.ListenRequest{}, func(b []intercom.MessageView) error { return c.push(ctx, b) })
			if err == nil || ctx.Err() != nil {
				return
			}
			c.log.Warn("pushing inbound mail", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(pushRetry):
			}
		}
	}()
}

// push sends one batch's notification.
func (c *Channel) push(ctx context.Context, batch []intercom.MessageView) error {
	n := output.NewMailNotice(batch, output.ToolReader)
	raw, err := json.Marshal(channelParams{Content: n.Text, Meta: channelMeta(n)})
	if err != nil {
		return err
	}
	c.mu.Lock()
	conn := c.conn
	c.mu.Unlock()
	if err := conn.Write(ctx, &jsonrpc.Request{Method: channelMethod, Params: raw}); err != nil {
		return fmt.Errorf("writing the channel notification: %w", err)
	}
	c.log.Debug("pushed inbound mail", "messages", len(batch))
	return nil
}

// channelMeta are the tag's attributes: the senders' ids, the number of
// messages and of asks.
func channelMeta(n output.MailNotice) map[string]string {
	meta := map[string]string{"from": strings.Join(n.From, " "), "messages": strconv.Itoa(n.Messages)}
	if n.Asks > 0 {
		meta["asks"] = strconv.Itoa(n.Asks)
	}
	return meta
}

// Stop ends the push and waits for it.
func (c *Channel) Stop() {
	c.mu.Lock()
	cancel, done := c.cancel, c.done
	c.stopped = true
	c.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}
