package main

import (
	"os"
	"testing"
)

// The test binary doubles as agent-fleet: with AGENT_FLEET_RUN_MAIN=1 it
// runs main, so process-level tests exercise the real command (and the race
// detector sees it) without a separate build.
func TestMain(m *testing.M) {
	if os.Getenv("AGENT_FLEET_RUN_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}
