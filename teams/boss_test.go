package teams

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

const (
	bossRun    = "boss-0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	bossSuffix = "9e0f1a2b3c4d"
	bManager   = "boss-manager-" + bossSuffix
	bWorker    = "boss-worker-" + bossSuffix
	bScout     = "boss-scout-" + bossSuffix
	bAdversary = "boss-adversary-" + bossSuffix
	bControl   = "boss-controller-main"
)

func bossEnv(role string) MapEnv {
	return MapEnv{
		EnvBossRunID: bossRun, EnvBossRole: role, EnvBossController: bControl, EnvBossManager: bManager,
		EnvBossTeam: `["` + bWorker + `","` + bManager + `","` + bScout + `","` + bAdversary + `"]`,
	}
}

func (e MapEnv) with(k, v string) MapEnv {
	out := MapEnv{}
	for kk, vv := range e {
		out[kk] = vv
	}
	out[k] = v
	return out
}

func (e MapEnv) without(k string) MapEnv {
	out := MapEnv{}
	for kk, vv := range e {
		if kk != k {
			out[kk] = vv
		}
	}
	return out
}

// Every rule of the six-variable contract, all or nothing (spec §7.3).
func TestReadBoss(t *testing.T) {
	valid := bossEnv("worker")
	ok := ReadBoss(valid)
	require.Equal(t, &Boss{Present: true, Valid: true, Restricted: true, RunID: bossRun, RunSuffix: bossSuffix, Role: "worker",
		ControllerTarget: bControl, ManagerTarget: bManager, TeamTargets: []string{bManager, bWorker, bScout, bAdversary},
		SelfTarget: bWorker, Visibility: "team-only"}, ok)
	require.False(t, ReadBoss(MapEnv{"OTHER": "x"}).Present, "no variable, no contract")
	local := ReadBoss(valid.with(EnvBossVisibility, "local"))
	require.True(t, local.Valid)
	require.False(t, local.Restricted, "local visibility is not restricted")
	require.True(t, ReadBoss(valid.with(EnvBossVisibility, "team-only")).Restricted)
	for _, role := range []string{"manager", "scout", "adversary"} {
		b := ReadBoss(bossEnv(role))
		require.True(t, b.Valid, role)
		require.Equal(t, "boss-"+role+"-"+bossSuffix, b.SelfTarget)
	}
	require.True(t, ReadBoss(valid.with(EnvBossTeam, " [\""+bAdversary+"\",\""+bScout+"\",\""+bWorker+"\",\""+bManager+"\"] ")).Valid,
		"any order, JSON whitespace allowed")

	invalid := map[string]struct {
		env    MapEnv
		reason string
	}{
		"only one variable set":       {MapEnv{EnvBossVisibility: "local"}, EnvBossRunID},
		"one variable set but empty":  {MapEnv{EnvBossRole: ""}, EnvBossRunID},
		"run id missing":              {valid.without(EnvBossRunID), EnvBossRunID},
		"run id uppercase":            {valid.with(EnvBossRunID, strings.ToUpper(bossRun)), EnvBossRunID},
		"run id without prefix":       {valid.with(EnvBossRunID, bossRun[5:]), EnvBossRunID},
		"run id padded":               {valid.with(EnvBossRunID, bossRun+" "), EnvBossRunID},
		"role missing":                {valid.without(EnvBossRole), EnvBossRole},
		"role unknown":                {valid.with(EnvBossRole, "controller"), EnvBossRole},
		"role case":                   {valid.with(EnvBossRole, "Worker"), EnvBossRole},
		"controller missing":          {valid.without(EnvBossController), EnvBossController},
		"controller padded":           {valid.with(EnvBossController, " "+bControl), EnvBossController},
		"controller control char":     {valid.with(EnvBossController, "ctl\x07"), EnvBossController},
		"controller with a BOM":       {valid.with(EnvBossController, "\ufeffctl"), EnvBossController},
		"manager missing":             {valid.without(EnvBossManager), EnvBossManager},
		"manager equals controller":   {valid.with(EnvBossController, bManager), "distinct"},
		"manager not canonical":       {valid.with(EnvBossManager, "boss-manager-000000000000"), "must equal " + bManager},
		"team missing":                {valid.without(EnvBossTeam), EnvBossTeam},
		"team not json":               {valid.with(EnvBossTeam, "["), EnvBossTeam},
		"team not an array":           {valid.with(EnvBossTeam, `{"a":1}`), EnvBossTeam},
		"team with a number":          {valid.with(EnvBossTeam, `["`+bManager+`",1,"`+bScout+`","`+bAdversary+`"]`), EnvBossTeam},
		"team with a padded id":       {valid.with(EnvBossTeam, `["`+bManager+` ","`+bWorker+`","`+bScout+`","`+bAdversary+`"]`), EnvBossTeam},
		"team of three":               {valid.with(EnvBossTeam, `["`+bManager+`","`+bWorker+`","`+bScout+`"]`), "exactly"},
		"team of five":                {valid.with(EnvBossTeam, `["`+bManager+`","`+bWorker+`","`+bScout+`","`+bAdversary+`","x"]`), "exactly"},
		"team with a duplicate":       {valid.with(EnvBossTeam, `["`+bManager+`","`+bWorker+`","`+bWorker+`","`+bAdversary+`"]`), "exactly"},
		"team of another run":         {valid.with(EnvBossTeam, `["`+bManager+`","boss-worker-000000000000","`+bScout+`","`+bAdversary+`"]`), "exactly"},
		"controller is a teammate id": {valid.with(EnvBossController, bScout), "distinct from every canonical"},
		"visibility unknown":          {valid.with(EnvBossVisibility, "global"), EnvBossVisibility},
		"visibility set but empty":    {valid.with(EnvBossVisibility, ""), EnvBossVisibility},
	}
	for name, c := range invalid {
		t.Run(name, func(t *testing.T) {
			b := ReadBoss(c.env)
			require.True(t, b.Present)
			require.False(t, b.Valid)
			require.True(t, b.Restricted, "an invalid contract denies everything")
			require.Contains(t, b.Reason, c.reason)
			err := b.Usable(bWorker)
			var be *BossError
			require.True(t, errors.As(err, &be))
			require.Equal(t, BossMetadataInvalid, be.Code)
			require.ErrorIs(t, err, ErrBossDenied)
			require.Empty(t, b.allowed(), "deny-all")
			_, err = b.ResolveTarget(bManager, bWorker, sessionsOf(bManager))
			require.ErrorIs(t, err, ErrBossDenied)
			require.Error(t, b.AuthorizeSender(bManager, bWorker))
		})
	}
}

