package verbs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/history"
	"github.com/agent-fleet/agent-fleet/teams"
)

// HistoryHelp is the help of intercom history.
var HistoryHelp = Help{
	Use:   "history [--with X] [--team T] [--search Q] [--since D|TIME] [--limit N]",
	Short: "Show the messages this session sent and received, with their receipts",
	Long: `Show this session's message history, oldest first: what it sent and received,
kept after the inbox entry was read, with each message's receipts (queued,
accepted, delivered, read). The history is local (<agentDir>/intercom/history.db)
and keeps 30 days unless AGENT_FLEET_HISTORY_DAYS says otherwise.`,
	Example: `  agent-fleet intercom history --with alpha --since 2h
  agent-fleet intercom history --search "migration" --json`,
}

// HistoryArgs are the filters of `agent-fleet intercom history` and
// intercom_history, as given.
type HistoryArgs struct {
	With, Team, Search, Since string
	Limit                     int
	JSON                      bool // the CLI's --json
}

var errLimitRange = fmt.Errorf("%w: limit must be between 1 and %d", intercom.ErrInvalidInput, history.MaxLimit)

// FlagSet is the part of the CLI's flag set (pflag's) that Flags uses.
type FlagSet interface {
	StringVar(p *string, name, value, usage string)
	IntVar(p *int, name string, value int, usage string)
	BoolVar(p *bool, name string, value bool, usage string)
}

// Flags declares the arguments as the CLI's flags.
func (a *HistoryArgs) Flags(fs FlagSet) {
	fs.StringVar(&a.With, "with", "", "only messages with this session (id or name)")
	fs.StringVar(&a.Team, "team", "", "only messages exchanged in this named team")
	fs.StringVar(&a.Search, "search", "", "only messages whose text contains this (any letter case)")
	fs.StringVar(&a.Since, "since", "", "only messages since a duration ago (2h, 7d) or a time (2026-12-01)")
	fs.IntVar(&a.Limit, "limit", history.DefaultLimit, fmt.Sprintf("at most this many of the newest messages (1 to %d)", history.MaxLimit))
	fs.BoolVar(&a.JSON, "json", false, "print as JSON")
}

// ShowHistory prints the caller's history as the CLI does: its --limit
// defaults to history.DefaultLimit, so a 0 was given (and is refused, as
// the MCP tool's schema refuses it).
func ShowHistory(ctx context.Context, f *factory.Factory, a HistoryArgs) error {
	if a.Limit == 0 {
		return errLimitRange
	}
	p, id, err := f.SessionIdentity()
	if err != nil {
		return err
	}
	es, err := History(ctx, f, p, id.SessionID, a)
	if err != nil {
		return err
	}
	return output.Show(f.IO.Out, a.JSON, es, output.HistoryText(es, time.Now()))
}

// History lists the history of session id in p as args select
// (history.Store.List); a bad --since or --limit is ErrInvalidInput, a
// --team that is no team name teams.ErrInvalidTeamName.
func History(ctx context.Context, f *factory.Factory, p intercom.Paths, id string, args HistoryArgs) ([]history.Entry, error) {
	q := history.Query{Session: id, With: args.With, Team: args.Team, Search: args.Search, Limit: args.Limit}
	if args.Team != "" {
		if err := teams.ValidateTeamName(args.Team); err != nil {
			return nil, err // no team has that name: a usage error, not an empty history
		}
	}
	if args.Since != "" {
		t, err := ParseSince(args.Since, time.Now())
		if err != nil {
			return nil, fmt.Errorf("%w: %v", intercom.ErrInvalidInput, err)
		}
		q.Since = t
	}
	if args.Limit < 0 || args.Limit > history.MaxLimit {
		return nil, errLimitRange
	}
	if _, err := os.Stat(history.Path(p)); errors.Is(err, os.ErrNotExist) {
		return []history.Entry{}, nil // nothing recorded yet: none is created by reading
	}
	s, err := f.OpenHistory(ctx, p)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.List(ctx, q)
}
