package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// childEnv is added to the environment of the broker processes this one
// starts (tests use it to make the test binary act as agent-fleet).
var childEnv []string

// brokerStarter starts a broker that does not live in the caller's process
// tree or cgroup (DESIGN.md "Broker placement"): a double fork with setsid,
// its output appended to the bounded broker.log.
func brokerStarter() intercom.BrokerStarter {
	return detachBroker
}

// detachBroker runs `agent-fleet broker --detach`, which starts the real
// broker in a new session and exits at once, so the broker is reparented
// away from the caller and never becomes the caller's zombie.
func detachBroker(ctx context.Context, p intercom.Paths) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("locate agent-fleet: %w", err)
	}
	cmd := exec.CommandContext(ctx, exe, "broker", "--detach")
	cmd.Env = append(append(os.Environ(), childEnv...), intercom.AgentDirEnv+"="+p.AgentDir)
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

// launchDetachedBroker is the middle of the double fork: start the broker
// in its own session with stdin from /dev/null and output to broker.log.
func launchDetachedBroker(p intercom.Paths, args []string) error {
	if err := intercom.EnsureDir(p.Dir); err != nil {
		return err
	}
	logf, err := intercom.PrepareBrokerLog(p)
	if err != nil {
		return err
	}
	defer logf.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, append([]string{"broker"}, args...)...)
	cmd.Env = append(os.Environ(), intercom.AgentDirEnv+"="+p.AgentDir)
	cmd.Dir = "/"
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, logf, logf
	cmd.SysProcAttr = detachAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start broker: %w", err)
	}
	return cmd.Process.Release()
}
