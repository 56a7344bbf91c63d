package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// The workers.json view is the legacy orchestrator registry form the
// TypeScript adapters' intercom_team reads (spec §7 item 1), so Pi and
// Claude-adapter workers of agent-fleet resolve the same team as its own
// sessions:
//
//	{"version":1,"writer":"agent-fleet","workers":[{"id","runId","owned",
//	  "managerSessionId","intercomTarget","state","harness"[,"role"]}]}
//
// It lists the live workers (provisioning, running, stopping; the readers'
// live set also has idle and needs_attention, which fleet does not use).
// The readers look only at "workers", so the "writer" mark is invisible to
// them; it is how agent-fleet knows the file is its own. A file without
// the mark belongs to a TypeScript orchestrator and is never touched.
//
// Every Registry of an agent directory (<agentDir>/intercom/orchestrator/
// fleet.db) rewrites the view beside it after each committed write, off
// the writer's path (changehook.go); Close waits for the last rewrite.

// workersViewWriter is the mark of a view agent-fleet wrote.
const workersViewWriter = "agent-fleet"

// viewLockWait is how long a refresh waits for another process's refresh
// (the lock is held across the registry read and the file write).
const viewLockWait = 5 * time.Second

// WorkersViewPath is <agentDir>/intercom/orchestrator/workers.json.
func WorkersViewPath(p intercom.Paths) string {
	return filepath.Join(p.OrchestratorDir(), "workers.json")
}

// viewPathOf is the workers.json a registry at path keeps: beside it when
// path is an agent directory's <agentDir>/intercom/orchestrator/fleet.db,
// else "" (a registry elsewhere, in tests or kept aside, has no view).
func viewPathOf(path string) string {
	orch := filepath.Dir(path)
	if filepath.Base(path) != "fleet.db" || filepath.Base(orch) != "orchestrator" || filepath.Base(filepath.Dir(orch)) != "intercom" {
		return ""
	}
	return filepath.Join(orch, "workers.json")
}

// viewState says who owns the workers.json file.
type viewState string

const (
	viewAbsent     viewState = "absent"      // no file: agent-fleet may write one
	viewOurs       viewState = "agent-fleet" // written by agent-fleet
	viewForeign    viewState = "foreign"     // a TypeScript orchestrator's registry: never touched
	viewUnreadable viewState = "unreadable"  // cannot be read (left alone too)
)

// viewStatus is what inspectView found.
type viewStatus struct {
	State   viewState
	Path    string
	Workers int // entries in the file when it is readable
	Err     error
}

type viewWorker struct {
	ID               string `json:"id"`
	RunID            string `json:"runId"`
	Owned            bool   `json:"owned"`
	ManagerSessionID string `json:"managerSessionId"`
	IntercomTarget   string `json:"intercomTarget"`
	State            string `json:"state"`
	Harness          string `json:"harness"`
	Role             string `json:"role,omitempty"`
}

// WorkersViewCheck is doctor's word on workers.json: whose it is.
func WorkersViewCheck(p intercom.Paths) Check {
	st, _ := inspectView(WorkersViewPath(p))
	c := Check{Name: "workers.json"}
	switch st.State {
	case viewAbsent:
		c.Status, c.Detail = CheckOK, "no "+st.Path+" yet; agent-fleet writes it (for the TypeScript adapters' intercom_team) at the next fleet change"
	case viewOurs:
		c.Status, c.Detail = CheckOK, fmt.Sprintf("%s is agent-fleet's view of %d live workers, for the TypeScript adapters' intercom_team", st.Path, st.Workers)
	case viewForeign:
		c.Status = CheckWarn
		c.Detail = st.Path + " belongs to a TypeScript orchestrator: agent-fleet never touches it, so TypeScript-adapter sessions resolve their teams from it, not from agent-fleet's fleet"
		c.Fix = "if no TypeScript orchestrator runs here any more, move the file aside; agent-fleet then keeps its own view there"
	default:
		c.Status = CheckWarn
		c.Detail = fmt.Sprintf("%s cannot be read (%v); agent-fleet leaves it alone", st.Path, st.Err)
		c.Fix = "check the file; if no TypeScript orchestrator uses it, move it aside"
	}
	return c
}

