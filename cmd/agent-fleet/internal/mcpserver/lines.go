package mcpserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
)

// jsonLines passes the MCP client's newline-delimited JSON-RPC through,
// dropping any line that is not JSON (logged): the SDK's stdio transport
// ends the server on one, and with it the session an agent relies on.
type jsonLines struct {
	r    *bufio.Reader
	log  *slog.Logger
	line []byte // what is left of the current line
	err  error
}

func newJSONLines(r io.Reader, log *slog.Logger) *jsonLines {
	return &jsonLines{r: bufio.NewReaderSize(r, 64<<10), log: log}
}

func (j *jsonLines) Read(p []byte) (int, error) {
	for len(j.line) == 0 {
		if j.err != nil {
			return 0, j.err
		}
		line, err := j.r.ReadBytes('\n')
		j.err = err
		body := bytes.TrimSpace(line)
		switch {
		case len(body) == 0:
		case !json.Valid(body):
			j.log.Warn("ignored an input line that is not JSON", "bytes", len(line))
		default:
			if line[len(line)-1] != '\n' {
				line = append(line, '\n')
			}
			j.line = line
		}
	}
	n := copy(p, j.line)
	j.line = j.line[n:]
	return n, nil
}

func (j *jsonLines) Close() error { return nil }
