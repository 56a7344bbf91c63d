package teams

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// stageInto stores messages in the inbox of sessionID as a receiver would.
func stageInto(t *testing.T, p intercom.Paths, sessionID string, msgs ...struct {
	from string
	id   string
	ask  bool
	at   time.Time
}) *intercom.Inbox {
	t.Helper()
	in, err := intercom.OpenInbox(p, sessionID)
	require.NoError(t, err)
	t.Cleanup(func() { _ = in.Close() }) // before the temp dir goes
	for _, m := range msgs {
		from := wire.SessionInfo{ID: m.from, Name: m.from, HasName: true, Cwd: "/w", Model: "cli", Origin: "local"}
		raw := wire.Message{ID: m.id, Timestamp: 1, Text: "question " + m.id + "   with   spaces", ExpectsReply: m.ask}
		info, err := wire.ParseMessage(raw.AppendJSON(nil))
		require.NoError(t, err)
		in.Stage(from.AppendJSON(nil), from, info, float64(m.at.UnixMilli()))
	}
	require.NoError(t, in.Flush())
	return in
}

// dirState is every file of dir with its content and modification time.
func dirState(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := map[string]string{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		info, err := e.Info()
		require.NoError(t, err)
		out[e.Name()] = info.ModTime().String() + "\n" + string(data)
	}
	return out
}

type msg = struct {
	from string
	id   string
	ask  bool
	at   time.Time
}

// Every allowed and refused inspection case of spec §7.4.
func TestAuthorizeInspection(t *testing.T) {
	managerTeam := func() *Team {
		return &Team{Source: SourceOrchestrator, TeamID: "boss", fromRegistry: true, Self: Self{ID: "boss", IsManager: true},
			Manager:   &Endpoint{Target: "boss", Connected: true},
			Coworkers: []Member{{ID: "w1", Target: "w1", Connected: true}, {ID: "w2", Target: "w2"}, {ID: "named", Target: "named", Connected: true}}}
	}
	sessions := []Session{{ID: "boss"}, {ID: "w1"}, {ID: "x9", Name: "named"}, {ID: "far", Origin: "remote"}}
	cases := []struct {
		name      string
		team      func() *Team
		requested string
		sessions  []Session
		broker    bool // the broker says the id is connected
		allowed   bool
	}{
		{"manager, owned connected coworker", managerTeam, "w1", sessions, false, true},
		{"manager, coworker connected in another scope", managerTeam, "w2", sessions, true, true},
		{"manager, coworker not connected", managerTeam, "w2", sessions, false, false},
		{"manager, coworker connected only by name", managerTeam, "named", sessions, false, false},
		{"manager, not a coworker", managerTeam, "x9", sessions, true, false},
		{"manager, itself", managerTeam, "boss", sessions, true, false},
		{"manager, case-folded target", managerTeam, "W1", sessions, true, false},
		{"manager, remote coworker", func() *Team {
			t := managerTeam()
			t.Coworkers = append(t.Coworkers, Member{ID: "far", Target: "far", Connected: true})
			return t
		}, "far", sessions, true, false},
		{"a worker of the team", func() *Team {
			t := managerTeam()
			t.Self = Self{ID: "w2", WorkerID: "w2"}
			return t
		}, "w1", sessions, true, false},
		{"a manifest lead", func() *Team {
			t := managerTeam()
			t.Source, t.fromRegistry = SourceManifest, false
			return t
		}, "w1", sessions, true, false},
		{"a live-roster manager", func() *Team {
			t := managerTeam()
			t.Source, t.fromRegistry = SourceLiveRoster, false
			return t
		}, "w1", sessions, true, false},
		{"a Boss manager", func() *Team {
			t := managerTeam()
			t.fromRegistry = false // source "orchestrator" from Boss metadata, not the registry
			return t
		}, "w1", sessions, true, false},
		{"standalone", func() *Team { return &Team{Source: SourceStandalone, Self: Self{ID: "boss"}} }, "w1", sessions, true, false},
		{"a team received from another process", func() *Team {
			t := managerTeam()
			t.fromRegistry = false
			return t
		}, "w1", sessions, true, false},
		{"no team", func() *Team { return nil }, "w1", sessions, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			connected := func(_ context.Context, id string) bool { return c.broker && id == c.requested }
			err := AuthorizeInspection(ctx, c.team(), c.sessions, c.requested, connected)
			if c.allowed {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, ErrInspectionDenied)
			}
			if c.name == "a Boss manager" {
				require.Contains(t, err.Error(), "this team is a Boss run's metadata, not the fleet registry's")
			}
		})
	}
}