// inspectView reads the file at path once: who owns it, and its bytes.
func inspectView(path string) (viewStatus, []byte) {
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return viewStatus{State: viewAbsent, Path: path}, nil
	case err != nil:
		return viewStatus{State: viewUnreadable, Path: path, Err: err}, nil
	}
	if bytes.HasPrefix(data, []byte(viewHead)) {
		return viewStatus{State: viewOurs, Path: path, Workers: bytes.Count(data, []byte(viewEntry))}, data
	}
	var top struct {
		Writer  json.RawMessage   `json:"writer"`
		Workers []json.RawMessage `json:"workers"`
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return viewStatus{State: viewUnreadable, Path: path, Err: err}, data
	}
	st := viewStatus{State: viewForeign, Path: path, Workers: len(top.Workers)}
	var writer string
	if json.Unmarshal(top.Writer, &writer) == nil && writer == workersViewWriter {
		st.State = viewOurs
	}
	return st, data
}

// refreshView rewrites the workers.json at path from the live workers that
// list returns, atomically, unless the file belongs to someone else (then
// it returns viewForeign or viewUnreadable and writes nothing). Refreshes
// of all processes are serialized by a lock held across list and write, so
// the file always ends with the newest registry state. An unchanged view is
// not rewritten.
func refreshView(ctx context.Context, path string, list func(context.Context) ([]Summary, error)) (viewState, error) {
	if err := intercom.EnsureDir(filepath.Dir(path)); err != nil {
		return "", err
	}
	unlock, err := intercom.LockFile(ctx, path+".agent-fleet.lock", viewLockWait)
	if err != nil {
		return "", err
	}
	defer unlock()
	st, old := inspectView(path)
	if st.State == viewForeign || st.State == viewUnreadable {
		return st.State, nil
	}
	workers, err := list(ctx)
	if err != nil {
		return st.State, fmt.Errorf("refresh %s: %w", path, err)
	}
	data := encodeView(workers)
	if st.State == viewOurs && bytes.Equal(old, data) {
		return viewOurs, nil
	}
	// A view, rewritten whole from the registry at every change: atomic
	// for readers, but not worth an fsync on every spawn's path.
	if err := intercom.ReplaceFile(path, data); err != nil {
		return st.State, err
	}
	return viewOurs, nil
}

// viewHead begins every view encodeView writes; each worker then has a
// line of its own beginning with viewEntry (JSON strings hold no raw
// newline), so that a view of ours is known and counted without a parse.
const (
	viewHead  = "{\n  \"version\": 1,\n  \"writer\": \"" + workersViewWriter + "\",\n  \"workers\": ["
	viewEntry = "\n    {"
)

func encodeView(workers []Summary) []byte {
	data := []byte(viewHead)
	n := 0
	for _, w := range workers {
		if !w.State.Live() {
			continue
		}
		entry, _ := json.Marshal(viewWorker{ID: w.ID, RunID: w.RunID, Owned: true, ManagerSessionID: w.Manager,
			IntercomTarget: w.ID, State: string(w.State), Harness: w.Kind, Role: w.Role})
		if n > 0 {
			data = append(data, ',')
		}
		data = append(append(data, "\n    "...), entry...) // viewEntry, as entry begins with '{'

		n++
	}
	if n > 0 {
		data = append(data, "\n  "...)
	}
	return append(data, "]\n}\n"...)
}

// refreshOwnView is a Registry's change hook: its view rewritten from its
// live workers. A failure is reported on standard error (the CLI's, or
// the worker unit's log) and not returned: the write it follows stands.
func (r *Registry) refreshOwnView(ctx context.Context) {
	if _, err := refreshView(ctx, r.view, r.LiveSummaries); err != nil {
		fmt.Fprintln(os.Stderr, "agent-fleet: could not refresh the workers.json view:", err)
	}
}
