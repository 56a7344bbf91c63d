package teams

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// Named teams (spec §7.2) live in <intercom>/named-teams.json, the file the
// Codex and OpenCode adapters use:
//
//	{"version":1,"teams":[{"name","scopeId","managerSessionId","createdAt"
//	  [,"memberSessionIds":[…],"work"]}]}
//
// A team's scope is private: it is 24 random bytes as 48 lowercase hex
// digits, and nothing here prints it (see Scope).

// TeamNamePattern is what a team name looks like.
const TeamNamePattern = "^[A-Za-z][A-Za-z0-9_-]{0,31}$"

var teamNameRe = regexp.MustCompile(TeamNamePattern)

// ValidateTeamName checks name against TeamNamePattern (ErrInvalidTeamName).
func ValidateTeamName(name string) error {
	if !teamNameRe.MatchString(name) {
		return fmt.Errorf("%w (got %q)", ErrInvalidTeamName, name)
	}
	return nil
}

// Scope is a named team's private scope id. It never prints: String,
// GoString and MarshalJSON hide it; only Value hands it over, to register
// under it or to put it in a child's environment.
type Scope struct{ v string }

// Value is the scope id itself.
func (s Scope) Value() string { return s.v }

// Env is env (KEY=VALUE entries) for a command run in the team of this
// scope: its AGENT_INTERCOM_SCOPE_ID and AGENT_INTERCOM_MANAGER_TARGET set
// to the scope and manager, replacing any it had.
func (s Scope) Env(env []string, manager string) []string {
	out := make([]string, 0, len(env)+2)
	for _, kv := range env {
		if strings.HasPrefix(kv, EnvScope+"=") || strings.HasPrefix(kv, EnvManagerTarget+"=") {
			continue
		}
		out = append(out, kv)
	}
	return append(out, EnvScope+"="+s.v, EnvManagerTarget+"="+manager)
}

// IsZero reports whether s holds no scope.
func (s Scope) IsZero() bool { return s.v == "" }

func (s Scope) String() string   { return "[private scope]" }
func (s Scope) GoString() string { return "teams.Scope{[private]}" }

// MarshalJSON refuses: a scope is never serialized by agent-fleet output.
func (s Scope) MarshalJSON() ([]byte, error) {
	return nil, errors.New("a team scope is private and never serialized")
}

// NamedTeam is a named team as listed: never its scope.
type NamedTeam struct {
	Name             string `json:"name"`
	ManagerSessionID string `json:"managerSessionId"`
	CreatedAt        int64  `json:"createdAt"`
	// Members is the roster (memberSessionIds): every member's session
	// id, the manager's included. An entry without one has the manager
	// as its only member. Service.NamedTeams leaves it (and Work) out for
	// a team the asking session is not a member of: outsiders learn no
	// member's id (intercom_team({team}) refuses them too).
	Members []string `json:"memberSessionIds,omitempty"`
	Work    string   `json:"work,omitempty"`
	// MemberCount is the roster's length (set by Service.NamedTeams).
	MemberCount int `json:"memberCount,omitempty"`
	// Joined: the asking session is a member of this team.
	Joined bool `json:"joined,omitempty"`
	// Current: the asking session is registered in this team's scope.
	Current bool `json:"current,omitempty"`
	// Role is the asking session's role in it: "manager", "member" or
	// "" (not a member).
	Role string `json:"role,omitempty"`
	// Live counts the members connected now; nil (omitted) when nobody
	// can tell: no broker answers, or one without agent-fleet's local API.
	Live *int `json:"live,omitempty"`
}

// Team roles as the named-teams store records them (the Codex adapter's
// roster roles): team:NAME/manager and team:NAME/member select by them.
const (
	RoleManager = "manager"
	RoleMember  = "member"
)

// MaxWorkChars bounds a task team's work description (the Codex
// adapter's limit).
const MaxWorkChars = 2000

// memberIDs is the team's roster: memberSessionIds, or the manager alone.
func (t *NamedTeam) memberIDs() []string {
	if t.Members == nil {
		return []string{t.ManagerSessionID}
	}
	return t.Members
}

