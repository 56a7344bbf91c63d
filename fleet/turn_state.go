package fleet

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// TurnState is a coding-agent worker's record of its turns, kept by its
// shim in the worker directory (state.json) and shown by status.
type TurnState struct {
	Kind string `json:"kind"`
	// Session is the harness conversation the next turn resumes ("" = a
	// new one).
	Session string `json:"session,omitempty"`
	// Turns counts the turns started, Failures those that failed;
	// Consecutive the failures since the last turn that worked.
	Turns       int `json:"turns"`
	Failures    int `json:"failures"`
	Consecutive int `json:"consecutiveFailures,omitempty"`
	// NextTurnAt: after failures in a row, no turn starts before it.
	NextTurnAt time.Time `json:"nextTurnAt,omitzero"`
	// Current is the turn running now, Last the last one that ended.
	Current *TurnRecord `json:"current,omitempty"`
	Last    *TurnRecord `json:"last,omitempty"`
	// ContextLost: the next turn starts a new conversation although the
	// worker had turns before (it is told its task again).
	ContextLost bool `json:"contextLost,omitempty"`
}

// TurnRecord is one turn.
type TurnRecord struct {
	N int `json:"n"`
	// Reason is "task" or "messages".
	Reason    string    `json:"reason"`
	Messages  int       `json:"messages,omitempty"`
	Session   string    `json:"session,omitempty"`
	StartedAt time.Time `json:"startedAt"`
	EndedAt   time.Time `json:"endedAt,omitzero"`
	OK        bool      `json:"ok"`
	// ExitStatus of the harness process (-1 killed by a signal).
	ExitStatus int `json:"exitStatus"`
	// Error says why a failed turn failed; ErrorLines are the harness's
	// last lines of error output.
	Error      string   `json:"error,omitempty"`
	ErrorLines []string `json:"errorLines,omitempty"`
	// Final is the start of the final answer (at most 2000 bytes).
	Final string `json:"final,omitempty"`
	// Delivered says where the final answer or the failure report went.
	Delivered []string `json:"delivered,omitempty"`
	// Undelivered says what could not be sent, and why.
	Undelivered []string `json:"undelivered,omitempty"`
}

func statePath(dir string) string { return filepath.Join(dir, "state.json") }

func writeTurnState(dir string, st *TurnState) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return intercom.WriteFileAtomic(statePath(dir), data)
}

// ReadTurnState reads the turn record of the incarnation id/run; nil, nil
// when it has none (an exec worker, or a shim that has not begun).
func ReadTurnState(p intercom.Paths, id, run string) (*TurnState, error) {
	data, err := os.ReadFile(statePath(WorkerDir(p, id, run)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st TurnState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, err
	}
	return &st, nil
}
