package manifest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const (
	runID   = "team_1a2b3c4d-5e6f-47a8-b9c0-d1e2f3a4b5c6"
	leadID  = "tmuxdeck-c8f1e03a-9b4d-4c7e-81f6-a8b0c3d5e7f9"
	worker1 = "tmuxdeck-9a1b3c5d-7e9f-4a2b-84cc-8f1e03a9b4d2"
	worker2 = "tmuxdeck-3e5f7a9b-1c2d-4e6f-8a0b-2c4d6e8f0a1b"
)

// doc is a valid manifest as a generic JSON object, for tests to bend.
func doc() map[string]any {
	return map[string]any{
		"version": Version, "backend": Backend, "runId": runID, "leadId": leadID,
		"members": []any{
			map[string]any{"sessionId": leadID, "role": "lead"},
			map[string]any{"sessionId": worker1, "role": "worker"},
			map[string]any{"sessionId": worker2, "role": "worker"},
		},
		"createdAt": 1723680000000, "capabilities": []any{},
	}
}

func encode(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	require.NoError(t, err)
	return data
}

func with(key string, value any) []byte {
	d := doc()
	d[key] = value
	data, _ := json.Marshal(d)
	return data
}

func without(key string) []byte {
	d := doc()
	delete(d, key)
	data, _ := json.Marshal(d)
	return data
}

func members(ms ...any) []byte { return with("members", ms) }

func member(id, role string) map[string]any { return map[string]any{"sessionId": id, "role": role} }

func workerID(i int) string { return fmt.Sprintf("tmuxdeck-%08d-0000-4000-8000-000000000000", i) }

func TestParseValid(t *testing.T) {
	many := []any{member(leadID, "lead")}
	for i := 1; i < MaxMembers; i++ {
		many = append(many, member(workerID(i), "worker"))
	}
	cases := map[string]struct {
		data    []byte
		members int
		created int64
	}{
		"three members":         {encode(t, doc()), 3, 1723680000000},
		"lead alone":            {members(member(leadID, "lead")), 1, 1723680000000},
		"lead listed last":      {members(member(worker1, "worker"), member(leadID, "lead")), 2, 1723680000000},
		"64 members":            {members(many...), 64, 1723680000000},
		"createdAt 1":           {with("createdAt", 1), 3, 1},
		"createdAt 1.0":         {[]byte(strings.Replace(string(encode(t, doc())), "1723680000000", "1.0", 1)), 3, 1},
		"createdAt 1e3":         {[]byte(strings.Replace(string(encode(t, doc())), "1723680000000", "1e3", 1)), 3, 1000},
		"createdAt max safe":    {[]byte(strings.Replace(string(encode(t, doc())), "1723680000000", "9007199254740991", 1)), 3, 9007199254740991},
		"pretty printed":        {mustIndent(t, doc()), 3, 1723680000000},
		"surrounding blank":     {append(append([]byte(" \n"), encode(t, doc())...), '\n'), 3, 1723680000000},
		"keys in another order": {[]byte(`{"capabilities":[],"createdAt":5,"members":[{"role":"lead","sessionId":"` + leadID + `"}],"leadId":"` + leadID + `","runId":"` + runID + `","backend":"tmuxdeck","version":"tmuxdeck.team.v1"}`), 1, 5},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			m, err := Parse(c.data)
			require.NoError(t, err)
			require.Equal(t, runID, m.RunID)
			require.Equal(t, leadID, m.LeadID)
			require.Len(t, m.Members, c.members)
			require.Equal(t, c.created, m.CreatedAt)
			lead, ok := m.Member(leadID)
			require.True(t, ok)
			require.Equal(t, RoleLead, lead.Role)
		})
	}
}

func mustIndent(t *testing.T, v any) []byte {
	data, err := json.MarshalIndent(v, "", "  ")
	require.NoError(t, err)
	return data
}

