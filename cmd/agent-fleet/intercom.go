package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

func newIntercomCmd(f *factory.Factory) *cobra.Command {
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
	cmd.AddCommand(newWhoamiCmd(f, nil), newSessionsCmd(f, nil), newSendCmd(f, nil), newAskCmd(f, nil), newReplyCmd(f, nil),
		newPendingCmd(f, nil), newSessionStatusCmd(f, nil), newSetSummaryCmd(f, nil), newListenCmd(f, nil), newHistoryCmd(f))
	return cmd
}

// messageText takes the text from the argument, or from stdin when the
// argument is "-" or absent and stdin is not a terminal.
func messageText(in io.Reader, args []string, idx int) (string, error) {
	if len(args) > idx && args[idx] != "-" {
		return args[idx], nil
	}
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) && (len(args) <= idx) {
		return "", factory.Usage(errors.New("give the message as an argument, or pipe it on stdin"))
	}
	data, err := io.ReadAll(io.LimitReader(in, wire.MaxTextBytes+1))
	if err != nil {
		return "", err
	}
	if len(data) > wire.MaxTextBytes {
		return "", factory.Usagef("message text is over the %d-byte limit", wire.MaxTextBytes)
	}
	return strings.TrimRight(string(data), "\n"), nil
}

// messageBody is messageText for a message someone reads (send, ask,
// reply): empty or whitespace-only text is a usage error, whether it came
// as an argument or on stdin.
func messageBody(in io.Reader, args []string, idx int) (string, error) {
	text, err := messageText(in, args, idx)
	if err != nil {
		return "", err
	}
	if p := intercom.TextProblem(text); p != "" {
		return "", factory.Usagef("%s: give its text as an argument, or pipe it on stdin", p)
	}
	return text, nil
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
			return "", factory.Usage(fmt.Errorf("attachment: %w", err))
		}
		if len(data) > wire.MaxAttachmentContentBytes {
			return "", factory.Usagef("attachment %s is over the %d-byte limit", path, wire.MaxAttachmentContentBytes)
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
			return nil, factory.Usagef("--attach-snippet wants NAME=PATH, got %q", sn)
		}
		content, err := read(path)
		if err != nil {
			return nil, err
		}
		out = append(out, wire.Attachment{Type: "snippet", Name: name, Content: content, Language: languageOf(path)})
	}
	if len(out) > wire.MaxAttachments {
		return nil, factory.Usagef("at most %d attachments", wire.MaxAttachments)
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
