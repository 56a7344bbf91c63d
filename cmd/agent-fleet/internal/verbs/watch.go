package verbs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/fleet"
)

// redrawEvery is how often a watch on a terminal redraws without a
// change, so that the spans it shows ("57m left") stay true.
const redrawEvery = 30 * time.Second

// Watch runs a read-only verb (list, status) now and again after every
// change of the fleet (fleet.WatchFleet: registry writes, not polling),
// until ctx ends (then it returns nil). On a terminal it redraws in place
// as watch(1) does, under a line naming the command and the time;
// elsewhere it prints each report that differs from the one before
// (text reports separated by a blank line; with asJSON one JSON line
// each). An error of the verb is shown in the report's place and the
// watch goes on.
func Watch(ctx context.Context, fe *factory.FleetEnv, a Args, out io.Writer, terminal, asJSON bool, title string) error {
	changes, err := fleet.WatchFleet(ctx, fe.Paths)
	if err != nil {
		return err
	}
	var redraw <-chan time.Time
	if terminal {
		t := time.NewTicker(redrawEvery)
		defer t.Stop()
		redraw = t.C
	}
	var last []byte
	for {
		var buf bytes.Buffer
		rep, err := Run(ctx, fe, a)
		switch {
		case ctx.Err() != nil:
			return nil
		case last == nil && errors.Is(err, fleet.ErrNotFound):
			return err // a worker that is not there to begin with: a wrong id, exit 3
		case err != nil && asJSON:
			_ = output.PrintJSON(&buf, output.Failure(err))
		case err != nil:
			fmt.Fprintln(&buf, "agent-fleet:", err)
		default:
			_ = output.Print(&buf, rep, asJSON)
		}
		switch {
		case terminal:
			// Home, the report, then clear what a longer one left below.
			fmt.Fprintf(out, "\x1b[H\x1b[2J%s    %s\n\n", title, output.HumanTime(time.Now()))
			_, _ = out.Write(buf.Bytes())
		case !bytes.Equal(buf.Bytes(), last):
			if last != nil && !asJSON {
				fmt.Fprintln(out)
			}
			_, _ = out.Write(buf.Bytes())
		}
		last = buf.Bytes()
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-changes.C:
			if !ok {
				return fmt.Errorf("the watch of the fleet ended")
			}
		case <-redraw:
		}
	}
}

// Follow is logs --follow: the lines a.LogQuery selects, then each new
// one, until the worker's incarnation ends (fleet.FollowLog); it returns
// the incarnation as it ended.
func Follow(ctx context.Context, fe *factory.FleetEnv, a Args, emit func(fleet.LogLine) error) (*fleet.Worker, error) {
	if err := a.Check(); err != nil {
		return nil, err
	}
	return fe.Fleet.FollowLog(ctx, a.ID, a.LogQuery(), emit)
}
