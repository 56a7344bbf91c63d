package factory

import (
	"context"
	"errors"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/teams"
)

// teamRegistry is the fleet registry as teams reads it (teams.Registry). It
// never creates the registry: where there is none, there are no workers.
// One handle is kept open and reopened when the file is replaced. Safe for
// concurrent use.
type teamRegistry struct {
	h *fleet.RegistryHandle
}

func newTeamRegistry(p intercom.Paths) *teamRegistry {
	return &teamRegistry{h: fleet.NewRegistryHandle(fleet.RegistryPath(p), false)}
}

// open returns the registry, nil while there is none.
func (r *teamRegistry) open(ctx context.Context) (*fleet.Registry, error) { return r.h.Get(ctx) }

func (r *teamRegistry) close() { r.h.Close() }

// Worker implements teams.Registry.
func (r *teamRegistry) Worker(ctx context.Context, id, runID string) (*teams.WorkerRecord, error) {
	reg, err := r.open(ctx)
	if err != nil || reg == nil {
		return nil, err
	}
	var w *fleet.Worker
	if runID != "" {
		w, err = reg.GetRun(ctx, id, runID)
	} else {
		w, err = reg.Get(ctx, id)
	}
	if errors.Is(err, fleet.ErrNotFound) || errors.Is(err, fleet.ErrInvalidID) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rec := workerRecord(w)
	return &rec, nil
}

// LiveWorkers implements teams.Registry.
func (r *teamRegistry) LiveWorkers(ctx context.Context) ([]teams.WorkerRecord, error) {
	reg, err := r.open(ctx)
	if err != nil || reg == nil {
		return nil, err
	}
	return liveWorkerRecords(ctx, reg)
}

func liveWorkerRecords(ctx context.Context, reg *fleet.Registry) ([]teams.WorkerRecord, error) {
	// Whole records, not LiveSummaries: a paused worker shows paused, as
	// in list.
	ws, err := reg.List(ctx, fleet.Filter{LiveOnly: true})
	if err != nil {
		return nil, err
	}
	out := make([]teams.WorkerRecord, 0, len(ws))
	for _, w := range ws {
		out = append(out, workerRecord(w))
	}
	return out, nil
}

// workerRecord is a worker as teams reads it.
func workerRecord(w *fleet.Worker) teams.WorkerRecord {
	return teams.WorkerRecord{ID: w.ID, RunID: w.RunID, Manager: w.Manager, Harness: w.Kind, Role: w.Role,
		State: w.ShownState(), Live: w.State.Live()}
}
