package units

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Values of ExecMainCode (the si_code of the main process's exit).
const (
	CodeExited = 1 // CLD_EXITED: ExecMainStatus is the exit status
	CodeKilled = 2 // CLD_KILLED: ExecMainStatus is the signal number
	CodeDumped = 3 // CLD_DUMPED: killed by a signal, core dumped
)

// UnitState is a unit's state as systemd reports it at one moment, read from
// its properties (level-triggered: read it again rather than tracking
// signals).
type UnitState struct {
	Name string
	// LoadState: "loaded", "not-found" (unknown or already collected),
	// "error", "masked", …
	LoadState string
	// ActiveState: "active", "activating", "deactivating", "inactive",
	// "failed", "reloading".
	ActiveState string
	// SubState is the type-specific state ("running", "exited", "dead", …).
	SubState string
	// Result is the service result: "success", "exit-code", "signal",
	// "timeout", "core-dump", "watchdog", "start-limit-hit", "resources",
	// "oom-kill" (systemd ≥ 243 on cgroup2, where memory.events counts
	// OOM kills), …
	Result string
	// MainPID is the main process, 0 when none runs.
	MainPID int
	// ControlGroup is the unit's cgroup path relative to the cgroup root;
	// systemd reports "" once the unit is inactive, so capture it while
	// active.
	ControlGroup string
	// ExecMainCode is CodeExited, CodeKilled or CodeDumped once the main
	// process ended, 0 before.
	ExecMainCode int
	// ExecMainStatus is the exit status (CodeExited) or signal number.
	ExecMainStatus int
	// InvocationID identifies this run of the unit (32 hex digits), "" when
	// the unit never ran.
	InvocationID string
	// Description is the unit's description.
	Description string
	// UnitFileState is an installed unit's enablement ("enabled",
	// "disabled", "static", …); "" for transient units.
	UnitFileState string
	// FreezerState is systemd's view of the unit's freezer: "running",
	// "freezing", "frozen", "thawing" ("" from managers older than 246).
	// It stays "running" where systemd cannot freeze units and the cgroup
	// was frozen directly (Cgroups.SetFrozen): read Usage.Frozen then.
	FreezerState string
}

// Gone reports whether systemd has no unit of this name loaded (never
// created, or already collected).
func (s UnitState) Gone() bool { return s.LoadState == "not-found" || s.LoadState == "" }

// Running reports whether the unit is active or activating.
func (s UnitState) Running() bool {
	return s.ActiveState == "active" || s.ActiveState == "activating" || s.ActiveState == "reloading"
}

// ExitDescription renders ExecMainCode/ExecMainStatus like systemctl:
// "exited 3", "killed TERM", or "" while the main process has not ended.
func (s UnitState) ExitDescription() string {
	switch s.ExecMainCode {
	case CodeExited:
		return fmt.Sprintf("exited %d", s.ExecMainStatus)
	case CodeKilled:
		return "killed signal " + strconv.Itoa(s.ExecMainStatus)
	case CodeDumped:
		return "dumped signal " + strconv.Itoa(s.ExecMainStatus)
	}
	return ""
}

// UnitSummary is one row of ListUnits.
type UnitSummary struct {
	Name        string
	Description string
	LoadState   string
	ActiveState string
	SubState    string
}

// Version is the user manager's version.
type Version struct {
	// Raw is systemd's Version property, e.g. "252.38-1~deb12u1".
	Raw string
	// Major is the leading number (252), 0 if it could not be parsed.
	Major int
}

// ParseVersion parses systemd's Version property ("252.38-1~deb12u1",
// "v256.7", "systemd 245 (245.4-4ubuntu3)").
func ParseVersion(raw string) Version {
	s := strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(raw), "systemd "), "v")
	end := 0
	for end < len(s) && s[end] >= '0' && s[end] <= '9' {
		end++
	}
	major, _ := strconv.Atoi(s[:end])
	return Version{Raw: raw, Major: major}
}

// ExitRecord is what a unit with ServiceSpec.ExitRecord wrote when it ended.
type ExitRecord struct {
	// Result is $SERVICE_RESULT: "success", "exit-code", "signal", …
	Result string
	// Code is $EXIT_CODE: "exited", "killed", "dumped" ("" if the main
	// process never ran).
	Code string
	// Status is $EXIT_STATUS: the exit status for "exited", the signal name
	// (e.g. "TERM") otherwise.
	Status string
	// InvocationID is the unit run that wrote the record.
	InvocationID string
}

// ExitStatus returns the numeric exit status when the main process exited
// (Code "exited"), and false otherwise.
func (r ExitRecord) ExitStatus() (int, bool) {
	if r.Code != "exited" {
		return 0, false
	}
	n, err := strconv.Atoi(r.Status)
	return n, err == nil
}

// ReadExitRecord reads the record a unit wrote to path. It returns an error
// wrapping os.ErrNotExist while the unit has not ended, including while
// the record is being written (a file without its last line).
func ReadExitRecord(path string) (ExitRecord, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return ExitRecord{}, fmt.Errorf("read exit record: %w", err)
	}
	return parseExitRecord(string(data))
}

func parseExitRecord(data string) (ExitRecord, error) {
	var r ExitRecord
	// INVOCATION_ID is the last line the script writes: a file that does
	// not end with it is still being written (or was cut short by a crash).
	if last := strings.LastIndex(strings.TrimSuffix(data, "\n"), "\n"); !strings.HasSuffix(data, "\n") ||
		!strings.HasPrefix(data[last+1:], "INVOCATION_ID=") {
		return r, fmt.Errorf("exit record %q is incomplete: %w", data, os.ErrNotExist)
	}
	for line := range strings.SplitSeq(data, "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		switch k {
		case "SERVICE_RESULT":
			r.Result = v
		case "EXIT_CODE":
			r.Code = v
		case "EXIT_STATUS":
			r.Status = v
		case "INVOCATION_ID":
			r.InvocationID = v
		}
	}
	if r.Result == "" {
		return r, fmt.Errorf("exit record: no SERVICE_RESULT in %q", data)
	}
	return r, nil
}

// exitRecordScript writes the record with the shell's builtins alone: one
// process (the ExecStopPost that systemd spawns in the unit's cgroup, on
// every stop's path), no mv. printf writes the whole record at once and
// ReadExitRecord refuses a file without its last line, so a reader never
// takes a record in the making for a finished one. $1 is the record path,
// in a 0700 directory, written once per run; systemd sets the variables
// for ExecStopPost.
const exitRecordScript = `umask 077; ` +
	`printf 'SERVICE_RESULT=%s\nEXIT_CODE=%s\nEXIT_STATUS=%s\nINVOCATION_ID=%s\n' ` +
	`"$SERVICE_RESULT" "$EXIT_CODE" "$EXIT_STATUS" "$INVOCATION_ID" > "$1"`

// exitRecordArgv is the ExecStopPost command that writes an exit record.
func exitRecordArgv(path string) []string {
	return []string{"/bin/sh", "-c", exitRecordScript, "agent-fleet-exit-record", path}
}