// Who may reach whom, by role and visibility.
func TestBossTargets(t *testing.T) {
	everyone := sessionsOf(bManager, bWorker, bScout, bAdversary, bControl, "outsider", "Outsider-Named")
	cases := []struct {
		name, role, vis, self, target string
		sessions                      []Session
		code                          string // "" = allowed
	}{
		{"worker → manager", "worker", "", bWorker, bManager, everyone, ""},
		{"worker → scout", "worker", "", bWorker, bScout, everyone, ""},
		{"worker → adversary", "worker", "", bWorker, bAdversary, everyone, ""},
		{"worker → controller: no readiness handshake", "worker", "", bWorker, bControl, everyone, BossScopeDenied},
		{"scout → controller", "scout", "", bScout, bControl, everyone, BossScopeDenied},
		{"adversary → controller", "adversary", "", bAdversary, bControl, everyone, BossScopeDenied},
		{"manager → controller", "manager", "", bManager, bControl, everyone, ""},
		{"manager → worker", "manager", "", bManager, bWorker, everyone, ""},
		{"worker → outsider", "worker", "", bWorker, "outsider", everyone, BossScopeDenied},
		{"a name is refused", "worker", "", bWorker, "manager", everyone, BossScopeDenied},
		{"a prefix is refused", "worker", "", bWorker, "boss-manager-9e0f", everyone, BossScopeDenied},
		{"case folding is refused", "worker", "", bWorker, strings.ToUpper(bManager), everyone, BossScopeDenied},
		{"an allowed id that is not live", "worker", "", bWorker, bScout, sessionsOf(bManager, bWorker), BossTargetNotConnected},
		{"a wrong self id", "worker", "", "impostor", bManager, everyone, BossMetadataInvalid},
		{"local: outsider by exact id", "worker", "local", bWorker, "outsider", everyone, ""},
		{"local: controller by exact id", "worker", "local", bWorker, bControl, everyone, ""},
		{"local: a name is still refused", "worker", "local", bWorker, "outsider-named", everyone, BossTargetNotConnected},
		{"local: a prefix is still refused", "worker", "local", bWorker, "outs", everyone, BossTargetNotConnected},
		{"local: not live", "worker", "local", bWorker, "gone", everyone, BossTargetNotConnected},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := bossEnv(c.role)
			if c.vis != "" {
				env = env.with(EnvBossVisibility, c.vis)
			}
			b := ReadBoss(env)
			require.True(t, b.Valid)
			got, err := b.ResolveTarget(c.target, c.self, c.sessions)
			if c.code == "" {
				require.NoError(t, err)
				require.Equal(t, c.target, got)
				return
			}
			var be *BossError
			require.True(t, errors.As(err, &be), "%v", err)
			require.Equal(t, c.code, be.Code)
		})
	}
	got, err := (&Boss{}).ResolveTarget("x", "me", nil)
	require.NoError(t, err)
	require.Equal(t, "x", got, "no contract: anything passes")
}

