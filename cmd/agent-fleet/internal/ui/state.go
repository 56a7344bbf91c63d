package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/teams"
)

// Snapshot is the dashboard's whole state as the page receives it (the
// "state" event, GET /api/state). Workers are output.Worker's JSON (what
// list --json prints) with the dashboard's additions, so that a field the
// record gains shows on the page without a change here.
type Snapshot struct {
	// Caller is the session id the dashboard acts as (the CLI's).
	Caller string `json:"caller"`
	// Offline says why no user manager answered ("" when one did): the
	// states are then the registry's last known ones.
	Offline  string       `json:"offline,omitempty"`
	Intercom IntercomView `json:"intercom"`
	// Workers are every manager's, newest first.
	Workers  []map[string]any       `json:"workers"`
	Sessions []intercom.SessionView `json:"sessions"`
	Teams    []TeamView             `json:"teams"`
	// Asks and Unread are what waits for the caller's session.
	Asks     []intercom.AskView `json:"asks"`
	Unread   int                `json:"unread"`
	Activity []Activity         `json:"activity"`
	Chart    Chart              `json:"chart"`
	// States are the worker states in order (live first), for the chart:
	// the fleet's, with "paused" after running (chartStates).
	States []string `json:"states"`
	At     int64    `json:"at"` // epoch ms
}

// IntercomView is the dashboard's own session.
type IntercomView struct {
	Session string `json:"session"`
	// Held: this process holds the session (it hears presence events);
	// otherwise it acts through another holder of it and reads the
	// sessions again at each sample.
	Held  bool   `json:"held"`
	Error string `json:"error,omitempty"`
}

// TeamView is a named team: its name, manager and members, never its
// scope.
type TeamView struct {
	Name    string   `json:"name"`
	Manager string   `json:"manager"`
	Members []string `json:"members,omitempty"`
	Work    string   `json:"work,omitempty"`
	Created int64    `json:"createdAt"`
}

// Activity is one entry of the activity feed.
type Activity struct {
	At   int64  `json:"at"` // epoch ms
	Kind string `json:"kind"`
	Who  string `json:"who,omitempty"`
	Text string `json:"text"`
}

// maxActivity bounds the feed.
const maxActivity = 200

// Chart is the last hour in samples: messages the broker delivered per
// second and the count of workers in each state.
type Chart struct {
	IntervalMs int64    `json:"intervalMs"`
	Samples    []Sample `json:"samples"`
}

// Sample is one point of the chart. PerSecond is -1 when the broker's
// counters could not be read (no broker, or a TypeScript one).
type Sample struct {
	At        int64          `json:"at"`
	PerSecond float64        `json:"perSecond"`
	States    map[string]int `json:"states"`
}

// stateKeeper reads the fleet and the session, keeps the latest
// Snapshot, and tells subscribers when it changed.
type stateKeeper struct {
	f      *factory.Factory
	cfg    Config
	log    *slog.Logger
	paths  intercom.Paths
	caller string

	// fe is the fleet read for the snapshots and the worker pages; one
	// opened without a user manager is replaced when one answers (the
	// old one is closed with the rest: a request may still use it).
	feMu    sync.Mutex
	fe      *factory.FleetEnv
	retired []*factory.FleetEnv
	sess    *factory.Session
	sessErr error
	api     *intercom.LocalAPIClient

	roster chan struct{} // presence events (cap 1)
	inbox  chan struct{} // a new inbound message (cap 1)

	mu       sync.Mutex
	current  []byte // the Snapshot's JSON
	body     []byte // the same without its time, to tell a change
	snap     *Snapshot
	subs     map[chan struct{}]struct{}
	activity []Activity
	samples  []Sample
	workers  map[string]workerSeen // by id/run
	sessions map[string]string     // id → presence status
	seenMsgs map[string]bool
	// histShown is, per message (historyKey), the receipts the feed has
	// shown of it; a message shown at all has an entry.
	histShown map[string][]string
	// the broker's delivery counter at the last sample
	lastDeliv   uint64
	lastDelivAt time.Time
	haveDeliv   bool
}

// workerSeen is what the feed compares a worker with.
type workerSeen struct {
	state fleet.State
	turns int
	busy  bool
}

func openState(ctx context.Context, cfg Config, log *slog.Logger) (*stateKeeper, error) {
	f := cfg.Factory
	p, id, err := f.Identity()
	if err != nil {
		return nil, err
	}
	k := &stateKeeper{f: f, cfg: cfg, log: log, paths: p, caller: id.SessionID,
		api:    &intercom.LocalAPIClient{Path: p.LocalAPISocket()},
		roster: make(chan struct{}, 1), inbox: make(chan struct{}, 1),
		subs: map[chan struct{}]struct{}{}, workers: map[string]workerSeen{}, sessions: map[string]string{}, seenMsgs: map[string]bool{},
		histShown: map[string][]string{}}
	k.fe, err = f.ReadFleetAs(ctx, p, id.SessionID)
	if err != nil {
		return nil, err
	}
	k.sess, k.sessErr = f.Attach(ctx, p, id, factory.AttachOptions{Mode: intercom.AttachHold, Logger: log,
		OnRoster: func() { kick(k.roster) }})
	if k.sessErr != nil {
		log.Warn("the dashboard has no intercom session", "err", k.sessErr)
	}
	return k, nil
}

