package teams

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// codexAccepts applies the Codex adapter's reader of named-teams.json to
// data: it refuses the whole file when any entry breaks a rule, so every
// file agent-fleet writes must pass. The rules, read from the adapter's
// named-teams store: a name of TeamNamePattern, unique; a scope of 48
// lowercase hex digits, unique; a trimmed manager without control
// characters; a positive integer createdAt; memberSessionIds, when
// present, unique trimmed non-empty ids that include the manager; work,
// when present, non-blank and at most 2000 characters.
func codexAccepts(t *testing.T, data []byte) {
	t.Helper()
	var doc struct {
		Version *float64         `json:"version"`
		Teams   []map[string]any `json:"teams"`
	}
	require.NoError(t, json.Unmarshal(data, &doc))
	require.NotNil(t, doc.Version)
	require.Equal(t, 1.0, *doc.Version)
	require.NotNil(t, doc.Teams)
	hex := regexp.MustCompile(`^[0-9a-f]{48}$`)
	clean := func(s string) bool {
		return s != "" && strings.TrimSpace(s) == s && strings.IndexFunc(s, unicode.IsControl) < 0
	}
	names, scopes := map[string]bool{}, map[string]bool{}
	for _, e := range doc.Teams {
		name, _ := e["name"].(string)
		scope, _ := e["scopeId"].(string)
		manager, _ := e["managerSessionId"].(string)
		created, _ := e["createdAt"].(float64)
		require.NoError(t, ValidateTeamName(name))
		require.Regexp(t, hex, scope)
		require.True(t, clean(manager), "manager %q", manager)
		require.True(t, created > 0 && created == float64(int64(created)), "createdAt %v", e["createdAt"])
		if raw, ok := e["memberSessionIds"]; ok {
			list, ok := raw.([]any)
			require.True(t, ok, "memberSessionIds is an array")
			seen := map[string]bool{}
			for _, v := range list {
				id, _ := v.(string)
				require.True(t, clean(id), "member %q", v)
				require.False(t, seen[id], "member %q twice", id)
				seen[id] = true
			}
			require.True(t, seen[manager], "the roster keeps its manager %q", manager)
		}
		if raw, ok := e["work"]; ok {
			work, _ := raw.(string)
			require.True(t, strings.TrimSpace(work) != "" && len([]rune(work)) <= MaxWorkChars, "work %q", raw)
		}
		require.False(t, names[name], "name %s twice", name)
		require.False(t, scopes[scope], "scope twice")
		names[name], scopes[scope] = true, true
	}
}

func fileOf(t *testing.T, s *Store) []byte {
	t.Helper()
	data, err := os.ReadFile(s.Path())
	require.NoError(t, err)
	return data
}

// The file the Codex adapter writes for its task teams (compact JSON,
// rosters, work) reads as memberships, and what agent-fleet writes back
// is a file the adapter reads.
func TestNamedTeamsFileOfTheCodexAdapter(t *testing.T) {
	s, p := storeAt(t)
	fixture, err := os.ReadFile("testdata/named-teams-codex.json")
	require.NoError(t, err)
	codexAccepts(t, fixture)
	require.NoError(t, intercom.EnsureDir(p.Dir))
	require.NoError(t, os.WriteFile(s.Path(), fixture, 0o600))

	mine, err := s.Memberships("self")
	require.NoError(t, err)
	require.Len(t, mine, 2)
	require.Equal(t, []string{"launch", "review"}, []string{mine[0].Name, mine[1].Name})
	require.Equal(t, []string{RoleManager, RoleMember}, []string{mine[0].Role, mine[1].Role}, "roles are per team")
	require.Equal(t, "Launch page", mine[0].Work)
	none, err := s.Memberships("outsider")
	require.NoError(t, err)
	require.Empty(t, none)

	_, _, err = s.Join(ctx, MembershipRequest{Name: "launch", Self: "late"})
	require.NoError(t, err)
	_, _, err = s.Join(ctx, MembershipRequest{Name: "ops", Self: "self", Members: []string{"peer-id"}, Create: true, Work: "  Triage  "})
	require.NoError(t, err)
	require.NoError(t, s.Leave(ctx, "review", "self"))
	_, _, err = s.Create(ctx, "plain", "alpha")
	require.NoError(t, err)
	_, _, err = s.Delete(ctx, "plain", "alpha")
	require.NoError(t, err)
	data := fileOf(t, s)
	codexAccepts(t, data)
	var doc struct{ Teams []map[string]any }
	require.NoError(t, json.Unmarshal(data, &doc))
	require.Len(t, doc.Teams, 3)
	require.Equal(t, []any{"self", "peer-id", "late"}, doc.Teams[0]["memberSessionIds"])
	require.Equal(t, []any{"peer-id"}, doc.Teams[1]["memberSessionIds"])
	require.Equal(t, map[string]any{"name": "ops", "scopeId": doc.Teams[2]["scopeId"], "managerSessionId": "self",
		"createdAt": 1700000000000.0, "memberSessionIds": []any{"self", "peer-id"}, "work": "Triage"}, doc.Teams[2])
}

