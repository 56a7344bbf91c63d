package teams

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

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

// WorkersViewWriter is the mark of a view agent-fleet wrote.
const WorkersViewWriter = "agent-fleet"

// WorkersViewPath is <agentDir>/intercom/orchestrator/workers.json.
func WorkersViewPath(p intercom.Paths) string {
	return filepath.Join(p.OrchestratorDir(), "workers.json")
}

// ViewState says who owns the workers.json file.
type ViewState string

const (
	ViewAbsent     ViewState = "absent"      // no file: agent-fleet may write one
	ViewOurs       ViewState = "agent-fleet" // written by agent-fleet
	ViewForeign    ViewState = "foreign"     // a TypeScript orchestrator's registry: never touched
	ViewUnreadable ViewState = "unreadable"  // cannot be read (left alone too)
)

// ViewStatus is what InspectWorkersView found.
type ViewStatus struct {
	State   ViewState
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

// InspectWorkersView reports who owns workers.json, for doctor.
func InspectWorkersView(p intercom.Paths) ViewStatus {
	st, _ := inspectView(WorkersViewPath(p))
	return st
}

// inspectView reads the file at path once: who owns it, and its bytes.
func inspectView(path string) (ViewStatus, []byte) {
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return ViewStatus{State: ViewAbsent, Path: path}, nil
	case err != nil:
		return ViewStatus{State: ViewUnreadable, Path: path, Err: err}, nil
	}
	if bytes.HasPrefix(data, []byte(viewHead)) {
		return ViewStatus{State: ViewOurs, Path: path, Workers: bytes.Count(data, []byte(viewEntry))}, data
	}
	var top struct {
		Writer  json.RawMessage   `json:"writer"`
		Workers []json.RawMessage `json:"workers"`
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return ViewStatus{State: ViewUnreadable, Path: path, Err: err}, data
	}
	st := ViewStatus{State: ViewForeign, Path: path, Workers: len(top.Workers)}
	var writer string
	if json.Unmarshal(top.Writer, &writer) == nil && writer == WorkersViewWriter {
		st.State = ViewOurs
	}
	return st, data
}

// RefreshWorkersView rewrites workers.json from the live workers that list
// returns, atomically, unless the file belongs to someone else (then it
// returns ViewForeign or ViewUnreadable and writes nothing). Refreshes of
// all processes are serialized by a lock held across list and write, so the
// file always ends with the newest registry state. An unchanged view is
// not rewritten. Call it after every registry change.
func RefreshWorkersView(ctx context.Context, p intercom.Paths, list func(context.Context) ([]WorkerRecord, error)) (ViewState, error) {
	path := WorkersViewPath(p)
	if err := intercom.EnsureDir(filepath.Dir(path)); err != nil {
		return "", err
	}
	unlock, err := intercom.LockFile(ctx, path+".agent-fleet.lock", lockDeadline)
	if err != nil {
		return "", err
	}
	defer unlock()
	st, old := inspectView(path)
	if st.State == ViewForeign || st.State == ViewUnreadable {
		return st.State, nil
	}
	workers, err := list(ctx)
	if err != nil {
		return st.State, fmt.Errorf("refresh %s: %w", path, err)
	}
	data := encodeView(workers)
	if st.State == ViewOurs && bytes.Equal(old, data) {
		return ViewOurs, nil
	}
	// A view, rewritten whole from the registry at every change: atomic
	// for readers, but not worth an fsync on every spawn's path.
	if err := intercom.ReplaceFile(path, data); err != nil {
		return st.State, err
	}
	return ViewOurs, nil
}

// viewHead begins every view encodeView writes; each worker then has a
// line of its own beginning with viewEntry (JSON strings hold no raw
// newline), so that a view of ours is known and counted without a parse.
const (
	viewHead  = "{\n  \"version\": 1,\n  \"writer\": \"" + WorkersViewWriter + "\",\n  \"workers\": ["
	viewEntry = "\n    {"
)

func encodeView(workers []WorkerRecord) []byte {
	data := []byte(viewHead)
	n := 0
	for _, w := range workers {
		if !w.Live {
			continue
		}
		entry, _ := json.Marshal(viewWorker{ID: w.ID, RunID: w.RunID, Owned: true, ManagerSessionID: w.Manager,
			IntercomTarget: w.ID, State: w.State, Harness: w.Harness, Role: w.Role})
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
