// Package manifest reads TmuxDeck team manifests (tmuxdeck.team.v1, spec
// §7.1): a small JSON file that names a team's lead and workers by
// their intercom session ids. The schema is exact and the file checks are
// strict; every failure is one of two codes with a fixed hint naming the
// rule broken. Neither carries a path or a value from the file, so a
// manifest's contents cannot leak through them.
//
// The package imports nothing of the project: teams uses it.
package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// Schema constants (spec §7.1).
const (
	Version    = "tmuxdeck.team.v1"
	Backend    = "tmuxdeck"
	MaxBytes   = 64 << 10 // largest manifest file, bytes
	MaxMembers = 64       // most members of a team
	// EnvVar names the manifest of the current session (an absolute path).
	EnvVar = "AGENT_INTERCOM_TEAM_MANIFEST"
)

// Role is a member's role: exactly one lead, every other member a worker.
type Role string

const (
	RoleLead   Role = "lead"
	RoleWorker Role = "worker"
)

// Member is one team member. SessionID is "tmuxdeck-" + a lowercase UUIDv4
// and doubles as the member's intercom session id.
type Member struct {
	SessionID string `json:"sessionId"`
	Role      Role   `json:"role"`
}

// Manifest is a validated tmuxdeck.team.v1 manifest. Version and Backend are
// implied; Capabilities is always empty in this version.
type Manifest struct {
	RunID     string   // "team_" + lowercase UUIDv4
	LeadID    string   // the lead member's session id
	Members   []Member // 1..MaxMembers, unique ids, in file order
	CreatedAt int64    // epoch ms, > 0
}

// Error is a manifest failure: one of the two codes the adapters share
// and, but for the sentinels, a hint naming the rule that was broken. The
// hint is fixed text: never a path or a value from the file.
type Error struct {
	Code string
	Hint string
}

// Error is the code, then the hint: "ERR_TEAM_MANIFEST_INVALID: …".
func (e *Error) Error() string {
	if e.Hint == "" {
		return e.Code
	}
	return e.Code + ": " + e.Hint
}

// Is matches every error of the same code, so errors.Is(err, ErrInvalid)
// holds whatever the hint.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// invalid is ErrInvalid with a hint.
func invalid(hint string) *Error { return &Error{Code: ErrInvalid.Code, Hint: hint} }

// unavailable is ErrUnavailable with a hint.
func unavailable(hint string) *Error { return &Error{Code: ErrUnavailable.Code, Hint: hint} }

// NotAMember is ErrInvalid for a valid manifest that does not list the
// caller's session id.
var NotAMember = invalid("the manifest lists no member with this session id")

// The two failures (spec §3.3 "Team manifest").
var (
	// ErrUnavailable: the file or its directory cannot be used (missing,
	// unreadable, a symlink, wrong owner or mode, too large).
	ErrUnavailable = &Error{Code: "ERR_TEAM_MANIFEST_UNAVAILABLE"}
	// ErrInvalid: the path is not absolute, or the content breaks the schema.
	ErrInvalid = &Error{Code: "ERR_TEAM_MANIFEST_INVALID"}
)

var (
	// Compiled when a manifest is first read, not at every process start.
	runIDRe     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^team_` + uuidV4) })
	sessionIDRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^tmuxdeck-` + uuidV4) })
	topKeys     = []string{"version", "backend", "runId", "leadId", "members", "createdAt", "capabilities"}
	memberKeys  = []string{"sessionId", "role"}
)

// uuidV4 is a lowercase version-4 UUID to the end of the text.
const uuidV4 = `[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`

// maxSafeInteger is JavaScript's Number.MAX_SAFE_INTEGER (2^53-1).
const maxSafeInteger = 1<<53 - 1

