//go:build !windows

package shim

import (
	"context"
	"errors"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
)

// recordUsage counts what turn rec consumed (its share of the running
// totals where the harness reports those) in the turn state and, with the
// manager of the turn, in the registry. A turn that consumed nothing is not
// counted; a model the output does not name is the one the worker was
// spawned with.
func (w *wakeLoop) recordUsage(ctx context.Context, rec *harness.TurnRecord, res harness.TurnResult, manager string) {
	u, base := harness.TurnUsage(res, w.state.UsageBaseline)
	w.state.UsageBaseline = base
	if u == nil || u.IsZero() {
		return
	}
	if u.Model == "" {
		u.Model = w.cfg.Spec.Model
	}
	rec.Usage = u
	w.state.Usage.Add(*u)
	reg, err := w.cfg.Registry.Get(ctx)
	if err != nil || reg == nil {
		w.cfg.Logger.Warn("registry unavailable; the turn's usage is in the turn record only", "turn", rec.N, "err", err)
		return
	}
	_, err = reg.RecordTurnUsage(context.WithoutCancel(ctx), fleet.TurnUsage{ID: w.cfg.WorkerID, RunID: w.cfg.RunID,
		Turn: rec.N, EndedAt: rec.EndedAt, Manager: manager, Usage: *u})
	if err != nil && !errors.Is(err, fleet.ErrNotFound) {
		w.cfg.Logger.Warn("could not record the turn's usage in the registry", "turn", rec.N, "err", err)
	}
}
