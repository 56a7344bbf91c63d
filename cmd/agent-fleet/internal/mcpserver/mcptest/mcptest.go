// Package mcptest drives MCP servers from tests: an in-memory client for a
// server in the test's process, and tool results decoded into their text,
// structuredContent and error flag. Only tests import it.
package mcptest

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
)

// Result is a decoded tool result.
type Result struct {
	Text       string
	Structured map[string]any
	IsError    bool
}

// Decode decodes res, which must carry exactly one text content and no
// null anywhere in its structuredContent (optional members are left out,
// never null: docs/protocol.md §8.3).
func Decode(t testing.TB, res *mcp.CallToolResult) Result {
	t.Helper()
	r := Result{IsError: res.IsError}
	require.Len(t, res.Content, 1)
	r.Text = res.Content[0].(*mcp.TextContent).Text
	if res.StructuredContent != nil {
		data, err := json.Marshal(res.StructuredContent)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(data, &r.Structured))
		if path := NullAt(r.Structured, "structuredContent"); path != "" {
			require.Failf(t, "a null in structuredContent", "%s is null in %s", path, data)
		}
	}
	return r
}

// NullAt is the path of the first null in v, a decoded JSON value under
// path ("" when it holds none).
func NullAt(v any, path string) string {
	switch v := v.(type) {
	case nil:
		return path
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if p := NullAt(v[k], path+"."+k); p != "" {
				return p
			}
		}
	case []any:
		for i, e := range v {
			if p := NullAt(e, fmt.Sprintf("%s[%d]", path, i)); p != "" {
				return p
			}
		}
	}
	return ""
}

// Caller calls tools on cs and decodes their results; a protocol error
// fails the test.
func Caller(t testing.TB, cs *mcp.ClientSession) func(name string, args map[string]any) Result {
	return func(name string, args map[string]any) Result {
		t.Helper()
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
		require.NoError(t, err)
		return Decode(t, res)
	}
}

// Connect serves server to a fresh in-memory client, closed when the test
// ends.
func Connect(t testing.TB, server *mcp.Server) *mcp.ClientSession {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := server.Connect(context.Background(), st, nil)
	require.NoError(t, err)
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() { cs.Close() })
	return cs
}

// Tools lists the tools cs offers, by name.
func Tools(t testing.TB, cs *mcp.ClientSession) map[string]*mcp.Tool {
	t.Helper()
	out := map[string]*mcp.Tool{}
	for tool, err := range cs.Tools(context.Background(), nil) {
		require.NoError(t, err)
		out[tool.Name] = tool
	}
	return out
}

// ToolNames are the names of the tools server offers.
func ToolNames(t testing.TB, server *mcp.Server) []string {
	t.Helper()
	var names []string
	for name := range Tools(t, Connect(t, server)) {
		names = append(names, name)
	}
	return names
}