// Inbound messages: refused before the inbox with the Pi reason prefix.
func TestBossInbound(t *testing.T) {
	worker := ReadBoss(bossEnv("worker"))
	manager := ReadBoss(bossEnv("manager"))
	local := ReadBoss(bossEnv("worker").with(EnvBossVisibility, "local"))
	cases := []struct {
		name   string
		boss   *Boss
		self   string
		from   string
		reject bool
	}{
		{"teammate to worker", worker, bWorker, bScout, false},
		{"manager to worker", worker, bWorker, bManager, false},
		{"controller to worker", worker, bWorker, bControl, true},
		{"outsider to worker", worker, bWorker, "outsider", true},
		{"controller to manager", manager, bManager, bControl, false},
		{"outsider to manager", manager, bManager, "outsider", true},
		{"outsider with local visibility", local, bWorker, "outsider", false},
		{"no contract", &Boss{}, "me", "anyone", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := c.boss.Filter(c.self)
			if !c.boss.Present {
				require.Nil(t, f)
				return
			}
			reason := f(wire.SessionInfo{ID: c.from}, &wire.MessageInfo{ID: "m"})
			if !c.reject {
				require.Empty(t, reason)
				return
			}
			require.True(t, strings.HasPrefix(reason, "BOSS_TEAM_SCOPE_DENIED: "), reason)
			require.Contains(t, reason, c.from)
		})
	}
	require.Nil(t, (&Boss{}).ReplayFilter())
	require.False(t, worker.ReplayFilter()(bManager), "a Boss session replays nothing")
	require.False(t, local.ReplayFilter()(bManager))
}