// IsMember reports whether id is on the team's roster.
func (t *NamedTeam) IsMember(id string) bool { return slices.Contains(t.memberIDs(), id) }

// RoleOf is id's role in the team ("" for a non-member).
func (t *NamedTeam) RoleOf(id string) string {
	switch {
	case id == t.ManagerSessionID:
		return RoleManager
	case t.IsMember(id):
		return RoleMember
	}
	return ""
}

// MemberIDs is a copy of the roster, the manager first.
func (t *NamedTeam) MemberIDs() []string {
	out := []string{t.ManagerSessionID}
	for _, id := range t.memberIDs() {
		if id != t.ManagerSessionID {
			out = append(out, id)
		}
	}
	return out
}

// Store is named-teams.json with its named-teams.lock directory lock.
// Reads take no lock (writes are atomic renames); every read-modify-write
// holds the lock. Safe for concurrent use by many processes.
type Store struct {
	path, lock, dir string
	// Now stamps createdAt (nil: time.Now); Rand makes scopes (nil:
	// crypto/rand).
	Now  func() time.Time
	Rand io.Reader
}

// NewStore returns the store of p.
func NewStore(p intercom.Paths) *Store {
	return &Store{dir: p.Dir, path: filepath.Join(p.Dir, "named-teams.json"), lock: filepath.Join(p.Dir, "named-teams.lock")}
}

// Path is the store file.
func (s *Store) Path() string { return s.path }

// entry is one team of the file: the fields agent-fleet understands and
// the entry's own JSON, kept so unknown fields survive a rewrite.
type entry struct {
	NamedTeam
	scope  string
	usable bool // name, scope and manager are well formed
	fields map[string]json.RawMessage
}

type storeFile struct {
	entries []*entry
	extra   map[string]json.RawMessage // unknown top-level keys, kept
}

// read loads the file; a missing file is empty. A file that is not the
// §7.2 format is ErrStore and is never overwritten.
func (s *Store) read() (*storeFile, error) {
	data, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return &storeFile{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read named teams: %w", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil || top == nil {
		return nil, fmt.Errorf("%w: %s is not a JSON object", ErrStore, s.path)
	}
	var version float64
	if json.Unmarshal(top["version"], &version) != nil || version != 1 {
		return nil, fmt.Errorf("%w: %s has a version other than 1", ErrStore, s.path)
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(top["teams"], &raws); err != nil || raws == nil {
		return nil, fmt.Errorf("%w: %s has no teams array", ErrStore, s.path)
	}
	f := &storeFile{extra: map[string]json.RawMessage{}}
	for k, v := range top {
		if k != "version" && k != "teams" {
			f.extra[k] = v
		}
	}
	for _, raw := range raws {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
			return nil, fmt.Errorf("%w: %s has a team that is not an object", ErrStore, s.path)
		}
		f.entries = append(f.entries, decodeEntry(fields))
	}
	return f, nil
}

func decodeEntry(fields map[string]json.RawMessage) *entry {
	e := &entry{fields: fields}
	var created float64
	_ = json.Unmarshal(fields["name"], &e.Name)
	_ = json.Unmarshal(fields["scopeId"], &e.scope)
	_ = json.Unmarshal(fields["managerSessionId"], &e.ManagerSessionID)
	_ = json.Unmarshal(fields["createdAt"], &created)
	if json.Unmarshal(fields["memberSessionIds"], &e.Members) != nil || e.Members == nil && fields["memberSessionIds"] != nil {
		e.Members = nil
	}
	_ = json.Unmarshal(fields["work"], &e.Work)
	e.CreatedAt = int64(created)
	e.ManagerSessionID = strings.TrimSpace(e.ManagerSessionID)
	e.usable = teamNameRe.MatchString(e.Name) && e.scope != "" && wire.ValidateScope(e.scope) == nil &&
		validManager(e.ManagerSessionID)
	return e
}

func validManager(id string) bool {
	return id != "" && strings.IndexFunc(id, unicode.IsControl) < 0
}