// Membership rules, as the Codex adapter's task teams have them: only the
// manager adds others; work only at creation; a manager cannot leave its
// team and only it deletes the team; a refused write changes nothing.
func TestMembershipRules(t *testing.T) {
	s, _ := storeAt(t)
	_, _, err := s.Join(ctx, MembershipRequest{Name: "launch", Self: "self", Members: []string{"front"}, Create: true, Work: "Launch page"})
	require.NoError(t, err)
	before := fileOf(t, s)

	_, _, err = s.Join(ctx, MembershipRequest{Name: "launch", Self: "front", Members: []string{"outsider"}})
	require.ErrorIs(t, err, ErrNotManager)
	require.Contains(t, err.Error(), "only self, the manager of team launch, may add other sessions")
	_, _, err = s.Join(ctx, MembershipRequest{Name: "launch", Self: "self", Work: "another task"})
	require.ErrorIs(t, err, intercom.ErrInvalidInput)
	for _, bad := range []MembershipRequest{
		{Name: "x", Self: "self", Create: true, Work: "   "},
		{Name: "x", Self: "self", Create: true, Work: strings.Repeat("w", MaxWorkChars+1)},
		{Name: "x", Self: "self", Create: true, Members: []string{" padded"}},
		{Name: "x", Self: "self", Create: true, Members: []string{""}},
	} {
		_, _, err = s.Join(ctx, bad)
		require.ErrorIs(t, err, intercom.ErrInvalidInput, "%+v", bad)
	}
	_, _, err = s.Join(ctx, MembershipRequest{Name: "nope", Self: "self"})
	require.ErrorIs(t, err, ErrTeamNotFound)
	require.ErrorIs(t, s.Leave(ctx, "launch", "self"), ErrManagerLeaves)
	require.ErrorIs(t, s.Leave(ctx, "launch", "outsider"), ErrNotMember)
	require.ErrorIs(t, s.Leave(ctx, "nope", "self"), ErrTeamNotFound)
	_, _, err = s.Delete(ctx, "launch", "front")
	require.ErrorIs(t, err, ErrNotManager)
	require.Contains(t, err.Error(), "team launch is managed by self; only its manager may delete it")
	require.Equal(t, string(before), string(fileOf(t, s)), "nothing refused was written")

	require.NoError(t, s.Leave(ctx, "launch", "front"))
	team, _, err := s.Lookup("launch")
	require.NoError(t, err)
	require.Equal(t, []string{"self"}, team.Members)
	deleted, _, err := s.Delete(ctx, "launch", "self")
	require.NoError(t, err)
	require.Equal(t, "launch", deleted.Name)
	_, _, err = s.Lookup("launch")
	require.ErrorIs(t, err, ErrTeamNotFound)
}