func TestBossTeamAndDiscovery(t *testing.T) {
	sessions := sessionsOf(bManager, bWorker, bScout, bControl, "outsider")
	team, err := ReadBoss(bossEnv("worker")).Team(bWorker, sessions)
	require.NoError(t, err)
	require.Equal(t, &Team{Source: SourceOrchestrator, TeamID: bManager, Self: Self{ID: bWorker},
		Manager:   &Endpoint{Target: bManager, Connected: true},
		Coworkers: []Member{{ID: bScout, Target: bScout, Connected: true}}}, team, "live teammates only; never the controller")

	team, err = ReadBoss(bossEnv("manager")).Team(bManager, sessions)
	require.NoError(t, err)
	require.Equal(t, &Team{Source: SourceOrchestrator, TeamID: bManager, Self: Self{ID: bManager, IsManager: true},
		Manager: &Endpoint{Target: bManager, Connected: true}, Controller: &Endpoint{Target: bControl, Connected: true},
		Coworkers: []Member{{ID: bWorker, Target: bWorker, Connected: true}, {ID: bScout, Target: bScout, Connected: true}}}, team)

	team, err = ReadBoss(bossEnv("scout")).Team(bScout, sessionsOf(bScout, bWorker))
	require.NoError(t, err)
	require.Nil(t, team.Manager, "a manager that is not live is not named")
	require.Empty(t, team.TeamID)
	require.Equal(t, "Manager: unknown\nYou: "+bScout+"\nCoworkers:\n- "+bWorker+" target="+bWorker+" [connected]", Format(team))

	_, err = ReadBoss(bossEnv("scout")).Team(bWorker, sessions)
	require.ErrorIs(t, err, ErrBossDenied, "self must be the canonical id of the role")

	ids := func(ss []Session) []string {
		var out []string
		for _, s := range ss {
			out = append(out, s.ID)
		}
		return out
	}
	require.Equal(t, []string{bManager, bWorker, bScout}, ids(ReadBoss(bossEnv("worker")).FilterSessions(sessions, bWorker)))
	require.Equal(t, []string{bManager, bWorker, bScout, bControl}, ids(ReadBoss(bossEnv("manager")).FilterSessions(sessions, bManager)))
	require.Equal(t, ids(sessions), ids(ReadBoss(bossEnv("worker").with(EnvBossVisibility, "local")).FilterSessions(sessions, bWorker)))
	require.Equal(t, []string{"impostor"}, ids(ReadBoss(bossEnv("worker")).FilterSessions(append(sessions, Session{ID: "impostor"}), "impostor")))
}