func (k *stateKeeper) close() {
	if k.sess != nil {
		k.sess.Close()
	}
	k.feMu.Lock()
	defer k.feMu.Unlock()
	for _, fe := range append(k.retired, k.fe) {
		fe.Close()
	}
}

// env is the fleet as read now.
func (k *stateKeeper) env() *factory.FleetEnv {
	k.feMu.Lock()
	defer k.feMu.Unlock()
	return k.fe
}

// kick sends on a cap-1 channel unless a signal waits already.
func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// run rebuilds the snapshot whenever the fleet, the roster or the inbox
// changes, and at every sample, until ctx ends.
func (k *stateKeeper) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	watch, err := fleet.WatchFleet(ctx, k.paths)
	if err != nil {
		k.log.Warn("cannot watch the fleet: changes show at the next sample", "err", err)
		watch = &fleet.Watch{}
	}
	if k.sess != nil {
		wg.Go(func() { k.listen(ctx) })
	}
	wg.Go(func() { k.followHistory(ctx) })
	tick := time.NewTicker(k.cfg.Sample)
	defer tick.Stop()
	k.sample(ctx)
	k.rebuild(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-watch.C:
			if !ok {
				watch = &fleet.Watch{} // nil channel: the samples go on
			}
		case <-k.roster:
		case <-k.inbox:
		case <-tick.C:
			k.sample(ctx)
		}
		k.rebuild(ctx)
	}
}

// listen watches the caller's inbox without consuming it (the messages
// stay unread for the person's own pending/listen).
func (k *stateKeeper) listen(ctx context.Context) {
	err := k.sess.Ops.Listen(ctx, intercom.ListenRequest{KeepUnread: true}, func(m *intercom.MessageView) error {
		k.mu.Lock()
		if !k.seenMsgs[m.MessageID] {
			k.seenMsgs[m.MessageID] = true
			key := historyKey(m.From.ID, m.MessageID)
			if _, ok := k.histShown[key]; !ok {
				k.histShown[key] = []string{} // shown: the history adds only its receipts
			}
			what := "message"
			if m.ExpectsReply {
				what = "ask"
			}
			k.addLocked(Activity{At: int64(m.ReceivedAt), Kind: what, Who: m.From.ID,
				Text: fmt.Sprintf("%s from %s to you: %s", what, output.SenderLabel(m.From), intercom.Preview(m.Text, 160))})
		}
		k.mu.Unlock()
		kick(k.inbox)
		return nil
	})
	if err != nil && ctx.Err() == nil {
		k.log.Warn("the dashboard stopped watching its inbox", "err", err)
	}
}

func (k *stateKeeper) addLocked(a Activity) {
	k.activity = append(k.activity, a)
	if len(k.activity) > maxActivity {
		k.activity = k.activity[len(k.activity)-maxActivity:]
	}
}

