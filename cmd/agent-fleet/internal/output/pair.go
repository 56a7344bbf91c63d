package output

import (
	"fmt"
	"strings"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// PairReport is a pair test's outcome (doctor --pair).
type PairReport struct{ R *intercom.PairResult }

// Failed reports whether a leg failed (doctor then exits 1).
func (r PairReport) Failed() bool { return !r.R.OK }

// JSON implements Report.
func (r PairReport) JSON() any { return r.R }

// Structured implements Report.
func (r PairReport) Structured() any { return r.R }

// Text implements Report: a verdict line, then one line per leg with its
// time.
func (r PairReport) Text(Surface) string {
	verdict := "passed"
	if !r.R.OK {
		verdict = "FAILED"
	}
	lines := []string{fmt.Sprintf("Pair test %s → %s: %s", Inline(r.R.A), Inline(r.R.B), verdict)}
	for _, l := range r.R.Legs {
		status := "OK"
		if !l.OK {
			status = "FAIL"
		}
		lines = append(lines, fmt.Sprintf("%-4s  %-6s %6d ms  %s", status, l.Name, l.Ms, Inline(l.Detail)))
	}
	return strings.Join(lines, "\n")
}
