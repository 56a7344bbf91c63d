package factory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/teams"
)

func init() {
	// Every registry write in this process refreshes the workers.json view
	// the TypeScript adapters' intercom_team reads (spec §7 item 1).
	fleet.SetChangeHook(refreshWorkersView)
}

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
	rec := workerRecord(w.Summary())
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
	ss, err := reg.LiveSummaries(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]teams.WorkerRecord, 0, len(ss))
	for _, s := range ss {
		out = append(out, workerRecord(s))
	}
	return out, nil
}

// workerRecord is a worker as teams reads it.
func workerRecord(s fleet.Summary) teams.WorkerRecord {
	return teams.WorkerRecord{ID: s.ID, RunID: s.RunID, Manager: s.Manager, Harness: s.Kind, Role: s.Role,
		State: string(s.State), Live: s.State.Live()}
}

// refreshWorkersView rewrites <agentDir>/intercom/orchestrator/workers.json
// from a registry that just changed, when that registry is an agent
// directory's fleet.db and the file is absent or agent-fleet's own.
func refreshWorkersView(ctx context.Context, reg *fleet.Registry) {
	orch := filepath.Dir(reg.Path())
	if filepath.Base(reg.Path()) != "fleet.db" || filepath.Base(orch) != "orchestrator" || filepath.Base(filepath.Dir(orch)) != "intercom" {
		return
	}
	p := intercom.NewPaths(filepath.Dir(filepath.Dir(orch)))
	_, err := teams.RefreshWorkersView(ctx, p, func(ctx context.Context) ([]teams.WorkerRecord, error) {
		return liveWorkerRecords(ctx, reg)
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent-fleet: could not refresh the workers.json view:", err)
	}
}

// workersViewCheck is doctor's word on workers.json: whose it is.
func workersViewCheck(p intercom.Paths) fleet.Check {
	st := teams.InspectWorkersView(p)
	c := fleet.Check{Name: "workers.json"}
	switch st.State {
	case teams.ViewAbsent:
		c.Status, c.Detail = fleet.CheckOK, "no "+st.Path+" yet; agent-fleet writes it (for the TypeScript adapters' intercom_team) at the next fleet change"
	case teams.ViewOurs:
		c.Status, c.Detail = fleet.CheckOK, fmt.Sprintf("%s is agent-fleet's view of %d live workers, for the TypeScript adapters' intercom_team", st.Path, st.Workers)
	case teams.ViewForeign:
		c.Status = fleet.CheckWarn
		c.Detail = st.Path + " belongs to a TypeScript orchestrator: agent-fleet never touches it, so TypeScript-adapter sessions resolve their teams from it, not from agent-fleet's fleet"
		c.Fix = "if no TypeScript orchestrator runs here any more, move the file aside; agent-fleet then keeps its own view there"
	default:
		c.Status = fleet.CheckWarn
		c.Detail = fmt.Sprintf("%s cannot be read (%v); agent-fleet leaves it alone", st.Path, st.Err)
		c.Fix = "check the file; if no TypeScript orchestrator uses it, move it aside"
	}
	return c
}
