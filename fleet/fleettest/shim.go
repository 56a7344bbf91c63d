package fleettest

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet/shim"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// RunShim makes a test binary the worker shim systemd starts (a
// TestMain's branch, for a Fleet whose Shim is the test executable): it
// reads the shim's flags from os.Args (--id, --run, --kind,
// --ready-grace, then -- and the command), runs shim.Run with the
// agent directory of the environment, and exits with its status (70 when
// there is no agent directory). It does not return.
func RunShim() {
	args := os.Args[1:]
	var id, run, kind string
	var grace time.Duration
	for len(args) > 0 && args[0] != "--" {
		switch args[0] {
		case "--ready-grace":
			grace, _ = time.ParseDuration(args[1])
			args = args[2:]
		case "--id":
			id, args = args[1], args[2:]
		case "--run":
			run, args = args[1], args[2:]
		case "--kind":
			kind, args = args[1], args[2:]
		default:
			args = args[1:]
		}
	}
	p, err := intercom.DefaultPaths()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(70)
	}
	os.Exit(shim.Run(context.Background(), shim.Config{Paths: p, WorkerID: id, RunID: run, Kind: kind,
		Command: args[1:], Stdout: os.Stdout, Stderr: os.Stderr, ReadyGrace: grace}))
}