// write replaces the file atomically (spec §5.5): version, teams, then any
// unknown top-level keys; each team keeps its unknown fields.
func (s *Store) write(f *storeFile) error {
	var b bytes.Buffer
	b.WriteString("{\n  \"version\": 1,\n  \"teams\": [")
	for i, e := range f.entries {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n    ")
		writeObject(&b, e.fields, []string{"name", "scopeId", "managerSessionId", "createdAt", "memberSessionIds", "work"}, "    ")
	}
	if len(f.entries) > 0 {
		b.WriteString("\n  ")
	}
	b.WriteByte(']')
	keys := make([]string, 0, len(f.extra))
	for k := range f.extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		kj, _ := json.Marshal(k)
		fmt.Fprintf(&b, ",\n  %s: %s", kj, compact(f.extra[k]))
	}
	b.WriteString("\n}\n")
	if err := intercom.EnsureDir(s.dir); err != nil {
		return err
	}
	return intercom.WriteFileAtomic(s.path, b.Bytes())
}

// writeObject writes fields as one JSON object: the keys of order first,
// then the rest sorted.
func writeObject(b *bytes.Buffer, fields map[string]json.RawMessage, order []string, indent string) {
	keys := make([]string, 0, len(fields))
	for _, k := range order {
		if _, ok := fields[k]; ok {
			keys = append(keys, k)
		}
	}
	var rest []string
	for k := range fields {
		if !slices.Contains(order, k) {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	keys = append(keys, rest...)
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kj, _ := json.Marshal(k)
		fmt.Fprintf(b, "\n%s  %s: %s", indent, kj, compact(fields[k]))
	}
	b.WriteString("\n" + indent + "}")
}

func compact(raw json.RawMessage) []byte {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return []byte("null")
	}
	return b.Bytes()
}

// List returns the well-formed teams, in file order, without scopes,
// marked for session self: Joined and Role where it is a member, Current
// for the team whose scope is current ("" = none). Live is -1 (unknown).
func (s *Store) List(self, current string) ([]NamedTeam, error) {
	f, err := s.read()
	if err != nil {
		return nil, err
	}
	out := []NamedTeam{}
	for _, e := range f.entries {
		if e.usable {
			t := e.NamedTeam
			t.Members = t.MemberIDs()
			t.Current = current != "" && e.scope == current
			t.Role = t.RoleOf(self)
			t.Joined = t.Role != "" || t.Current
			out = append(out, t)
		}
	}
	return out, nil
}

// Memberships is the teams whose roster lists self, in file order.
func (s *Store) Memberships(self string) ([]NamedTeam, error) {
	all, err := s.List(self, "")
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(t NamedTeam) bool { return t.Role == "" }), nil
}

// TeamOfScope is the name of the team whose scope is scope ("" when
// none is, or scope is "").
func (s *Store) TeamOfScope(scope string) string {
	if scope == "" {
		return ""
	}
	f, err := s.read()
	if err != nil {
		return ""
	}
	for _, e := range f.entries {
		if e.usable && e.scope == scope {
			return e.Name
		}
	}
	return ""
}

// Lookup returns the team with exactly this name and its scope.
// ErrTeamNotFound names a team that differs only in letter case.
func (s *Store) Lookup(name string) (NamedTeam, Scope, error) {
	if err := ValidateTeamName(name); err != nil {
		return NamedTeam{}, Scope{}, err
	}
	f, err := s.read()
	if err != nil {
		return NamedTeam{}, Scope{}, err
	}
	return lookup(f, name)
}

func lookup(f *storeFile, name string) (NamedTeam, Scope, error) {
	hint := ""
	for _, e := range f.entries {
		switch {
		case !e.usable:
		case e.Name == name:
			return e.NamedTeam, Scope{e.scope}, nil
		case strings.EqualFold(e.Name, name):
			hint = fmt.Sprintf(" (did you mean %q?)", e.Name)
		}
	}
	return NamedTeam{}, Scope{}, fmt.Errorf("%w: %q%s", ErrTeamNotFound, name, hint)
}

