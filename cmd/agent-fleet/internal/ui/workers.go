package ui

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// workerView is a worker as the page gets it: the record's JSON as list
// --json prints it, so that fields the record gains (a worktree, a
// sandbox profile, resource limits) reach the page as they are, plus:
//
//   - "turn": a coding-agent worker's turns (count, the one running, how
//     the last ended), from its turn record;
//   - "presence": the status its session publishes (idle, working on a
//     turn, …), when it is in the dashboard's scope.
func workerView(w *fleet.Worker, unknown bool, turns *harness.TurnState, presence map[string]string) map[string]any {
	rep := output.WorkersReport{WS: []*fleet.Worker{w}, LiveUnknown: unknown}
	data, _ := json.Marshal(rep.JSON())
	var views []map[string]any
	_ = json.Unmarshal(data, &views)
	v := views[0]
	if turns != nil {
		t := map[string]any{"turns": turns.Turns, "failures": turns.Failures}
		if c := turns.Current; c != nil {
			t["current"] = map[string]any{"n": c.N, "reason": c.Reason, "messages": c.Messages, "startedAt": output.Stamp(c.StartedAt)}
		}
		if l := turns.Last; l != nil {
			t["last"] = map[string]any{"n": l.N, "ok": l.OK, "endedAt": output.Stamp(l.EndedAt), "error": l.Error,
				"final": intercom.Preview(l.Final, 200)}
		}
		if turns.Pause != nil {
			t["paused"] = turns.Pause.Reason
		}
		v["turn"] = t
	}
	if st, ok := presence[w.ID]; ok && w.State.Live() {
		v["presence"] = st
	}
	return v
}

// turnsOf reads a coding-agent worker's turn record (nil for others).
func (k *stateKeeper) turnsOf(w *fleet.Worker) *harness.TurnState {
	if !harness.IsKind(w.Kind) {
		return nil
	}
	t, err := harness.ReadTurnState(fleet.WorkerDir(k.paths, w.ID, w.RunID))
	if err != nil {
		return nil
	}
	return t
}

// noteWorkerLocked adds to the feed what changed of a worker since the
// last snapshot: that it appeared, its state, a turn that began or ended.
func (k *stateKeeper) noteWorkerLocked(now time.Time, w *fleet.Worker, was, cur workerSeen, turns *harness.TurnState) {
	at := now.UnixMilli()
	switch {
	case was.state == "":
		text := fmt.Sprintf("%s appeared (%s, manager %s): %s", w.ID, output.WorkerCommand(w), w.Manager, output.StateText(w))
		k.addLocked(Activity{At: at, Kind: "worker", Who: w.ID, Text: text})
	case was.state != cur.state:
		text := fmt.Sprintf("%s: %s → %s", w.ID, was.state, output.StateText(w))
		if w.StopReason != "" {
			text += " (" + w.StopReason + ")"
		}
		k.addLocked(Activity{At: at, Kind: "state", Who: w.ID, Text: text})
	}
	if turns == nil {
		return
	}
	if cur.busy && (!was.busy || cur.turns != was.turns) && turns.Current != nil {
		k.addLocked(Activity{At: at, Kind: "turn", Who: w.ID, Text: fmt.Sprintf("%s: turn %d started (%s)", w.ID, turns.Current.N, turns.Current.Reason)})
	}
	if was.busy && !cur.busy && turns.Last != nil {
		l := turns.Last
		outcome := "answered"
		if !l.OK {
			outcome = "failed: " + l.Error
		}
		text := fmt.Sprintf("%s: turn %d %s", w.ID, l.N, outcome)
		if l.OK && l.Final != "" {
			text += ": " + intercom.Preview(l.Final, 160)
		}
		k.addLocked(Activity{At: at, Kind: "turn", Who: w.ID, Text: text})
	}
}

// subscribe registers for change signals; the returned function ends it.
func (k *stateKeeper) subscribe() (<-chan struct{}, func()) {
	c := make(chan struct{}, 1)
	k.mu.Lock()
	k.subs[c] = struct{}{}
	k.mu.Unlock()
	kick(c) // the current state first
	return c, func() {
		k.mu.Lock()
		delete(k.subs, c)
		k.mu.Unlock()
	}
}

// latest is the current snapshot's JSON (nil before the first).
func (k *stateKeeper) latest() []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.current
}