// Parse validates a manifest document (spec §7.1): an object with exactly
// the seven keys, no others anywhere, every value in its exact form. A key
// that appears twice in one object is invalid too (JSON.parse would keep the
// last one; refusing is the fail-closed reading). Any violation is
// ErrInvalid, with a hint naming the rule.
func Parse(data []byte) (*Manifest, error) {
	if !json.Valid(data) {
		return nil, invalid("the manifest is not valid JSON")
	}
	if hasDuplicateKeys(data) {
		return nil, invalid("a key appears twice in one object")
	}
	top, ok := exactObject(data, topKeys)
	if !ok {
		return nil, invalid("the manifest must be an object with exactly the keys " + strings.Join(topKeys, ", "))
	}
	var m Manifest
	if s, ok := str(top["version"]); !ok || s != Version {
		return nil, invalid(`version must be "` + Version + `"`)
	}
	if s, ok := str(top["backend"]); !ok || s != Backend {
		return nil, invalid(`backend must be "` + Backend + `"`)
	}
	if m.RunID, ok = str(top["runId"]); !ok || !runIDRe().MatchString(m.RunID) {
		return nil, invalid("runId must be team_ and a lowercase UUIDv4")
	}
	if m.LeadID, ok = str(top["leadId"]); !ok || !sessionIDRe().MatchString(m.LeadID) {
		return nil, invalid("leadId must be tmuxdeck- and a lowercase UUIDv4")
	}
	var members []json.RawMessage
	if !array(top["members"], &members) || len(members) < 1 || len(members) > MaxMembers {
		return nil, invalid(fmt.Sprintf("members must be an array of 1 to %d members", MaxMembers))
	}
	seen := make(map[string]bool, len(members))
	lead := false
	for _, raw := range members {
		obj, ok := exactObject(raw, memberKeys)
		if !ok {
			return nil, invalid("each member must be an object with exactly the keys sessionId, role")
		}
		id, ok := str(obj["sessionId"])
		if !ok || !sessionIDRe().MatchString(id) {
			return nil, invalid("a member's sessionId must be tmuxdeck- and a lowercase UUIDv4")
		}
		if seen[id] {
			return nil, invalid("two members have the same sessionId")
		}
		seen[id] = true
		role, ok := str(obj["role"])
		if !ok || (role != string(RoleLead) && role != string(RoleWorker)) {
			return nil, invalid(`a member's role must be "lead" or "worker"`)
		}
		if (id == m.LeadID) != (role == string(RoleLead)) {
			return nil, invalid(`the member named by leadId must have role "lead", every other member "worker"`)
		}
		lead = lead || id == m.LeadID
		m.Members = append(m.Members, Member{SessionID: id, Role: Role(role)})
	}
	if !lead {
		return nil, invalid("leadId must name one of the members")
	}
	if m.CreatedAt, ok = safePositiveInteger(top["createdAt"]); !ok {
		return nil, invalid("createdAt must be a positive safe integer (epoch milliseconds)")
	}
	var caps []json.RawMessage
	if !array(top["capabilities"], &caps) || len(caps) != 0 {
		return nil, invalid("capabilities must be []")
	}
	return &m, nil
}

// Member returns the member with session id id.
func (m *Manifest) Member(id string) (Member, bool) {
	for _, mb := range m.Members {
		if mb.SessionID == id {
			return mb, true
		}
	}
	return Member{}, false
}

// exactObject decodes a JSON object whose key set is exactly keys.
func exactObject(data []byte, keys []string) (map[string]json.RawMessage, bool) {
	if t := firstByte(data); t != '{' {
		return nil, false
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil || len(obj) != len(keys) {
		return nil, false
	}
	for _, k := range keys {
		if _, ok := obj[k]; !ok {
			return nil, false
		}
	}
	return obj, true
}

func array(data json.RawMessage, out *[]json.RawMessage) bool {
	return firstByte(data) == '[' && json.Unmarshal(data, out) == nil
}

func str(data json.RawMessage) (string, bool) {
	var s string
	if firstByte(data) != '"' || json.Unmarshal(data, &s) != nil {
		return "", false
	}
	return s, true
}

// safePositiveInteger accepts a JSON number whose value is an integer in
// 1..2^53-1, as Number.isSafeInteger(x) && x > 0 does (so 1.0 and 1e3 pass).
func safePositiveInteger(data json.RawMessage) (int64, bool) {
	c := firstByte(data)
	if c != '-' && (c < '0' || c > '9') {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(bytes.TrimSpace(data)), 64)
	if err != nil || f != math.Trunc(f) || f <= 0 || f > maxSafeInteger {
		return 0, false
	}
	return int64(f), true
}

func firstByte(data []byte) byte {
	data = bytes.TrimLeft(data, " \t\r\n")
	if len(data) == 0 {
		return 0
	}
	return data[0]
}

// jsonFrame is one open object or array while hasDuplicateKeys walks.
type jsonFrame struct {
	object bool
	keys   map[string]bool
	key    bool // in an object: the next token is a key (or its end)
}

// hasDuplicateKeys walks a valid JSON document and reports whether any
// object names a key twice.
func hasDuplicateKeys(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	var stack []*jsonFrame
	valueDone := func() {
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].key = true
		}
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return false
		}
		if err != nil {
			return true // not reached for valid input; fail closed
		}
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].key {
			top := stack[n-1]
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:n-1]
				valueDone()
				continue
			}
			k, _ := tok.(string)
			if top.keys[k] {
				return true
			}
			top.keys[k] = true
			top.key = false
			continue
		}
		switch d, _ := tok.(json.Delim); d {
		case '{':
			stack = append(stack, &jsonFrame{object: true, keys: map[string]bool{}, key: true})
		case '[':
			stack = append(stack, &jsonFrame{})
		case '}', ']':
			stack = stack[:len(stack)-1]
			valueDone()
		default:
			valueDone()
		}
	}
}
