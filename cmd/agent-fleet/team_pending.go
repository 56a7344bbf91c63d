package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/teams"
)

// runInboxOf is `agent-fleet intercom pending --inbox-of TARGET`: a
// manager's read-only look at an owned coworker's pending asks (spec §7.4).
// It runs in the session's holder when one runs (which resolves the team
// with its own scope), else in this process.
func runInboxOf(ctx context.Context, s *streams, target string, req intercom.PendingRequest, asJSON bool) error {
	if req.MarkRead {
		return &usageError{errors.New("--mark-read cannot be used with --inbox-of: inspecting another session's inbox is read-only")}
	}
	askID := req.AskID
	st, release, err := openTeamSession(ctx)
	if err != nil {
		return err
	}
	defer release()
	insp, err := st.service().InspectInbox(ctx, teams.InspectRequest{Session: target, AskID: askID})
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(s.Out, insp)
	}
	_, err = fmt.Fprintln(s.Out, inspectionText(insp, askID != ""))
	return err
}
