// Package completion lists what shell completion offers for worker ids,
// intercom targets and team names. Each reads state only where it already
// exists, with a short deadline, and never starts a broker or asks systemd.
package completion

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/teams"
)

// Pick is which workers a verb completes.
type Pick int

const (
	AnyWorker        Pick = iota // status, logs: every worker
	MyLiveWorker                 // stop, renew: live workers the caller manages
	MyEndedWorker                // forget: ended workers the caller manages
	OthersLiveWorker             // adopt: live workers of other managers
)

// WorkerIDs lists the worker ids of the registry that pick
// wants, with their state and manager, for shell completion. It reads the
// registry only when it exists (a completion never creates state) and never
// asks systemd.
func WorkerIDs(ctx context.Context, f *factory.Factory, pick Pick) []string {
	p, id, err := f.Identity()
	if err != nil {
		return nil
	}
	path := fleet.RegistryPath(p)
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	reg, err := fleet.OpenRegistry(ctx, path)
	if err != nil {
		return nil
	}
	defer reg.Close()
	ws, err := reg.List(ctx, fleet.Filter{})
	if err != nil {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, w := range ws { // newest incarnation of each id first
		if seen[w.ID] {
			continue
		}
		seen[w.ID] = true
		mine := w.Manager == id.SessionID
		switch pick {
		case MyLiveWorker:
			if !mine || !w.State.Live() {
				continue
			}
		case MyEndedWorker:
			if !mine || w.State.Live() {
				continue
			}
		case OthersLiveWorker:
			if mine || !w.State.Live() {
				continue
			}
		}
		out = append(out, fmt.Sprintf("%s\t%s, manager %s", w.ID, w.State, w.Manager))
	}
	return out
}

// Sessions lists the sessions a send or ask can reach, by name
// and by id, while a broker runs: a completion never starts one.
func Sessions(ctx context.Context, f *factory.Factory) []string {
	p, err := f.Paths()
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if h, _ := intercom.ProbeBroker(ctx, p); h != intercom.Compatible {
		return nil
	}
	o, err := f.OneShot(ctx)
	if err != nil {
		return nil
	}
	defer o.Close()
	res, err := o.Ops.List(ctx, intercom.ListRequest{})
	if err != nil {
		return nil
	}
	var out []string
	for _, s := range res.Sessions {
		out = append(out, s.ID+"\t"+s.Model+" in "+s.Cwd)
		if s.Name != "" && s.Name != s.ID {
			out = append(out, s.Name+"\tsession "+s.ID)
		}
	}
	return out
}

// Teams lists the named teams of the agent directory, from its
// file alone.
func Teams(_ context.Context, f *factory.Factory) []string {
	p, err := f.Paths()
	if err != nil {
		return nil
	}
	if _, err := os.Stat(teams.NewStore(p).Path()); err != nil {
		return nil
	}
	list, err := teams.NewStore(p).List("", "")
	if err != nil {
		return nil
	}
	var out []string
	for _, t := range list {
		out = append(out, t.Name+"\tmanaged by "+t.ManagerSessionID)
	}
	return out
}
