package harness

import (
	"encoding/json"
	"errors"
	"fmt"
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
	// Held are turn outcomes for a manager that was not connected, oldest
	// first, sent when it connects (kept in held.json, beside state.json).
	Held []HeldMessage `json:"held,omitempty"`
	// Usage is what the turns of this run consumed (TurnUsage of each).
	Usage UsageTotals `json:"usage"`
	// UsageBaseline is the conversation's last running totals, for a
	// harness that reports those (TurnResult.UsageCumulative).
	UsageBaseline *UsageBaseline `json:"usageBaseline,omitempty"`
	// Pause says why no turn starts for now, and what is kept meanwhile;
	// nil when none is paused.
	Pause *Pause `json:"pause,omitempty"`
}

// PauseBudget is the Pause.Reason of a worker that spent its budget; the
// others are the RateLimit kinds (RateLimited, Overloaded).
const PauseBudget = "budget"

// Pause is why a coding-agent worker starts no turn for now. The batch of
// messages (or the task) the next turn was for is kept, not dropped: it
// runs when the pause ends, with whatever arrived meanwhile.
type Pause struct {
	// Reason is RateLimited, Overloaded or PauseBudget.
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
	// Until is when the kept turn runs after a rate limit or overload: the
	// reset the harness reported, else a backoff (30 s, doubling, at most
	// 15 min). Zero for a budget: it runs once the budget is raised.
	Until time.Time `json:"until,omitzero"`
	// Turn is the turn that ended on the limit (0 for a budget).
	Turn int `json:"turn,omitempty"`
	// Task says the kept turn is the task's; Messages is how many
	// messages are kept for it.
	Task     bool `json:"task,omitempty"`
	Messages int  `json:"messages,omitempty"`
	// Error is what the harness said of the limit; for a budget, what was
	// spent of what.
	Error string `json:"error,omitempty"`
}

// HeldMessage is a turn's answer or failure report that could not reach
// the manager because it was not connected; the shim sends it when the
// manager's session joins, and retries every 30 s.
type HeldMessage struct {
	To     string    `json:"to"`
	Turn   int       `json:"turn"`
	Text   string    `json:"text"`
	HeldAt time.Time `json:"heldAt"`
}

// HeldNote ends a TurnRecord.Undelivered entry of an outcome that was held.
const HeldNote = "not connected; held and sent when it connects"

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
	// Usage is what the turn consumed (its share of running totals); nil
	// when its output reported none.
	Usage *Usage `json:"usage,omitempty"`
	// RateLimit is set when the turn ended on a rate limit or overload (not
	// a failure: the worker paused, see TurnState.Pause).
	RateLimit *RateLimit `json:"rateLimit,omitempty"`
}

// StatePath is the turn record (state.json) in the worker directory dir.
func StatePath(dir string) string { return filepath.Join(dir, "state.json") }

func heldPath(dir string) string { return filepath.Join(dir, "held.json") }

// WriteTurnState replaces the turn record in dir atomically; the held
// outcomes are held.json's (WriteHeld).
func WriteTurnState(dir string, st *TurnState) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return intercom.WriteFileAtomic(StatePath(dir), data)
}

// ReadTurnState reads the turn record in dir, with the outcomes held.json
// holds; nil, nil when it has none (an exec worker, or a shim that has not
// begun).
func ReadTurnState(dir string) (*TurnState, error) {
	data, err := os.ReadFile(StatePath(dir))
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
	st.Held, err = ReadHeld(dir)
	if err != nil {
		return nil, err
	}
	return &st, nil
}

// WriteHeld replaces held.json in dir with held, oldest first; no outcomes
// remove the file.
func WriteHeld(dir string, held []HeldMessage) error {
	if len(held) == 0 {
		if err := os.Remove(heldPath(dir)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	data, err := json.MarshalIndent(held, "", "  ")
	if err != nil {
		return err
	}
	return intercom.WriteFileAtomic(heldPath(dir), data)
}

// ReadHeld reads the outcomes held.json in dir holds, oldest first; none
// when there is no file.
func ReadHeld(dir string) ([]HeldMessage, error) {
	data, err := os.ReadFile(heldPath(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var held []HeldMessage
	if err := json.Unmarshal(data, &held); err != nil {
		return nil, fmt.Errorf("%s: %w", heldPath(dir), err)
	}
	return held, nil
}