// Create adds a team with a fresh private scope and manager as its manager
// and only member, under the lock. A name already taken in any letter case
// is ErrTeamExists.
func (s *Store) Create(ctx context.Context, name, manager string) (NamedTeam, Scope, error) {
	return s.Join(ctx, MembershipRequest{Name: name, Self: manager, Create: true})
}

// MembershipRequest adds sessions to a team's roster (Store.Join), as the
// Codex adapter's task teams do.
type MembershipRequest struct {
	Name string
	// Self is the session asking; it becomes a member (and, with Create,
	// the manager).
	Self string
	// Members are other session ids to add: only the team's manager may.
	Members []string
	Create  bool
	// Work describes a task team's task; only with Create.
	Work string
}

func validMemberID(id string) bool {
	return id != "" && strings.TrimSpace(id) == id && strings.IndexFunc(id, unicode.IsControl) < 0
}

// Join records req.Self (and req.Members) on the team's roster under the
// lock, creating the team first with Create. The roster always keeps the
// manager, so a file agent-fleet writes is one the Codex adapter reads.
// Errors: ErrInvalidTeamName, ErrTeamExists, ErrTeamNotFound,
// ErrNotManager (adding others to a team one does not manage),
// intercom.ErrInvalidInput (bad member ids or work), ErrStore, ErrLocked.
func (s *Store) Join(ctx context.Context, req MembershipRequest) (NamedTeam, Scope, error) {
	if err := ValidateTeamName(req.Name); err != nil {
		return NamedTeam{}, Scope{}, err
	}
	self := strings.TrimSpace(req.Self)
	if !validManager(self) {
		return NamedTeam{}, Scope{}, fmt.Errorf("%w: the session id is empty or has control characters", ErrInvalidTeamName)
	}
	add := []string{self}
	for _, m := range req.Members {
		if !validMemberID(m) {
			return NamedTeam{}, Scope{}, fmt.Errorf("%w: a member session id is empty, padded or has control characters", intercom.ErrInvalidInput)
		}
		if !slices.Contains(add, m) {
			add = append(add, m)
		}
	}
	work := strings.TrimSpace(req.Work)
	switch {
	case req.Work != "" && work == "":
		return NamedTeam{}, Scope{}, fmt.Errorf("%w: work must describe the task", intercom.ErrInvalidInput)
	case len([]rune(req.Work)) > MaxWorkChars:
		return NamedTeam{}, Scope{}, fmt.Errorf("%w: work has at most %d characters", intercom.ErrInvalidInput, MaxWorkChars)
	case work != "" && !req.Create:
		return NamedTeam{}, Scope{}, fmt.Errorf("%w: work is set when a team is created; create a new team for another task", intercom.ErrInvalidInput)
	}
	var team NamedTeam
	var scope Scope
	err := s.modify(ctx, func(f *storeFile) (bool, error) {
		var e *entry
		if req.Create {
			var err error
			if e, err = s.newEntry(f, req.Name, self, work); err != nil {
				return false, err
			}
		} else {
			if _, _, err := lookup(f, req.Name); err != nil {
				return false, err
			}
			e = find(f, req.Name)
		}
		if len(add) > 1 && e.ManagerSessionID != self {
			return false, fmt.Errorf("%w: only %s, the manager of team %s, may add other sessions to it", ErrNotManager, e.ManagerSessionID, e.Name)
		}
		roster := e.MemberIDs()
		changed := req.Create || e.Members == nil
		for _, id := range add {
			if !slices.Contains(roster, id) {
				roster, changed = append(roster, id), true
			}
		}
		e.setMembers(roster)
		team, scope = e.NamedTeam, Scope{e.scope}
		return changed, nil
	})
	if err != nil {
		return NamedTeam{}, Scope{}, err
	}
	return team, scope, nil
}

