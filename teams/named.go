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
	Name             string   `json:"name"`
	ManagerSessionID string   `json:"managerSessionId"`
	CreatedAt        int64    `json:"createdAt"`
	Members          []string `json:"memberSessionIds,omitempty"` // the OpenCode variant's roster
	Work             string   `json:"work,omitempty"`
	// Joined: the asking session is in this team's scope now.
	Joined bool `json:"joined,omitempty"`
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
	_ = json.Unmarshal(fields["memberSessionIds"], &e.Members)
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

// List returns the well-formed teams, in file order, without scopes; the
// team whose scope is current ("" = none) is marked Joined.
func (s *Store) List(current string) ([]NamedTeam, error) {
	f, err := s.read()
	if err != nil {
		return nil, err
	}
	out := []NamedTeam{}
	for _, e := range f.entries {
		if e.usable {
			t := e.NamedTeam
			t.Joined = current != "" && e.scope == current
			out = append(out, t)
		}
	}
	return out, nil
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

// Create adds a team with a fresh private scope and manager as its manager,
// under the lock. A name already taken in any letter case is ErrTeamExists.
func (s *Store) Create(ctx context.Context, name, manager string) (NamedTeam, Scope, error) {
	if err := ValidateTeamName(name); err != nil {
		return NamedTeam{}, Scope{}, err
	}
	manager = strings.TrimSpace(manager)
	if !validManager(manager) {
		return NamedTeam{}, Scope{}, fmt.Errorf("%w: the manager session id is empty or has control characters", ErrInvalidTeamName)
	}
	var team NamedTeam
	var scope Scope
	err := s.modify(ctx, func(f *storeFile) (bool, error) {
		taken := map[string]bool{}
		for _, e := range f.entries {
			if strings.EqualFold(e.Name, name) {
				return false, fmt.Errorf("%w: %q", ErrTeamExists, e.Name)
			}
			taken[e.scope] = true
		}
		for scope.IsZero() || taken[scope.v] {
			v, err := s.newScope()
			if err != nil {
				return false, err
			}
			scope = Scope{v}
		}
		now := time.Now
		if s.Now != nil {
			now = s.Now
		}
		team = NamedTeam{Name: name, ManagerSessionID: manager, CreatedAt: now().UnixMilli()}
		fields := map[string]json.RawMessage{}
		for k, v := range map[string]any{"name": name, "scopeId": scope.v, "managerSessionId": manager, "createdAt": team.CreatedAt} {
			fields[k], _ = json.Marshal(v)
		}
		f.entries = append(f.entries, &entry{NamedTeam: team, scope: scope.v, usable: true, fields: fields})
		return true, nil
	})
	if err != nil {
		return NamedTeam{}, Scope{}, err
	}
	return team, scope, nil
}

// AddMember records sessionID in the team's memberSessionIds when the
// entry keeps that roster (the OpenCode variant); otherwise it does nothing.
func (s *Store) AddMember(ctx context.Context, name, sessionID string) error {
	return s.modify(ctx, func(f *storeFile) (bool, error) {
		for _, e := range f.entries {
			if !e.usable || e.Name != name {
				continue
			}
			if _, kept := e.fields["memberSessionIds"]; !kept || slices.Contains(e.Members, sessionID) {
				return false, nil
			}
			e.Members = append(e.Members, sessionID)
			e.fields["memberSessionIds"], _ = json.Marshal(e.Members)
			return true, nil
		}
		return false, nil
	})
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