func TestParseInvalid(t *testing.T) {
	secretScope := "7a4b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f"
	tooMany := []any{member(leadID, "lead")}
	for i := 1; i <= MaxMembers; i++ {
		tooMany = append(tooMany, member(workerID(i), "worker"))
	}
	valid := string(encode(t, doc()))
	cases := map[string][]byte{
		// unknown or forbidden keys, anywhere
		"scope key":          with("scope", secretScope),
		"cwd key":            with("cwd", "/Users/secret/confidential-project"),
		"credentials key":    with("credentials", map[string]any{"token": "s3cret"}),
		"proto key":          with("__proto__", map[string]any{}),
		"unknown member key": members(member(leadID, "lead"), map[string]any{"sessionId": worker1, "role": "worker", "extra": "forbidden"}),
		// missing keys
		"no version":      without("version"),
		"no backend":      without("backend"),
		"no runId":        without("runId"),
		"no leadId":       without("leadId"),
		"no members":      without("members"),
		"no createdAt":    without("createdAt"),
		"no capabilities": without("capabilities"),
		"member no role":  members(member(leadID, "lead"), map[string]any{"sessionId": worker1}),
		"member no id":    members(member(leadID, "lead"), map[string]any{"role": "worker"}),
		// version and backend
		"version v2":      with("version", "tmuxdeck.team.v2"),
		"version case":    with("version", "TMUXDECK.team.v1"),
		"version number":  with("version", 1),
		"backend other":   with("backend", "orchestrator"),
		"backend padded":  with("backend", " tmuxdeck"),
		"backend missing": with("backend", nil),
		// run and lead ids
		"runId free form":      with("runId", "invalid-run-id"),
		"runId uppercase":      with("runId", strings.ToUpper(runID[:5])+runID[5:]),
		"runId hex uppercase":  with("runId", "team_1A2B3C4D-5e6f-47a8-b9c0-d1e2f3a4b5c6"),
		"runId not v4":         with("runId", "team_1a2b3c4d-5e6f-17a8-b9c0-d1e2f3a4b5c6"),
		"runId bad variant":    with("runId", "team_1a2b3c4d-5e6f-47a8-79c0-d1e2f3a4b5c6"),
		"runId trailing space": with("runId", runID+" "),
		"runId number":         with("runId", 7),
		"leadId free form":     with("leadId", "td_alpha_lead"),
		"leadId wrong prefix":  with("leadId", "tmux-c8f1e03a-9b4d-4c7e-81f6-a8b0c3d5e7f9"),
		"leadId not member":    with("leadId", workerID(9)),
		// members
		"members empty":       members(),
		"members 65":          members(tooMany...),
		"members object":      with("members", map[string]any{"0": member(leadID, "lead")}),
		"members null":        with("members", nil),
		"member null":         members(member(leadID, "lead"), nil),
		"member string":       members(member(leadID, "lead"), worker1),
		"member id bad":       members(member(leadID, "lead"), member("tmuxdeck-nope", "worker")),
		"duplicate member":    members(member(leadID, "lead"), member(worker1, "worker"), member(worker1, "worker")),
		"duplicate lead":      members(member(leadID, "lead"), member(leadID, "lead")),
		"no lead member":      members(member(worker1, "worker"), member(worker2, "worker")),
		"lead as worker":      members(member(leadID, "worker"), member(worker1, "worker")),
		"worker as lead":      members(member(leadID, "lead"), member(worker1, "lead")),
		"role unknown":        members(member(leadID, "lead"), member(worker1, "manager")),
		"role case":           members(member(leadID, "Lead")),
		"member id as number": members(member(leadID, "lead"), map[string]any{"sessionId": 1, "role": "worker"}),
		// createdAt
		"createdAt zero":     with("createdAt", 0),
		"createdAt negative": with("createdAt", -5),
		"createdAt fraction": with("createdAt", 1.5),
		"createdAt string":   with("createdAt", "1723680000000"),
		"createdAt null":     with("createdAt", nil),
		"createdAt 2^53":     []byte(strings.Replace(valid, "1723680000000", "9007199254740992", 1)),
		"createdAt huge":     []byte(strings.Replace(valid, "1723680000000", "1e400", 1)),
		// capabilities
		"capabilities used":   with("capabilities", []any{"inbox_inspection_authorized"}),
		"capabilities null":   with("capabilities", nil),
		"capabilities object": with("capabilities", map[string]any{}),
		"capabilities string": with("capabilities", ""),
		// document shape
		"array":                []byte(`[]`),
		"string of json":       encode(t, valid),
		"null":                 []byte(`null`),
		"empty":                []byte(``),
		"not json":             []byte(`{"version":`),
		"trailing data":        []byte(valid + `{}`),
		"sparse array":         []byte(strings.Replace(valid, `"members":[`, `"members":[,`, 1)),
		"duplicate top key":    []byte(`{"version":"x",` + valid[1:]),
		"duplicate member key": []byte(strings.Replace(valid, `"role":"worker"`, `"role":"lead","role":"worker"`, 1)),
		"byte order mark":      append([]byte("\ufeff"), valid...),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			m, err := Parse(data)
			require.Nil(t, m)
			require.ErrorIs(t, err, ErrInvalid)
			var me *Error
			require.True(t, errors.As(err, &me))
			require.Equal(t, "ERR_TEAM_MANIFEST_INVALID", me.Code, "the adapters' code stays")
			require.NotEmpty(t, me.Hint, "every rule says which it is")
			require.Equal(t, me.Code+": "+me.Hint, err.Error(), "the code, then the hint")
			for _, value := range []string{secretScope, "secret", "s3cret", "td_alpha", "invalid-run-id", "tmuxdeck-nope", "manager", "orchestrator", "1723680000000", "inbox_inspection"} {
				require.NotContains(t, err.Error(), value, "no value from the file in the error")
			}
		})
	}
}