func TestReadInbox(t *testing.T) {
	p := intercom.NewPaths(t.TempDir())
	now := time.UnixMilli(1760000000000)
	in := stageInto(t, p, "w1",
		msg{"boss", "q-old", true, now.Add(-11 * time.Minute)},
		msg{"boss", "q1", true, now.Add(-2 * time.Minute)},
		msg{"peer", "note", false, now.Add(-time.Minute)},
		msg{"boss", "q2", true, now.Add(-time.Second)},
	)
	// Closed, so that nothing but the inspection could change the files
	// (intercom's tests read a live inbox's journal).
	require.NoError(t, in.Close())
	before := dirState(t, filepath.Dir(p.Inbox("w1")))
	require.NotEmpty(t, before)

	got, err := ReadInbox(p, "w1", "", 10*time.Minute, now)
	require.NoError(t, err)
	require.Equal(t, "w1", got.InboxSessionID)
	require.Len(t, got.Asks, 2, "asks only, the expired one dropped")
	require.Equal(t, intercom.AskID("boss", "q1"), got.Asks[0].AskID)
	require.Equal(t, "oldest", got.Asks[0].Selector)
	require.Equal(t, "latest", got.Asks[1].Selector)
	require.Equal(t, int64(120), got.Asks[0].ElapsedSeconds)
	require.Equal(t, "question q1 with spaces", got.Asks[0].Preview)
	require.Empty(t, got.Asks[0].Text)

	one, err := ReadInbox(p, "w1", intercom.AskID("boss", "q2"), 10*time.Minute, now)
	require.NoError(t, err)
	require.Len(t, one.Asks, 1)
	require.Equal(t, "question q2   with   spaces", one.Asks[0].Text)
	_, err = ReadInbox(p, "w1", intercom.AskID("boss", "q-old"), 10*time.Minute, now)
	require.ErrorIs(t, err, intercom.ErrNoPendingAsk)

	require.Equal(t, before, dirState(t, filepath.Dir(p.Inbox("w1"))), "read-only")

	empty, err := ReadInbox(p, "nobody", "", 10*time.Minute, now)
	require.NoError(t, err)
	require.Empty(t, empty.Asks, "no inbox is an empty one")
	_, err = os.Stat(p.Inbox("nobody"))
	require.True(t, os.IsNotExist(err), "and is not created")

	// Any other version fails closed, untouched.
	for name, content := range map[string]string{
		"version 2":       `{"version":2,"nextSequence":1,"entries":[],"pendingAsks":[],"seen":[]}`,
		"version 4":       `{"version":4,"nextSequence":1,"entries":[],"pendingAsks":[],"seen":[]}`,
		"version as text": `{"version":"3","nextSequence":1,"entries":[],"pendingAsks":[],"seen":[]}`,
	} {
		t.Run(name, func(t *testing.T) {
			id := "v-" + filepath.Base(name)
			require.NoError(t, os.MkdirAll(filepath.Dir(p.Inbox(id)), 0o700))
			require.NoError(t, os.WriteFile(p.Inbox(id), []byte(content), 0o600))
			_, err := ReadInbox(p, id, "", 10*time.Minute, now)
			require.True(t, errors.Is(err, intercom.ErrInboxVersion), "%v", err)
			data, _ := os.ReadFile(p.Inbox(id))
			require.Equal(t, content, string(data))
		})
	}
}

// PurgeInbox drops what arrived from senders the contract refuses.
func TestPurgeInbox(t *testing.T) {
	p := intercom.NewPaths(t.TempDir())
	now := time.Now()
	in := stageInto(t, p, bWorker,
		msg{bManager, "m1", false, now}, msg{"outsider", "m2", false, now},
		msg{"outsider", "a1", true, now}, msg{bScout, "a2", true, now})
	n, err := PurgeInbox(in, ReadBoss(bossEnv("worker")), bWorker)
	require.NoError(t, err)
	require.Equal(t, 3, n, "two unread messages and one ask of the outsider")
	var from []string
	for _, m := range in.Unread() {
		from = append(from, m.From.ID)
	}
	require.Equal(t, []string{bManager, bScout}, from)
	require.Len(t, in.PendingAsks(), 1)
	require.Equal(t, bScout, in.PendingAsks()[0].From.ID)
	n, err = PurgeInbox(in, &Boss{}, bWorker)
	require.NoError(t, err)
	require.Zero(t, n)
}

// An inspection of a session that is not connected at all is "not found"
// (intercom.ErrTargetNotFound, exit 3) for anyone, manager or not, also
// across a holder socket; a connected session that is not yours to read
// stays a plain refusal.
func TestAuthorizeInspectionNotFound(t *testing.T) {
	manager := &Team{Source: SourceOrchestrator, fromRegistry: true, Self: Self{ID: "boss", IsManager: true},
		Coworkers: []Member{{ID: "w1", Target: "w1", Connected: true}}}
	sessions := []Session{{ID: "boss"}, {ID: "w1"}, {ID: "peer"}}
	never := func(context.Context, string) bool { return false }
	for _, team := range []*Team{manager, nil, {Source: SourceStandalone, Self: Self{ID: "x"}}} {
		err := AuthorizeInspection(ctx, team, sessions, "nosuch", never)
		require.ErrorIs(t, err, intercom.ErrTargetNotFound)
		require.ErrorIs(t, err, ErrInspectionDenied)
		require.Contains(t, err.Error(), `no session "nosuch" is connected`)
		remote := toRemote(err)
		require.ErrorIs(t, remote, intercom.ErrTargetNotFound, "across a holder")
		require.ErrorIs(t, remote, ErrInspectionDenied)
	}
	err := AuthorizeInspection(ctx, manager, sessions, "peer", never)
	require.ErrorIs(t, err, ErrInspectionDenied)
	require.NotErrorIs(t, err, intercom.ErrTargetNotFound, "connected, but not a coworker")
	require.NotErrorIs(t, toRemote(err), intercom.ErrTargetNotFound)
}
