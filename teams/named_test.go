package teams

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

var hex48 = regexp.MustCompile(`^[0-9a-f]{48}$`)

func storeAt(t *testing.T) (*Store, intercom.Paths) {
	t.Helper()
	p := intercom.NewPaths(t.TempDir())
	s := NewStore(p)
	s.Now = func() time.Time { return time.UnixMilli(1700000000000) }
	return s, p
}

func TestNamedTeamsCreateJoinList(t *testing.T) {
	s, _ := storeAt(t)
	list, err := s.List("", "")
	require.NoError(t, err)
	require.Empty(t, list, "no file is no teams")

	team, scope, err := s.Create(ctx, "billing", " alpha ")
	require.NoError(t, err)
	require.Equal(t, NamedTeam{Name: "billing", ManagerSessionID: "alpha", CreatedAt: 1700000000000, Members: []string{"alpha"}}, team)
	require.Regexp(t, hex48, scope.Value(), "24 random bytes, lowercase hex")
	require.NoError(t, wire.ValidateScope(scope.Value()))

	// The file is the §7.2 format, 0600, and the scope is in it.
	data, err := os.ReadFile(s.Path())
	require.NoError(t, err)
	fi, _ := os.Stat(s.Path())
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	require.JSONEq(t, fmt.Sprintf(`{"version":1,"teams":[{"name":"billing","scopeId":%q,"managerSessionId":"alpha","createdAt":1700000000000,"memberSessionIds":["alpha"]}]}`,
		scope.Value()), string(data))

	got, gotScope, err := s.Lookup("billing")
	require.NoError(t, err)
	require.Equal(t, team.Name, got.Name)
	require.Equal(t, scope.Value(), gotScope.Value())
	_, _, err = s.Lookup("Billing")
	require.ErrorIs(t, err, ErrTeamNotFound)
	require.Contains(t, err.Error(), `did you mean "billing"`)
	_, _, err = s.Lookup("nope")
	require.ErrorIs(t, err, ErrTeamNotFound)

	_, _, err = s.Create(ctx, "BILLING", "beta")
	require.ErrorIs(t, err, ErrTeamExists, "names are unique in any letter case")
	_, second, err := s.Create(ctx, "frontend", "beta")
	require.NoError(t, err)
	require.NotEqual(t, scope.Value(), second.Value())

	list, err = s.List("", "")
	require.NoError(t, err)
	require.Equal(t, []string{"billing", "frontend"}, []string{list[0].Name, list[1].Name})
	list, err = s.List("beta", second.Value())
	require.NoError(t, err)
	require.Equal(t, []bool{false, true}, []bool{list[0].Current, list[1].Current}, "the team of the current scope is marked")
	require.Equal(t, []string{"", RoleManager}, []string{list[0].Role, list[1].Role}, "and the teams of the caller's roster")
}

func TestTeamNames(t *testing.T) {
	s, _ := storeAt(t)
	for _, name := range []string{"a", "Billing", "x_y-z9", "a234567890123456789012345678901b"} {
		require.NoError(t, ValidateTeamName(name), name)
	}
	for _, name := range []string{"", "1abc", "-abc", "_abc", "a b", "a.b", "a234567890123456789012345678901bc", "é", "a/b"} {
		require.ErrorIs(t, ValidateTeamName(name), ErrInvalidTeamName, name)
		_, _, err := s.Create(ctx, name, "alpha")
		require.ErrorIs(t, err, ErrInvalidTeamName, name)
	}
	for _, manager := range []string{"", "   ", "a\x00b", "a\nb"} {
		_, _, err := s.Create(ctx, "ok", manager)
		require.ErrorIs(t, err, ErrInvalidTeamName, "%q", manager)
	}
}

// A scope never prints: not through fmt, not as JSON.
func TestScopeNeverPrints(t *testing.T) {
	s, _ := storeAt(t)
	_, scope, err := s.Create(ctx, "secret", "alpha")
	require.NoError(t, err)
	for _, out := range []string{fmt.Sprint(scope), fmt.Sprintf("%v %+v %#v %s", scope, scope, scope, scope),
		fmt.Sprintf("%v", struct{ S Scope }{scope})} {
		require.NotContains(t, out, scope.Value())
	}
	_, err = json.Marshal(scope)
	require.Error(t, err)
	list, _ := s.List("", "")
	data, _ := json.Marshal(list)
	require.NotContains(t, string(data), scope.Value())
	require.NotContains(t, string(data), "scopeId")
}