// newEntry appends a new team with a fresh scope, its manager its only
// member.
func (s *Store) newEntry(f *storeFile, name, manager, work string) (*entry, error) {
	taken := map[string]bool{}
	for _, e := range f.entries {
		if strings.EqualFold(e.Name, name) {
			return nil, fmt.Errorf("%w: %q", ErrTeamExists, e.Name)
		}
		taken[e.scope] = true
	}
	var scope string
	for scope == "" || taken[scope] {
		v, err := s.newScope()
		if err != nil {
			return nil, err
		}
		scope = v
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	team := NamedTeam{Name: name, ManagerSessionID: manager, CreatedAt: now().UnixMilli(), Work: work}
	fields := map[string]json.RawMessage{}
	for k, v := range map[string]any{"name": name, "scopeId": scope, "managerSessionId": manager, "createdAt": team.CreatedAt} {
		fields[k], _ = json.Marshal(v)
	}
	if work != "" {
		fields["work"], _ = json.Marshal(work)
	}
	e := &entry{NamedTeam: team, scope: scope, usable: true, fields: fields}
	f.entries = append(f.entries, e)
	return e, nil
}

func find(f *storeFile, name string) *entry {
	for _, e := range f.entries {
		if e.usable && e.Name == name {
			return e
		}
	}
	return nil
}

func (e *entry) setMembers(ids []string) {
	e.Members = ids
	e.fields["memberSessionIds"], _ = json.Marshal(ids)
}

// Leave takes self off the team's roster. Errors: ErrTeamNotFound,
// ErrNotMember, ErrManagerLeaves (a manager deletes its team instead: the
// roster must keep its manager), ErrStore, ErrLocked.
func (s *Store) Leave(ctx context.Context, name, self string) error {
	if err := ValidateTeamName(name); err != nil {
		return err
	}
	return s.modify(ctx, func(f *storeFile) (bool, error) {
		if _, _, err := lookup(f, name); err != nil {
			return false, err
		}
		e := find(f, name)
		switch e.RoleOf(self) {
		case "":
			return false, fmt.Errorf("%w: %s is not a member of team %s", ErrNotMember, self, name)
		case RoleManager:
			return false, fmt.Errorf("%w: %s manages team %s; delete the team instead (agent-fleet teams delete %s)", ErrManagerLeaves, self, name, name)
		}
		e.setMembers(slices.DeleteFunc(e.MemberIDs(), func(id string) bool { return id == self }))
		return true, nil
	})
}

// Delete removes the team; only its manager may. It returns the team as
// it was and its scope. Errors: ErrTeamNotFound, ErrNotManager, ErrStore,
// ErrLocked.
func (s *Store) Delete(ctx context.Context, name, self string) (NamedTeam, Scope, error) {
	if err := ValidateTeamName(name); err != nil {
		return NamedTeam{}, Scope{}, err
	}
	var team NamedTeam
	var scope Scope
	err := s.modify(ctx, func(f *storeFile) (bool, error) {
		if _, _, err := lookup(f, name); err != nil {
			return false, err
		}
		e := find(f, name)
		if e.ManagerSessionID != self {
			return false, fmt.Errorf("%w: team %s is managed by %s; only its manager may delete it", ErrNotManager, name, e.ManagerSessionID)
		}
		team, scope = e.NamedTeam, Scope{e.scope}
		f.entries = slices.DeleteFunc(f.entries, func(x *entry) bool { return x == e })
		return true, nil
	})
	return team, scope, err
}

// modify runs a read-modify-write under the lock; fn reports whether it
// changed anything to write.
func (s *Store) modify(ctx context.Context, fn func(*storeFile) (bool, error)) error {
	if err := intercom.EnsureDir(s.dir); err != nil {
		return err
	}
	release, err := dirLock(ctx, s.lock)
	if err != nil {
		return err
	}
	defer release()
	f, err := s.read()
	if err != nil {
		return err
	}
	changed, err := fn(f)
	if err != nil || !changed {
		return err
	}
	return s.write(f)
}

// newScope is 24 random bytes as 48 lowercase hex digits (a valid v4 scope).
func (s *Store) newScope() (string, error) {
	r := s.Rand
	if r == nil {
		r = rand.Reader
	}
	b := make([]byte, 24)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", fmt.Errorf("make a team scope: %w", err)
	}
	return hex.EncodeToString(b), nil
}
