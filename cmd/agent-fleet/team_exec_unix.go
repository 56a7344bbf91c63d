//go:build !windows

package main

import (
	"syscall"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
)

// execInTeam replaces this process with the command (as env(1) does), so
// the command gets the terminal, its signals and its own exit status.
func execInTeam(_ *factory.IOStreams, path string, argv, env []string) error {
	return syscall.Exec(path, argv, env)
}
