package mcpserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// jsonLines passes the MCP client's newline-delimited JSON-RPC through to
// the SDK's stdio transport, which ends the server — and with it the
// session an agent relies on — on the first line it cannot decode. Such a
// line is answered here instead, as JSON-RPC 2.0 §5.1 asks: -32700 for one
// that is not JSON, -32600 for JSON that is not a message (with the
// request's id when it has a usable one, else null), and for a batch once
// the negotiated protocol (2025-06-18 on) has none.
type jsonLines struct {
	r    *bufio.Reader
	out  *lockedWriter
	log  *slog.Logger
	line []byte // what is left of the current line
	err  error
	// protocol is the version the client's initialize asked for.
	protocol string
}

func newJSONLines(r io.Reader, out *lockedWriter, log *slog.Logger) *jsonLines {
	return &jsonLines{r: bufio.NewReaderSize(r, 64<<10), out: out, log: log}
}

func (j *jsonLines) Read(p []byte) (int, error) {
	for len(j.line) == 0 {
		if j.err != nil {
			return 0, j.err
		}
		line, err := j.r.ReadBytes('\n')
		j.err = err
		body := bytes.TrimSpace(line)
		if len(body) == 0 {
			continue
		}
		if code, msg, id := j.refuse(body); code != 0 {
			j.log.Warn("answered an input line that is not a JSON-RPC message", "bytes", len(line), "code", code, "why", msg)
			j.answer(id, code, msg)
			continue
		}
		if line[len(line)-1] != '\n' {
			line = append(line, '\n')
		}
		j.line = line
	}
	n := copy(p, j.line)
	j.line = j.line[n:]
	return n, nil
}

// refuse is the JSON-RPC error code (0: none), message and id to answer
// body with instead of passing it on.
func (j *jsonLines) refuse(body []byte) (code int, msg string, id json.RawMessage) {
	if !json.Valid(body) {
		return jsonrpc.CodeParseError, "Parse error: the line is not JSON", nil
	}
	if body[0] == '[' {
		var batch []json.RawMessage
		if err := json.Unmarshal(body, &batch); err != nil || len(batch) == 0 {
			return jsonrpc.CodeInvalidRequest, "Invalid Request: an empty batch", nil
		}
		if j.protocol >= "2025-06-18" {
			return jsonrpc.CodeInvalidRequest, fmt.Sprintf("Invalid Request: protocol %s has no batches", j.protocol), nil
		}
		seen := map[string]bool{}
		for _, m := range batch {
			if code, msg, _ := j.refuse(m); code != 0 {
				return code, msg, nil
			}
			if id := requestID(m); id != nil {
				if seen[string(id)] {
					return jsonrpc.CodeInvalidRequest, "Invalid Request: a batch repeats the id " + string(id), nil
				}
				seen[string(id)] = true
			}
		}
		return 0, "", nil
	}
	if body[0] != '{' {
		return jsonrpc.CodeInvalidRequest, "Invalid Request: not a JSON-RPC object", nil
	}
	m, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		return jsonrpc.CodeInvalidRequest, "Invalid Request: " + err.Error(), requestID(body)
	}
	if req, ok := m.(*jsonrpc.Request); ok && req.Method == "initialize" {
		var params struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		if json.Unmarshal(req.Params, &params) == nil {
			j.protocol = params.ProtocolVersion
		}
	}
	return 0, "", nil
}

// requestID is the id of a request object, when it is a string or a
// number; nil otherwise (answered with a null id).
func requestID(body []byte) json.RawMessage {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method json.RawMessage `json:"method"`
	}
	if json.Unmarshal(body, &m) != nil || len(m.ID) == 0 || m.Method == nil {
		return nil
	}
	switch m.ID[0] {
	case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return m.ID
	}
	return nil
}

func (j *jsonLines) answer(id json.RawMessage, code int, msg string) {
	if id == nil {
		id = json.RawMessage("null")
	}
	b, err := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   jsonrpc.Error   `json:"error"`
	}{"2.0", id, jsonrpc.Error{Code: int64(code), Message: msg}})
	if err != nil {
		return
	}
	if _, err := j.out.Write(append(b, '\n')); err != nil {
		j.log.Warn("could not answer the line", "err", err)
	}
}

func (j *jsonLines) Close() error { return nil }

// lockedWriter writes one message at a time: the transport's and
// jsonLines' answers share the client's stdout.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
