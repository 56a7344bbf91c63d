package output

import (
	"fmt"
	"strings"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet"
)

// WaitReport is what a wait saw: the awaited workers as they stood when it
// returned, and whether its timeout passed first.
type WaitReport struct {
	WS       []*fleet.Worker
	Timeout  time.Duration
	TimedOut bool
}

// WaitOutcome is wait's --json and agent_fleet's structuredContent:
// timedOut, and each awaited worker's record with how it ended ("end":
// exited, killed, stopped, lease-expired, max-runtime, failed or lost;
// omitted while it runs).
type WaitOutcome struct {
	TimedOut bool           `json:"timedOut"`
	Workers  []WaitedWorker `json:"workers"`
}

// WaitedWorker is a worker record with how it ended.
type WaitedWorker struct {
	Worker
	End string `json:"end,omitempty"`
}

// JSON implements Report.
func (r WaitReport) JSON() any {
	out := WaitOutcome{TimedOut: r.TimedOut, Workers: make([]WaitedWorker, len(r.WS))}
	for i, w := range r.WS {
		out.Workers[i] = WaitedWorker{Worker: ViewWorker(w), End: fleet.EndOf(w)}
	}
	return out
}

// Structured implements Report.
func (r WaitReport) Structured() any { return r.JSON() }

// Text implements Report: a line per worker, how it ended or that it
// still runs.
func (r WaitReport) Text(s Surface) string {
	lines := make([]string, 0, len(r.WS)+1)
	for _, w := range r.WS {
		if w.State.Live() {
			lines = append(lines, fmt.Sprintf("%s: still %s", Inline(w.ID), w.State))
			continue
		}
		lines = append(lines, fmt.Sprintf("%s: %s", Inline(w.ID), fleet.EndedOf(w, nil).Summary()))
	}
	if r.TimedOut {
		if s == Tool {
			lines = append(lines, fmt.Sprintf("Stopped waiting after %s; call wait again to wait longer.", r.Timeout))
		} else {
			lines = append(lines, fmt.Sprintf("Stopped waiting after %s.", r.Timeout))
		}
	}
	return strings.Join(lines, "\n")
}
