package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
)

// The test binary doubles as agent-fleet: with AGENT_FLEET_RUN_MAIN=1 it
// runs main, so process-level tests exercise the real command (and the race
// detector sees it) without a separate build; with AGENT_FLEET_FAKE_HARNESS
// it is a coding-agent CLI stand-in (harness_standin_test.go).
func TestMain(m *testing.M) {
	// Brokers, shims and turns that in-test sessions start run this test
	// binary as agent-fleet.
	childEnv = []string{"AGENT_FLEET_RUN_MAIN=1"}
	if kind := os.Getenv("AGENT_FLEET_FAKE_HARNESS"); kind != "" {
		os.Exit(runStandIn(kind, os.Args[1:]))
	}
	if os.Getenv("AGENT_FLEET_RUN_MAIN") == "1" {
		main()
		return
	}
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		// These are process-level tests that mostly wait (on brokers,
		// workers, harness CLIs): run more of them at once than there are
		// CPUs, go test's default.
		_ = flag.Set("test.parallel", strconv.Itoa(acceptanceParallel))
	}
	os.Exit(m.Run())
}

// acceptanceParallel is how many tests of this package run at once unless
// -parallel says otherwise.
const acceptanceParallel = 6

// testFactory is the factory of an in-process command writing to io.
func testFactory(io *factory.IOStreams) *factory.Factory {
	f := factory.New(io, factory.BuildVersion(version))
	f.ChildEnv = childEnv
	return f
}

// testStreams are empty stdin and buffers for stdout and stderr.
func testStreams() (*factory.IOStreams, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	return &factory.IOStreams{In: strings.NewReader(""), Out: &out, Err: &errb}, &out, &errb
}

// requireExit says that err is a process exit with status code.
func requireExit(t *testing.T, err error, code int) {
	t.Helper()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "want exit %d, got %v", code, err)
	require.Equal(t, code, ee.ExitCode())
}