// Each schema rule has its own hint, so a person fixing a manifest knows
// which rule it breaks without the error quoting the file.
func TestParseHintPerRule(t *testing.T) {
	valid := string(encode(t, doc()))
	for data, hint := range map[string]string{
		`{"version":`:                 "the manifest is not valid JSON",
		`{"version":"x",` + valid[1:]: "a key appears twice in one object",
		string(with("scope", "s")):    "the manifest must be an object with exactly the keys version, backend, runId, leadId, members, createdAt, capabilities",
		string(without("runId")):      "exactly the keys version, backend, runId",
		string(with("version", "v2")): `version must be "tmuxdeck.team.v1"`,
		string(with("backend", "x")):  `backend must be "tmuxdeck"`,
		string(with("runId", "x")):    "runId must be team_ and a lowercase UUIDv4",
		string(with("leadId", "x")):   "leadId must be tmuxdeck- and a lowercase UUIDv4",
		string(members()):             "members must be an array of 1 to 64 members",
		string(with("members", "x")):  "members must be an array of 1 to 64 members",
		string(members(member(leadID, "lead"), map[string]any{"sessionId": worker1})):                 "each member must be an object with exactly the keys sessionId, role",
		string(members(member(leadID, "lead"), member("tmuxdeck-x", "worker"))):                       "a member's sessionId must be tmuxdeck- and a lowercase UUIDv4",
		string(members(member(leadID, "lead"), member(worker1, "worker"), member(worker1, "worker"))): "two members have the same sessionId",
		string(members(member(leadID, "lead"), member(worker1, "boss"))):                              `a member's role must be "lead" or "worker"`,
		string(members(member(leadID, "lead"), member(worker1, "lead"))):                              `the member named by leadId must have role "lead", every other member "worker"`,
		string(members(member(worker1, "worker"))):                                                    "leadId must name one of the members",
		string(with("createdAt", 0)):                                                                  "createdAt must be a positive safe integer (epoch milliseconds)",
		string(with("capabilities", []any{1})):                                                        "capabilities must be []",
	} {
		_, err := Parse([]byte(data))
		require.ErrorIs(t, err, ErrInvalid, data)
		require.Contains(t, err.Error(), "ERR_TEAM_MANIFEST_INVALID: ", data)
		require.Contains(t, err.Error(), hint, data)
	}
	require.ErrorIs(t, NotAMember, ErrInvalid)
	require.Equal(t, "ERR_TEAM_MANIFEST_INVALID: the manifest lists no member with this session id", NotAMember.Error())
	require.NotErrorIs(t, NotAMember, ErrUnavailable)
}

// The duplicate-key walk sees keys of nested objects and arrays of objects
// and is not fooled by strings that look like keys.
func TestHasDuplicateKeys(t *testing.T) {
	for data, dup := range map[string]bool{
		`{"a":1,"b":{"a":1}}`:             false,
		`{"a":[{"a":1},{"a":2}],"b":"a"}`: false,
		`{"a":{"x":1,"x":2}}`:             true,
		`[{"k":1},{"k":1,"k":1}]`:         true,
		`{"a":"b","c":["a","a"]}`:         false,
		`{"":1,"":2}`:                     true,
	} {
		require.Equal(t, dup, hasDuplicateKeys([]byte(data)), data)
	}
}

// The README's sample manifest is one this package accepts.
func TestReadmeSampleParses(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```json\n(\\{\n  \"version\": \"tmuxdeck.team.v1\".*?)```").FindAllSubmatch(readme, -1)
	require.Len(t, blocks, 1, "the README shows one sample manifest")
	m, err := Parse(blocks[0][1])
	require.NoError(t, err)
	require.Len(t, m.Members, 2)
}