// Independent writers cannot lose each other's memberships (the lock).
func TestConcurrentJoinsLoseNoMember(t *testing.T) {
	s, p := storeAt(t)
	_, _, err := s.Create(ctx, "parallel", "manager")
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := NewStore(p).Join(ctx, MembershipRequest{Name: "parallel", Self: fmt.Sprintf("m%d", i)})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	team, _, err := s.Lookup("parallel")
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"manager", "m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7"}, team.Members)
	codexAccepts(t, fileOf(t, s))
}

// recordingOps records what each send carried.
type recordingOps struct {
	*fakeOps
	mu    sync.Mutex
	sends []intercom.SendRequest
}

func (o *recordingOps) Send(ctx context.Context, req intercom.SendRequest) (*intercom.SendResult, error) {
	o.mu.Lock()
	o.sends = append(o.sends, req)
	o.mu.Unlock()
	return o.fakeOps.Send(ctx, req)
}

// Ungrouped contact stays ungrouped; one shared team is carried; several
// need the sender to choose; a team both do not share is refused (the
// Codex adapter's message-team rules).
func TestMessagesCarryTheSharedTeam(t *testing.T) {
	s, p := storeAt(t)
	ops := &recordingOps{fakeOps: &fakeOps{self: "self", sessions: []intercom.SessionView{{ID: "self", Name: "planner"}, {ID: "peer-id", Name: "front"}}}}
	to := &TeamOps{Ops: ops, Self: "self", Store: s}
	last := func() intercom.SendRequest { return ops.sends[len(ops.sends)-1] }
	send := func(target, team string) error {
		_, err := to.Send(ctx, intercom.SendRequest{To: target, Text: "x", Team: team})
		return err
	}
	_, _, err := s.Create(ctx, "mine", "self")
	require.NoError(t, err)
	_, _, err = s.Create(ctx, "theirs", "peer-id")
	require.NoError(t, err)
	require.NoError(t, send("front", ""))
	require.Equal(t, intercom.SendRequest{To: "peer-id", Text: "x"}, last(), "initial contact is ungrouped, by exact id")

	_, _, err = s.Join(ctx, MembershipRequest{Name: "mine", Self: "self", Members: []string{"peer-id"}})
	require.NoError(t, err)
	require.NoError(t, send("front", ""))
	require.Equal(t, "mine", last().Team)
	_, _, err = s.Join(ctx, MembershipRequest{Name: "second", Self: "self", Members: []string{"peer-id"}, Create: true})
	require.NoError(t, err)
	n := len(ops.sends)
	err = send("front", "")
	require.ErrorIs(t, err, intercom.ErrAmbiguousTarget, "exit 7")
	require.ErrorIs(t, err, ErrTeamChoice, "the way out is a team, not a fuller id")
	require.ErrorContains(t, err, `you and "front" share teams mine, second; say which team this message is in (--team NAME, or team in the tools)`)
	require.NoError(t, send("front", "second"))
	require.Equal(t, "second", last().Team)
	require.ErrorIs(t, send("outsider", "mine"), ErrNotMember, "both sessions must belong to the team")
	require.ErrorIs(t, send("front", "theirs"), ErrNotMember, "the sender is not in it")
	require.ErrorIs(t, send("front", "nope"), ErrTeamNotFound)
	require.Len(t, ops.sends, n+1, "refused sends send nothing")
	_ = p
}

// A name two of the sender's teams each have once is settled by the team
// the sender names.
func TestTeamSettlesAName(t *testing.T) {
	s, _ := storeAt(t)
	ops := &recordingOps{fakeOps: &fakeOps{self: "carol", sessions: []intercom.SessionView{{ID: "carol"}, {ID: "eve-5", Name: "Eve"}, {ID: "eve-6", Name: "Eve"}}}}
	to := &TeamOps{Ops: ops, Self: "carol", Store: s}
	for team, member := range map[string]string{"ta": "eve-5", "tb": "eve-6"} {
		_, _, err := s.Join(ctx, MembershipRequest{Name: team, Self: "carol", Members: []string{member}, Create: true})
		require.NoError(t, err)
	}
	_, err := to.Send(ctx, intercom.SendRequest{To: "Eve", Text: "x"})
	require.ErrorIs(t, err, intercom.ErrAmbiguousTarget)
	require.NotErrorIs(t, err, ErrTeamChoice, "two sessions: a session id settles it")
	for team, member := range map[string]string{"ta": "eve-5", "tb": "eve-6"} {
		_, err := to.Send(ctx, intercom.SendRequest{To: "eve", Text: "x", Team: team})
		require.NoError(t, err, team)
		require.Equal(t, intercom.SendRequest{To: member, Text: "x", Team: team}, ops.sends[len(ops.sends)-1])
	}
}

