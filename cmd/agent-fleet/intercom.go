package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

func newIntercomCmd(s *streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "intercom",
		Short: "Message other agent sessions through the intercom broker",
		Long: `Talk to other sessions on this machine through the intercom broker (started
on demand). You are AGENT_INTERCOM_SESSION_ID, or operator-<username> if unset;
AGENT_INTERCOM_SCOPE_ID puts you in a private scope.

When a process already holds your session (agent-fleet intercom listen,
agent-fleet mcp, a worker), these commands act through it, as that session.`,
		Example: `  agent-fleet intercom list
  agent-fleet intercom send alpha "build is green"
  AGENT_INTERCOM_SESSION_ID=alpha agent-fleet intercom listen --json`,
	}
	cmd.AddCommand(newWhoamiCmd(s), newListCmd(s), newSendCmd(s), newAskCmd(s), newReplyCmd(s),
		newPendingCmd(s), newStatusCmd(s), newSetSummaryCmd(s), newListenCmd(s))
	return cmd
}

// askTTL reads PI_INTERCOM_ASK_TIMEOUT_MS (spec §5.7), default 10 min.
func askTTL() time.Duration {
	if v := strings.TrimSpace(os.Getenv(askTimeoutEnv)); v != "" {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > 0 {
			return time.Duration(ms) * time.Millisecond
		}
	}
	return intercom.DefaultAskTTL
}

// askWaitEnv sets a session's soft wait for replies (spec §5.7).
const askWaitEnv = "PI_INTERCOM_ASK_WAIT_MS"

// askWait reads PI_INTERCOM_ASK_WAIT_MS, capped at the 120 s ask limit.
func askWait() time.Duration {
	if v := strings.TrimSpace(os.Getenv(askWaitEnv)); v != "" {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > 0 {
			return min(time.Duration(ms)*time.Millisecond, intercom.MaxAskWait)
		}
	}
	return intercom.DefaultAskWait
}

// oneShot is how a CLI verb reaches its session: through the live holder
// of its id, or by registering itself for the length of the command.
type oneShot struct {
	ops     intercom.Ops
	session *intercom.Session // nil when acting through a holder
	holder  bool
}

func (o *oneShot) close() {
	if o.session != nil {
		_ = o.session.Close()
	}
}

// resolveIdentity is the identity of a CLI verb (DESIGN.md "Identity").
func resolveIdentity() (intercom.Paths, intercom.Identity, error) {
	p, err := intercom.DefaultPaths()
	if err != nil {
		return p, intercom.Identity{}, err
	}
	id, err := intercom.ResolveIdentity(intercom.IdentityOptions{Kind: intercom.OneShot})
	if err != nil {
		return p, id, &usageError{err}
	}
	return p, id, nil
}

// openOneShot acts through a live holder of the session, or registers.
func openOneShot(ctx context.Context) (*oneShot, error) {
	p, id, err := resolveIdentity()
	if err != nil {
		return nil, err
	}
	team, err := newSessionTeam(p, id) // the Boss contract, if any (spec §7.3)
	if err != nil {
		return nil, err
	}
	if hc, err := intercom.DialHolder(ctx, p, id.SessionID); err == nil {
		return &oneShot{ops: team.through(p, hc), holder: true}, nil
	}
	sess, err := intercom.OpenSession(ctx, intercom.SessionConfig{
		Paths: p, Identity: id, Start: brokerStarter(), AskTTL: askTTL(), AskWait: askWait(),
		Filter: team.filter(), ReplayFilter: team.replay(),
	})
	if err != nil {
		return nil, err
	}
	return &oneShot{ops: team.own(p, sess), session: sess}, nil
}

// messageText takes the text from the argument, or from stdin when the
// argument is "-" or absent and stdin is not a terminal.
func messageText(s *streams, args []string, idx int) (string, error) {
	if len(args) > idx && args[idx] != "-" {
		return args[idx], nil
	}
	if f, ok := s.In.(*os.File); ok && term.IsTerminal(int(f.Fd())) && (len(args) <= idx) {
		return "", &usageError{errors.New("give the message as an argument, or pipe it on stdin")}
	}
	data, err := io.ReadAll(io.LimitReader(s.In, wire.MaxTextBytes+1))
	if err != nil {
		return "", err
	}
	if len(data) > wire.MaxTextBytes {
		return "", &usageError{fmt.Errorf("message text is over the %d-byte limit", wire.MaxTextBytes)}
	}
	return strings.TrimRight(string(data), "\n"), nil
}

// attachmentFlags are --attach-file and --attach-snippet.
type attachmentFlags struct {
	files    []string
	snippets []string
}

func (a *attachmentFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&a.files, "attach-file", nil, "attach a file (repeatable)")
	cmd.Flags().StringArrayVar(&a.snippets, "attach-snippet", nil, "attach a snippet as NAME=PATH (repeatable)")
}

func (a *attachmentFlags) load() ([]wire.Attachment, error) {
	var out []wire.Attachment
	read := func(path string) (string, error) {
		data, err := os.ReadFile(path)
		if err != nil {
			return "", &usageError{fmt.Errorf("attachment: %w", err)}
		}
		if len(data) > wire.MaxAttachmentContentBytes {
			return "", &usageError{fmt.Errorf("attachment %s is over the %d-byte limit", path, wire.MaxAttachmentContentBytes)}
		}
		return string(data), nil
	}
	for _, f := range a.files {
		content, err := read(f)
		if err != nil {
			return nil, err
		}
		out = append(out, wire.Attachment{Type: "file", Name: filepath.Base(f), Content: content, Language: languageOf(f)})
	}
	for _, sn := range a.snippets {
		name, path, ok := strings.Cut(sn, "=")
		if !ok || name == "" || path == "" {
			return nil, &usageError{fmt.Errorf("--attach-snippet wants NAME=PATH, got %q", sn)}
		}
		content, err := read(path)
		if err != nil {
			return nil, err
		}
		out = append(out, wire.Attachment{Type: "snippet", Name: name, Content: content, Language: languageOf(path)})
	}
	if len(out) > wire.MaxAttachments {
		return nil, &usageError{fmt.Errorf("at most %d attachments", wire.MaxAttachments)}
	}
	return out, nil
}

func languageOf(path string) string {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".go":
		return "go"
	case ".ts", ".tsx":
		return "typescript"
	case ".js", ".mjs":
		return "javascript"
	case ".py":
		return "python"
	case ".rs":
		return "rust"
	case ".sh":
		return "bash"
	case ".json":
		return "json"
	case ".md":
		return "markdown"
	case ".yaml", ".yml":
		return "yaml"
	}
	return ""
}

// printJSON writes v as one JSON line.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func senderLabel(f intercom.Sender) string {
	if f.Name != "" && f.Name != f.ID {
		return fmt.Sprintf("%s (%s)", f.Name, f.ID)
	}
	return f.ID
}