// sample takes a chart sample: the broker's delivery counter since the
// last one, and the worker states of the latest snapshot.
func (k *stateKeeper) sample(ctx context.Context) {
	if k.env().Offline != nil {
		// A user manager may answer now.
		if fe, err := k.f.ReadFleetAs(ctx, k.paths, k.caller); err == nil && fe.Offline == nil {
			k.feMu.Lock()
			k.retired = append(k.retired, k.fe)
			k.fe = fe
			k.feMu.Unlock()
		} else if err == nil {
			fe.Close()
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	stats, err := k.api.Stats(cctx)
	cancel()
	now := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	s := Sample{At: now.UnixMilli(), PerSecond: -1, States: map[string]int{}}
	if err == nil && stats != nil {
		if k.haveDeliv {
			d := stats.Delivered
			if d >= k.lastDeliv {
				d -= k.lastDeliv
			} // a new broker counts from 0
			s.PerSecond = float64(d) / now.Sub(k.lastDelivAt).Seconds()
		} else {
			s.PerSecond = stats.DeliveredPerSecond
		}
		k.lastDeliv, k.lastDelivAt, k.haveDeliv = stats.Delivered, now, true
	} else {
		k.haveDeliv = false
	}
	if k.snap != nil {
		for _, w := range k.snap.Workers {
			if st, _ := w["state"].(string); st != "" {
				s.States[st]++
			}
		}
	}
	k.samples = append(k.samples, s)
	keep := int(time.Hour / k.cfg.Sample)
	if len(k.samples) > keep {
		k.samples = k.samples[len(k.samples)-keep:]
	}
}

// rebuild reads everything again and, when the snapshot changed,
// publishes it.
func (k *stateKeeper) rebuild(ctx context.Context) {
	snap := &Snapshot{Caller: k.caller, Workers: []map[string]any{}, Sessions: []intercom.SessionView{},
		Teams: []TeamView{}, Asks: []intercom.AskView{}, States: chartStates,
		Intercom: IntercomView{Session: k.caller}}
	fe := k.env()
	if fe.Offline != nil {
		snap.Offline = fe.Offline.Error()
	}
	ws, err := fe.Fleet.List(ctx, true)
	if err != nil {
		k.log.Warn("cannot list the workers", "err", err)
	}
	sort.SliceStable(ws, func(i, j int) bool { return ws[i].CreatedAt.After(ws[j].CreatedAt) })
	presence := map[string]string{}
	if k.sess != nil {
		snap.Intercom.Held = !k.sess.Holder
		if res, err := k.sess.Ops.List(ctx, intercom.ListRequest{IncludeSelf: true}); err == nil {
			snap.Sessions = res.Sessions
			for _, s := range res.Sessions {
				presence[s.ID] = s.Status
			}
		} else {
			snap.Intercom.Error = err.Error()
		}
		if res, err := k.sess.Ops.Pending(ctx, intercom.PendingRequest{}); err == nil {
			snap.Asks, snap.Unread = res.Asks, len(res.Unread)
		}
	} else if k.sessErr != nil {
		snap.Intercom.Error = k.sessErr.Error()
	}
	if list, err := teams.NewStore(k.paths).List("", ""); err == nil {
		for _, t := range list {
			snap.Teams = append(snap.Teams, TeamView{Name: t.Name, Manager: t.ManagerSessionID, Members: t.Members, Work: t.Work, Created: t.CreatedAt})
		}
	}
	now := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	first := k.snap == nil
	seen := map[string]workerSeen{}
	for _, w := range ws {
		turns := k.turnsOf(w)
		v := workerView(w, fe.Offline != nil, turns, presence)
		snap.Workers = append(snap.Workers, v)
		key := w.ID + "/" + w.RunID
		cur := workerSeen{state: w.State}
		if turns != nil {
			cur.turns, cur.busy = turns.Turns, turns.Current != nil
		}
		seen[key] = cur
		if !first {
			k.noteWorkerLocked(now, w, k.workers[key], cur, turns)
		}
	}
	k.workers = seen
	sessions := map[string]string{}
	for _, s := range snap.Sessions {
		sessions[s.ID] = s.Status
		old, was := k.sessions[s.ID]
		switch {
		case first || s.Self:
		case !was:
			k.addLocked(Activity{At: now.UnixMilli(), Kind: "session", Who: s.ID, Text: fmt.Sprintf("%s joined (%s)", s.ID, s.Model)})
		case old != s.Status && s.Status != "":
			k.addLocked(Activity{At: now.UnixMilli(), Kind: "presence", Who: s.ID, Text: s.ID + ": " + s.Status})
		}
	}
	if !first {
		for id := range k.sessions {
			if _, ok := sessions[id]; !ok {
				k.addLocked(Activity{At: now.UnixMilli(), Kind: "session", Who: id, Text: id + " left"})
			}
		}
	} else {
		k.addLocked(Activity{At: now.UnixMilli(), Kind: "ui", Text: fmt.Sprintf("dashboard started as %s: %s, %s",
			k.caller, output.Plural(len(ws), "worker record"), output.Plural(len(snap.Sessions), "session"))})
	}
	k.sessions = sessions
	snap.Activity = slices.Clone(k.activity)
	snap.Chart = Chart{IntervalMs: k.cfg.Sample.Milliseconds(), Samples: slices.Clone(k.samples)}
	// The states of the newest sample follow the snapshot between samples.
	if n := len(snap.Chart.Samples); n > 0 {
		last := snap.Chart.Samples[n-1]
		last.States = map[string]int{}
		for _, w := range ws {
			last.States[output.ViewState(w)]++
		}
		snap.Chart.Samples[n-1] = last
		k.samples[len(k.samples)-1].States = last.States
	}
	body := *snap
	body.At = 0
	data, err := json.Marshal(&body)
	if err != nil {
		k.log.Warn("cannot encode the dashboard state", "err", err)
		return
	}
	if bytes.Equal(data, k.body) {
		return
	}
	snap.At = now.UnixMilli()
	k.snap = snap
	k.current, _ = json.Marshal(snap)
	k.body = data
	for c := range k.subs {
		kick(c)
	}
}

// chartStates are the states the chart stacks, in order: the fleet's,
// with paused (a live worker frozen by pause) after running, as list and
// status show it.
var chartStates = func() []string {
	var out []string
	for _, st := range fleet.States {
		out = append(out, string(st))
		if st == fleet.StateRunning {
			out = append(out, output.StatePaused)
		}
	}
	return out
}()