// Entries and keys agent-fleet does not know survive its writes; broken
// entries are skipped, not lost.
func TestNamedTeamsKeepForeignData(t *testing.T) {
	s, p := storeAt(t)
	require.NoError(t, intercom.EnsureDir(p.Dir))
	scope := "0123456789abcdef0123456789abcdef0123456789abcdef"
	require.NoError(t, os.WriteFile(s.Path(), []byte(`{"version":1,"owner":"opencode","teams":[
		{"name":"ops","scopeId":"`+scope+`","managerSessionId":"oc-1","createdAt":1,"memberSessionIds":["oc-1"],"work":"triage","color":"red"},
		{"name":"9bad","scopeId":"x","managerSessionId":"y","createdAt":2}]}`), 0o600))
	list, err := s.List("", "")
	require.NoError(t, err)
	require.Equal(t, []NamedTeam{{Name: "ops", ManagerSessionID: "oc-1", CreatedAt: 1, Members: []string{"oc-1"}, Work: "triage"}}, list)

	for range 2 {
		_, _, err = s.Join(ctx, MembershipRequest{Name: "ops", Self: "alpha"})
		require.NoError(t, err, "recorded once")
	}
	_, _, err = s.Create(ctx, "billing", "alpha")
	require.NoError(t, err)
	var doc struct {
		Owner string           `json:"owner"`
		Teams []map[string]any `json:"teams"`
	}
	data, _ := os.ReadFile(s.Path())
	require.NoError(t, json.Unmarshal(data, &doc))
	require.Equal(t, "opencode", doc.Owner)
	require.Len(t, doc.Teams, 3)
	require.Equal(t, []any{"oc-1", "alpha"}, doc.Teams[0]["memberSessionIds"])
	require.Equal(t, "red", doc.Teams[0]["color"])
	require.Equal(t, scope, doc.Teams[0]["scopeId"])
	require.Equal(t, "9bad", doc.Teams[1]["name"], "a broken entry is kept as it was")

	// A team without a roster gets one that keeps its manager (what the
	// Codex adapter requires of every roster).
	require.NoError(t, os.WriteFile(s.Path(), []byte(`{"version":1,"teams":[{"name":"ops","scopeId":"`+scope+`","managerSessionId":"oc-1","createdAt":1}]}`), 0o600))
	_, _, err = s.Join(ctx, MembershipRequest{Name: "ops", Self: "beta"})
	require.NoError(t, err)
	data, _ = os.ReadFile(s.Path())
	require.NoError(t, json.Unmarshal(data, &doc))
	require.Equal(t, []any{"oc-1", "beta"}, doc.Teams[0]["memberSessionIds"])
}

// A file that is not the format is an error and is never overwritten.
func TestNamedTeamsRefuseAForeignFormat(t *testing.T) {
	for name, content := range map[string]string{
		"not json":     `{"version":1,"teams":[`,
		"version 2":    `{"version":2,"teams":[]}`,
		"no teams":     `{"version":1}`,
		"teams object": `{"version":1,"teams":{}}`,
		"team string":  `{"version":1,"teams":["x"]}`,
		"array":        `[]`,
	} {
		t.Run(name, func(t *testing.T) {
			s, p := storeAt(t)
			require.NoError(t, intercom.EnsureDir(p.Dir))
			require.NoError(t, os.WriteFile(s.Path(), []byte(content), 0o600))
			_, err := s.List("", "")
			require.ErrorIs(t, err, ErrStore)
			_, _, err = s.Create(ctx, "billing", "alpha")
			require.ErrorIs(t, err, ErrStore)
			data, _ := os.ReadFile(s.Path())
			require.Equal(t, content, string(data))
		})
	}
}

// Writers wait for the lock directory; a lock nobody releases ends in
// ErrLocked naming the directory, and nothing is written.
func TestNamedTeamsLock(t *testing.T) {
	old := lockDeadline
	lockDeadline = 300 * time.Millisecond
	t.Cleanup(func() { lockDeadline = old })
	s, p := storeAt(t)
	require.NoError(t, intercom.EnsureDir(p.Dir))
	lock := p.Dir + "/named-teams.lock"
	require.NoError(t, os.Mkdir(lock, 0o700))

	start := time.Now()
	_, _, err := s.Create(ctx, "billing", "alpha")
	require.ErrorIs(t, err, ErrLocked)
	require.Contains(t, err.Error(), lock)
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	_, err = os.Stat(s.Path())
	require.True(t, os.IsNotExist(err))

	// Released while we wait: the write goes through.
	go func() {
		time.Sleep(100 * time.Millisecond)
		_ = os.Remove(lock)
	}()
	_, _, err = s.Create(ctx, "billing", "alpha")
	require.NoError(t, err)
	_, err = os.Stat(lock)
	require.True(t, os.IsNotExist(err), "released after the write")
}

// Concurrent creators (here goroutines with their own stores, as processes
// would be) lose no team.
func TestNamedTeamsConcurrentCreates(t *testing.T) {
	_, p := storeAt(t)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := NewStore(p).Create(ctx, fmt.Sprintf("team%02d", i), "alpha")
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	list, err := NewStore(p).List("", "")
	require.NoError(t, err)
	require.Len(t, list, 20)
}
