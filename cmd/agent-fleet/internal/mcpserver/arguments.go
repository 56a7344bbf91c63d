package mcpserver

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxArgumentProblem bounds how much of the SDK's account of a refused
// argument goes back to the model: the validator quotes the whole value,
// and an argument a character over its maxLength would come back whole.
const maxArgumentProblem = 300

// schemaProblem picks the argument and the broken rule out of the SDK's
// input-validation error ("validating \"arguments\": validating root:
// validating /properties/timeout_ms: minimum: …").
var schemaProblem = regexp.MustCompile(`validating /properties/([^:]+): (.*)$`)

// longQuote is a value the validator quotes that is too long to repeat;
// wholeNumber a number it prints as a fraction or with zero decimals.
var (
	longQuote   = regexp.MustCompile(`"(?:[^"\\]|\\.){40,}"`)
	wholeNumber = regexp.MustCompile(`(-?\d+)(?:/1|\.0+)\b`)
)

// argumentErrors rewrites the result the SDK gives a tools/call whose
// arguments its input schema refuses (an isError result whose text is the
// validator's, or the JSON decoder's) into one the model can act on: which
// argument, what rule, bounded, and what to do; structuredContent as for
// every other failure (docs/architecture.md "MCP tool results").
func argumentErrors(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		call, ok := req.(*mcp.CallToolRequest)
		r, isCall := res.(*mcp.CallToolResult)
		if err != nil || !ok || !isCall || !r.IsError || len(r.Content) != 1 || r.StructuredContent != nil {
			return res, err
		}
		tc, ok := r.Content[0].(*mcp.TextContent)
		if !ok {
			return res, err
		}
		problem, found := strings.CutPrefix(tc.Text, `validating "arguments": `)
		if !found && !strings.HasPrefix(tc.Text, "json: cannot unmarshal") {
			return res, err
		}
		if m := schemaProblem.FindStringSubmatch(problem); m != nil {
			problem = m[1] + ": " + m[2]
		} else if !found || strings.Contains(problem, "cannot unmarshal") {
			problem = "the arguments must be a JSON object of the tool's parameters"
		}
		problem = longQuote.ReplaceAllStringFunc(problem, func(q string) string {
			return fmt.Sprintf("%s…\" (%d bytes)", strings.ToValidUTF8(q[:24], ""), len(q)-2)
		})
		problem = wholeNumber.ReplaceAllString(problem, "$1")
		if len(problem) > maxArgumentProblem {
			problem = fmt.Sprintf("%s… (%d bytes more)", strings.ToValidUTF8(problem[:maxArgumentProblem], ""), len(problem)-maxArgumentProblem)
		}
		text := fmt.Sprintf("Invalid arguments for %s: %s. Nothing was done; call it again with arguments that match its input schema.", call.Params.Name, problem)
		return result(text, map[string]any{"ok": false, "error": text}, true), nil
	}
}
