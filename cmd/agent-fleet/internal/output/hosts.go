package output

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/remote"
)

// HostReport is a verb's report from another host: the same report, with
// "host" first in its JSON object (in each object of an array) and the
// host named in its text.
type HostReport struct {
	Host string
	R    Report
}

// JSON implements Report.
func (r HostReport) JSON() any { return withHost{r.Host, r.R.JSON()} }

// Structured implements Report.
func (r HostReport) Structured() any { return withHost{r.Host, r.R.Structured()} }

// Text implements Report. A log's lines are printed as they are, as
// tail prints them: the host is not put before the first.
func (r HostReport) Text(s Surface) string {
	t := r.R.Text(s)
	if _, logs := r.R.(LogsReport); t == "" || logs {
		return t
	}
	return "On host " + r.Host + ": " + t
}

// Local is the report r carries from another host (HostReport), else r.
func Local(r Report) Report {
	if h, ok := r.(HostReport); ok {
		return h.R
	}
	return r
}

// withHost marshals v with "host" added to its object, or to each object
// of its array.
type withHost struct {
	host string
	v    any
}

func (w withHost) MarshalJSON() ([]byte, error) {
	data, err := json.Marshal(w.v)
	if err != nil {
		return nil, err
	}
	field, _ := json.Marshal(w.host)
	field = append([]byte(`"host":`), field...)
	addTo := func(obj []byte) []byte {
		if len(bytes.TrimSpace(obj[1:])) == 1 { // {}
			return append(append([]byte{'{'}, field...), '}')
		}
		return append(append(append([]byte{'{'}, field...), ','), obj[1:]...)
	}
	switch {
	case len(data) > 0 && data[0] == '{':
		return addTo(data), nil
	case len(data) > 0 && data[0] == '[':
		var items []json.RawMessage
		if err := json.Unmarshal(data, &items); err != nil {
			return nil, err
		}
		for i, it := range items {
			if len(it) > 0 && it[0] == '{' {
				items[i] = addTo(it)
			}
		}
		return json.Marshal(items)
	}
	return data, nil
}

// HostsList is the other hosts' part of list --all on a host joined to
// others (WorkersReport.Hosts).
type HostsList struct {
	// Self is this host's node name.
	Self    string
	Listing *remote.Listing
	// Err is why the other hosts could not be asked at all.
	Err error
}

// viewHostWorker is a worker of another host as JSON.
func viewHostWorker(hw remote.HostWorker) Worker {
	v := ViewWorker(hw.Worker)
	v.Host = hw.Host
	if hw.Unreachable {
		v.LastKnownState, v.State, v.PublishedAt = v.State, remote.StateUnreachable, Stamp(hw.PublishedAt)
	}
	return v
}

// hostNotes say which hosts did not answer and what is known of their
// workers.
func (h *HostsList) notes() []string {
	if h.Err != nil {
		return []string{"Other hosts could not be asked: " + h.Err.Error()}
	}
	var out []string
	for _, p := range h.Listing.Problems {
		// A host that answered with an error (its user manager is down,
		// say) is reachable: say what it said, not that it is silent.
		what := fmt.Sprintf("Host %s does not answer (%v)", p.Host, p.Err)
		if !errors.Is(p.Err, remote.ErrHostUnreachable) {
			what = fmt.Sprintf("Host %s could not list its workers (%v)", p.Host, p.Err)
		}
		switch {
		case h.Listing.RecordsErr != nil:
			out = append(out, fmt.Sprintf("%s; its workers are unknown: %v.", what, h.Listing.RecordsErr))
		default:
			out = append(out, what+"; its workers are shown as unreachable with their last known state.")
		}
	}
	return out
}

// hostsTable is list --all's table of several hosts: this host's workers
// ws first, then every other host's.
func hostsTable(ws []*fleet.Worker, unknown bool, h *HostsList) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tID\tRUN\tSTATE\tROLE\tMANAGER\tAGE\tCOMMAND")
	now := time.Now()
	row := func(host string, w *fleet.Worker, state string) {
		role := Inline(w.Role)
		if role == "" {
			role = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", Inline(host), Inline(w.ID), Inline(w.RunID), state, role,
			Inline(w.Manager), Span(now.Sub(w.CreatedAt)), WorkerCommand(w))
	}
	n := 0
	for _, w := range ws {
		state := StateText(w)
		if unknown && w.State.Live() {
			state += " (last known)"
		}
		row(h.Self, w, state)
		n++
	}
	if h.Listing != nil {
		for _, hw := range h.Listing.Workers {
			state := StateText(hw.Worker)
			if hw.Unreachable {
				state = remote.StateUnreachable + " (last known " + state + ")"
			}
			row(hw.Host, hw.Worker, state)
			n++
		}
	}
	tw.Flush()
	text := strings.TrimRight(b.String(), "\n")
	if n == 0 {
		text = "No workers on any host."
	}
	if notes := h.notes(); len(notes) > 0 {
		text += "\n" + strings.Join(notes, "\n")
	}
	return text
}

// hostsLines is list --all for a model, over several hosts.
func hostsLines(ws []*fleet.Worker, h *HostsList) string {
	var lines []string
	for _, w := range ws {
		lines = append(lines, fmt.Sprintf("- %s on %s [%s] manager %s: %s", Inline(w.ID), Inline(h.Self), StateText(w), Inline(w.Manager), WorkerCommand(w)))
	}
	if h.Listing != nil {
		for _, hw := range h.Listing.Workers {
			state := StateText(hw.Worker)
			if hw.Unreachable {
				state = remote.StateUnreachable + ", last known " + state
			}
			lines = append(lines, fmt.Sprintf("- %s on %s [%s] manager %s: %s", Inline(hw.Worker.ID), Inline(hw.Host), state, Inline(hw.Worker.Manager), WorkerCommand(hw.Worker)))
		}
	}
	if len(lines) == 0 {
		lines = append(lines, "No workers on any host.")
	}
	return strings.Join(append(lines, h.notes()...), "\n")
}

// viewHostsWorkers is list --all's JSON over several hosts.
func viewHostsWorkers(ws []*fleet.Worker, unknown bool, h *HostsList) []Worker {
	out := viewWorkersUnknown(ws, unknown)
	for i := range out {
		out[i].Host = h.Self
	}
	if h.Listing != nil {
		for _, hw := range h.Listing.Workers {
			out = append(out, viewHostWorker(hw))
		}
	}
	return out
}