// The send path of a Boss session: exact allowed ids only, no listing.
func TestGuardOps(t *testing.T) {
	ops := &fakeOps{self: bWorker, sessions: sessionViews(bManager, bWorker, bScout, bControl, "outsider")}
	require.Same(t, intercom.Ops(ops), GuardOps(ops, &Boss{}, bWorker), "no contract, no guard")
	g := GuardOps(ops, ReadBoss(bossEnv("worker")), bWorker)

	_, err := g.Send(ctx, intercom.SendRequest{To: bManager, Text: "hi"})
	require.NoError(t, err)
	_, err = g.Ask(ctx, intercom.AskRequest{To: bScout, Text: "?"})
	require.NoError(t, err)
	for _, to := range []string{"outsider", bControl, "boss-manager", strings.ToUpper(bManager), "manager"} {
		_, err = g.Send(ctx, intercom.SendRequest{To: to, Text: "hi"})
		require.ErrorIs(t, err, ErrBossDenied, to)
		_, err = g.Ask(ctx, intercom.AskRequest{To: to, Text: "?"})
		require.ErrorIs(t, err, ErrBossDenied, to)
	}
	_, err = g.Send(ctx, intercom.SendRequest{To: bAdversary, Text: "hi"})
	var be *BossError
	require.True(t, errors.As(err, &be))
	require.Equal(t, BossTargetNotConnected, be.Code)
	require.ErrorIs(t, err, intercom.ErrTargetNotFound, "not connected is not found (exit 3), Boss or not")
	require.Equal(t, []string{bManager, bScout}, ops.sent, "refused sends never reach the session")

	_, err = g.List(ctx, intercom.ListRequest{})
	require.True(t, errors.As(err, &be))
	require.Equal(t, BossScopeDenied, be.Code)
	require.NotErrorIs(t, err, intercom.ErrTargetNotFound)
	require.Contains(t, be.Message, "intercom_team")
	st, err := g.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, st.ActiveSessions, "self and its two live teammates")

	lg := GuardOps(ops, ReadBoss(bossEnv("worker").with(EnvBossVisibility, "local")), bWorker)
	res, err := lg.List(ctx, intercom.ListRequest{IncludeSelf: true})
	require.NoError(t, err)
	require.Len(t, res.Sessions, 5, "local visibility widens discovery")
	_, err = lg.Send(ctx, intercom.SendRequest{To: "outsider", Text: "hi"})
	require.NoError(t, err)
	_, err = lg.Send(ctx, intercom.SendRequest{To: "outs", Text: "hi"})
	require.ErrorIs(t, err, ErrBossDenied, "still exact ids only")

	// Replies: every ask the selection could answer must come from an
	// allowed live sender; sender selectors must be exact ids.
	ops.asks = []intercom.AskView{
		{AskID: "ask-1", From: intercom.Sender{ID: bManager}},
		{AskID: "ask-2", From: intercom.Sender{ID: "outsider"}},
	}
	_, err = g.Reply(ctx, intercom.ReplyRequest{Text: "y", AskID: "ask-1"})
	require.NoError(t, err)
	_, err = g.Reply(ctx, intercom.ReplyRequest{Text: "y", To: bManager})
	require.NoError(t, err)
	_, err = g.Reply(ctx, intercom.ReplyRequest{Text: "y", AskID: "ask-2"})
	require.ErrorIs(t, err, ErrBossDenied)
	_, err = g.Reply(ctx, intercom.ReplyRequest{Text: "y"})
	require.ErrorIs(t, err, ErrBossDenied, "without a selector the outsider's ask could be picked")
	_, err = g.Reply(ctx, intercom.ReplyRequest{Text: "y", To: "manager"})
	require.ErrorIs(t, err, ErrBossDenied)
	require.Len(t, ops.replies, 2)

	// A contract naming another session denies everything.
	bad := GuardOps(ops, ReadBoss(bossEnv("scout")), bWorker)
	_, err = bad.Send(ctx, intercom.SendRequest{To: bManager, Text: "hi"})
	require.True(t, errors.As(err, &be))
	require.Equal(t, BossMetadataInvalid, be.Code)
	_, err = bad.Status(ctx)
	require.ErrorIs(t, err, ErrBossDenied)
}

func TestDeniedOps(t *testing.T) {
	denied := errors.New("BOSS_TEAM_METADATA_INVALID: nope")
	d := DeniedOps(intercom.WhoamiResult{SessionID: "me"}, denied)
	w, err := d.Whoami(ctx)
	require.NoError(t, err)
	require.Equal(t, "me", w.SessionID)
	_, err = RefusedOps(denied).Whoami(ctx)
	require.ErrorIs(t, err, denied, "deny-all: whoami too")
	_, err = d.List(ctx, intercom.ListRequest{})
	require.ErrorIs(t, err, denied)
	_, err = d.Send(ctx, intercom.SendRequest{})
	require.ErrorIs(t, err, denied)
	_, err = d.Ask(ctx, intercom.AskRequest{})
	require.ErrorIs(t, err, denied)
	_, err = d.Reply(ctx, intercom.ReplyRequest{})
	require.ErrorIs(t, err, denied)
	_, err = d.Pending(ctx, intercom.PendingRequest{})
	require.ErrorIs(t, err, denied)
	_, err = d.Status(ctx)
	require.ErrorIs(t, err, denied)
	require.ErrorIs(t, d.SetSummary(ctx, "x"), denied)
	require.ErrorIs(t, d.Listen(ctx, intercom.ListenRequest{}, nil), denied)
}
