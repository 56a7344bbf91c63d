package main

import (
	"errors"
	"os"
	"os/exec"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
)

// execInTeam runs the command as a child (Windows has no exec) and then
// exits with its status, as if this process had become the command.
func execInTeam(s *factory.IOStreams, path string, argv, env []string) error {
	c := exec.Command(path, argv[1:]...)
	c.Stdin, c.Stdout, c.Stderr = s.In, s.Out, s.Err
	c.Env = env
	err := c.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		os.Exit(ee.ExitCode())
	}
	if err != nil {
		return err
	}
	os.Exit(0)
	return nil
}