// refusingOps fails the sends to some sessions as the broker would.
type refusingOps struct {
	*fakeOps
	refuse map[string]string // id: delivery_failed code
}

func (o *refusingOps) Send(ctx context.Context, req intercom.SendRequest) (*intercom.SendResult, error) {
	if o.refuse[req.To] == "unknown" { // the connection dropped before the outcome came
		return &intercom.SendResult{To: req.To, MessageID: "m-" + req.To}, fmt.Errorf("%w (message m-%s)", intercom.ErrOutcomeUnknown, req.To)
	}
	if code, ok := o.refuse[req.To]; ok {
		return &intercom.SendResult{To: req.To, TargetID: req.To, MessageID: "m-" + req.To, Code: code, Reason: "Session not found"}, nil
	}
	return o.fakeOps.Send(ctx, req)
}

// A team send that some members did not get says which, and why, in its
// own reason (the CLI's error line), not only in the recipients.
func TestPartialTeamSendSaysWhoMissedIt(t *testing.T) {
	s, _ := storeAt(t)
	ops := &refusingOps{fakeOps: &fakeOps{self: "lead", sessions: sessionViews("lead", "ann", "bob", "cat")},
		refuse: map[string]string{"bob": "SESSION_NOT_FOUND"}}
	_, _, err := s.Join(ctx, MembershipRequest{Name: "alpha", Self: "lead", Members: []string{"ann", "bob", "cat"}, Create: true})
	require.NoError(t, err)
	res, err := (&TeamOps{Ops: ops, Self: "lead", Store: s}).Send(ctx, intercom.SendRequest{To: "team:alpha", Text: "x"})
	require.NoError(t, err)
	require.False(t, res.OK)
	require.Len(t, res.Recipients, 3)
	require.Equal(t, "PARTIAL_DELIVERY", res.Code)
	require.Equal(t, "1 of 3 recipients did not get it: bob (SESSION_NOT_FOUND)", res.Reason)
	out, err := json.Marshal(res)
	require.NoError(t, err)
	require.NotContains(t, string(out), `"messageId":""`, "a team send has no message id of its own: omitted")
	require.NotContains(t, string(out), `"targetId":""`)

	// A member whose outcome is unknown is said so; when none surely
	// missed it, the whole send's outcome is unknown (exit 8), not failed.
	ops.refuse = map[string]string{"bob": "unknown"}
	res, err = (&TeamOps{Ops: ops, Self: "lead", Store: s}).Send(ctx, intercom.SendRequest{To: "team:alpha", Text: "y"})
	require.NoError(t, err)
	require.Equal(t, intercom.CodeOutcomeUnknown, res.Code)
	require.Equal(t, "1 of 3 recipients may or may not have it: bob (OUTCOME_UNKNOWN)", res.Reason)
	require.ErrorIs(t, &intercom.DeliveryError{Code: res.Code}, intercom.ErrOutcomeUnknown)
	ops.refuse = map[string]string{"bob": "unknown", "cat": "SESSION_NOT_FOUND"}
	res, err = (&TeamOps{Ops: ops, Self: "lead", Store: s}).Send(ctx, intercom.SendRequest{To: "team:alpha", Text: "z"})
	require.NoError(t, err)
	require.Equal(t, "PARTIAL_DELIVERY", res.Code, "cat surely missed it")
}
