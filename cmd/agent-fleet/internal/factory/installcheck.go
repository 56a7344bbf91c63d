package factory

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	contribsystemd "github.com/agent-fleet/agent-fleet/contrib/systemd"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/units"
)

// installedUnitsCheck is doctor's word on `agent-fleet install`: whether
// its units are in place, run an executable that exists, listen on this
// agent directory's socket, and are healthy. Not installed is fine: brokers
// then start on demand.
func (f *Factory) installedUnitsCheck(ctx context.Context, p intercom.Paths) fleet.Check {
	c := fleet.Check{Name: "systemd units", Status: fleet.CheckOK}
	dir, err := units.UserUnitDir(f.Env)
	if err != nil {
		c.Status, c.Detail = fleet.CheckWarn, err.Error()
		return c
	}
	var present, missing []string
	for _, name := range contribsystemd.Names {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			present = append(present, name)
		} else {
			missing = append(missing, name)
		}
	}
	notInstalled := "not installed: brokers start on demand (`agent-fleet install` adds socket activation and the janitor timer)"
	switch {
	case len(present) == 0:
		// Installed for a manager that reads another configuration
		// directory than this shell's XDG_CONFIG_HOME? Ask it.
		if !f.managerHasLoaded(ctx, contribsystemd.BrokerSocket) {
			c.Detail = notInstalled
			return c
		}
	case len(missing) > 0:
		c.Status, c.Detail = fleet.CheckWarn, fmt.Sprintf("partly installed in %s: %s missing", dir, strings.Join(missing, ", "))
		c.Fix = "agent-fleet install (or agent-fleet uninstall)"
		return c
	}
	_, nodeErr := os.Stat(filepath.Join(dir, contribsystemd.NodeService))
	service := contribsystemd.BrokerService
	if nodeErr == nil {
		service = contribsystemd.NodeService
	}
	data, _ := os.ReadFile(filepath.Join(dir, service))
	if bin, ok := contribsystemd.Binary(data); ok && len(present) > 0 {
		if _, err := os.Stat(bin); err != nil {
			c.Status, c.Detail = fleet.CheckFail, "the installed units run "+bin+", which does not exist"
			c.Fix = "agent-fleet install --binary PATH (the agent-fleet you use now)"
			return c
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := units.Connect(cctx, units.Options{DefaultTimeout: 5 * time.Second, Getenv: f.Env})
	if err != nil {
		// One line per check: the error's first line is the finding, its
		// advice (the lines after) the fix.
		first, advice, _ := strings.Cut(err.Error(), "\n")
		c.Status, c.Detail = fleet.CheckWarn, "installed in "+dir+", but the user manager does not answer: "+first
		c.Fix = strings.Join(strings.Fields(advice), " ")
		if c.Fix == "" {
			c.Fix = "start the user manager the units are installed for (the systemd checks above say how)"
		}
		return c
	}
	defer m.Close()
	if nodeErr == nil {
		return nodeUnitCheck(cctx, m, p)
	}
	sock, err := m.Unit(cctx, contribsystemd.BrokerSocket)
	if err != nil {
		c.Status, c.Detail = fleet.CheckWarn, err.Error()
		return c
	}
	svc, _ := m.Unit(cctx, contribsystemd.BrokerService)
	timer, _ := m.Unit(cctx, contribsystemd.CleanupTimer)
	listen, _ := m.SocketListen(cctx, contribsystemd.BrokerSocket)
	resetFix := fmt.Sprintf("read %s; then systemctl --user reset-failed %s %s && systemctl --user start %s",
		p.BrokerLog(), contribsystemd.BrokerSocket, contribsystemd.BrokerService, contribsystemd.BrokerSocket)
	switch {
	case sock.LoadState != "loaded":
		c.Status, c.Detail = fleet.CheckFail, fmt.Sprintf("%s is in %s but the user manager has not loaded it (%s)", contribsystemd.BrokerSocket, dir, sock.LoadState)
		c.Fix = "systemctl --user daemon-reload (a manager reads only the unit directory of the XDG_CONFIG_HOME it started with)"
	case !slices.Contains(listen, p.BrokerSocket()):
		c.Status, c.Detail = fleet.CheckWarn, fmt.Sprintf("%s listens on %s, not on this agent directory's %s", contribsystemd.BrokerSocket, strings.Join(listen, ", "), p.BrokerSocket())
		c.Fix = "run agent-fleet install with the PI_CODING_AGENT_DIR your agents use"
	case sock.ActiveState == "failed" || svc.ActiveState == "failed":
		c.Status, c.Detail = fleet.CheckFail, fmt.Sprintf("%s %s, %s %s (result %s)", contribsystemd.BrokerSocket, sock.ActiveState, contribsystemd.BrokerService, svc.ActiveState, svc.Result)
		c.Fix = resetFix
	case !sock.Running():
		c.Status, c.Detail = fleet.CheckWarn, fmt.Sprintf("%s is %s (%s): a broker started on demand serves the socket until it exits", contribsystemd.BrokerSocket, sock.ActiveState, sock.UnitFileState)
		c.Fix = "nothing to do: the next client that finds no broker starts the socket; or systemctl --user start " + contribsystemd.BrokerSocket
	case !timer.Running():
		c.Status, c.Detail = fleet.CheckWarn, fmt.Sprintf("%s is %s: the janitor does not run periodically", contribsystemd.CleanupTimer, timer.ActiveState)
		c.Fix = "systemctl --user start " + contribsystemd.CleanupTimer
	default:
		broker := "the broker starts on the next connection"
		if svc.Running() {
			broker = fmt.Sprintf("broker pid %d", svc.MainPID)
		}
		c.Detail = fmt.Sprintf("%s listening on %s (%s); %s active", contribsystemd.BrokerSocket, p.BrokerSocket(), broker, contribsystemd.CleanupTimer)
	}
	return c
}

// managerHasLoaded reports whether the user manager, if one answers, has
// the unit loaded from a unit file.
func (f *Factory) managerHasLoaded(ctx context.Context, name string) bool {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := units.Connect(cctx, units.Options{DefaultTimeout: 5 * time.Second, Getenv: f.Env})
	if err != nil {
		return false
	}
	defer m.Close()
	st, err := m.Unit(cctx, name)
	return err == nil && st.LoadState == "loaded"
}

// nodeUnitCheck is installedUnitsCheck after install --node: the node
// service serves the broker socket and the timer runs the janitor.
func nodeUnitCheck(ctx context.Context, m *units.Systemd, p intercom.Paths) fleet.Check {
	c := fleet.Check{Name: "systemd units", Status: fleet.CheckOK}
	node, err := m.Unit(ctx, contribsystemd.NodeService)
	if err != nil {
		c.Status, c.Detail = fleet.CheckWarn, err.Error()
		return c
	}
	timer, _ := m.Unit(ctx, contribsystemd.CleanupTimer)
	switch {
	case node.LoadState != "loaded":
		c.Status, c.Detail = fleet.CheckFail, fmt.Sprintf("%s is installed but the user manager has not loaded it (%s)", contribsystemd.NodeService, node.LoadState)
		c.Fix = "systemctl --user daemon-reload"
	case !node.Running():
		c.Status, c.Detail = fleet.CheckFail, fmt.Sprintf("%s is %s (result %s): brokers start on demand without federation", contribsystemd.NodeService, node.ActiveState, node.Result)
		c.Fix = fmt.Sprintf("read %s; then systemctl --user reset-failed %s && systemctl --user start %s", p.BrokerLog(), contribsystemd.NodeService, contribsystemd.NodeService)
	case !timer.Running():
		c.Status, c.Detail = fleet.CheckWarn, fmt.Sprintf("%s is %s: the janitor does not run periodically", contribsystemd.CleanupTimer, timer.ActiveState)
		c.Fix = "systemctl --user start " + contribsystemd.CleanupTimer
	default:
		c.Detail = fmt.Sprintf("%s active (node pid %d) serving %s; %s active", contribsystemd.NodeService, node.MainPID, p.BrokerSocket(), contribsystemd.CleanupTimer)
	}
	return c
}
