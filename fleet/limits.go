package fleet

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/agent-fleet/agent-fleet/units"
)

// The smallest limits a worker can start under: its shim alone keeps
// about 3 MiB and runs about TasksPerWorker tasks (docs/systemd.md "At
// scale").
const (
	MinMemoryLimit = 4 << 20
	MinTasksLimit  = 2 * TasksPerWorker
)

// maxMemoryLimit keeps a limit storable (the registry's integers are
// signed): 8 EiB is no limit on any machine.
const maxMemoryLimit = math.MaxInt64

// ParseMemoryLimit reads a memory limit as systemd's MemoryMax= takes
// one: bytes, or a number (a fraction too) with K, M, G or T, powers of
// 1024, optionally followed by "B" or "iB" ("64M", "1.5G", "512MiB"). It
// must be at least MinMemoryLimit. Errors wrap ErrInvalidLimit.
func ParseMemoryLimit(s string) (uint64, error) {
	bad := func(why string) (uint64, error) {
		return 0, fmt.Errorf("%w: memory %q %s", ErrInvalidLimit, s, why)
	}
	t := strings.TrimSpace(s)
	t = strings.TrimSuffix(strings.TrimSuffix(t, "iB"), "B")
	mult := 1.0
	if t != "" {
		switch t[len(t)-1] {
		case 'K', 'k':
			mult = 1 << 10
		case 'M', 'm':
			mult = 1 << 20
		case 'G', 'g':
			mult = 1 << 30
		case 'T', 't':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:len(t)-1]
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 {
		return bad("is not a size such as 512M or 2G (bytes, or K, M, G, T: powers of 1024)")
	}
	n := f * mult
	switch {
	case n < MinMemoryLimit:
		return bad(fmt.Sprintf("is under %d MiB, less than a worker's shim needs to start", MinMemoryLimit>>20))
	case n >= maxMemoryLimit:
		return bad("is too large")
	}
	return uint64(n), nil
}

// ParseCPUQuota reads a CPU quota as systemd's CPUQuota= takes one: a
// whole percentage of one CPU, "%" optional ("50%", "200" for two CPUs),
// from 1 to units.MaxCPUQuotaPercent. Errors wrap ErrInvalidLimit.
func ParseCPUQuota(s string) (uint32, error) {
	t := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "%"))
	n, err := strconv.ParseUint(t, 10, 32)
	if err != nil || n < 1 || n > units.MaxCPUQuotaPercent {
		return 0, fmt.Errorf("%w: cpu %q is not a whole percentage of one CPU from 1%% to %d%% (50%% is half a CPU, 200%% two)",
			ErrInvalidLimit, s, units.MaxCPUQuotaPercent)
	}
	return uint32(n), nil
}

// ParseTasksLimit reads a TasksMax=: a whole number of tasks (processes
// and threads), at least MinTasksLimit. Errors wrap ErrInvalidLimit.
func ParseTasksLimit(s string) (uint64, error) {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 63)
	switch {
	case err != nil || n == 0:
		return 0, fmt.Errorf("%w: tasks %q is not a whole number of tasks (processes and threads)", ErrInvalidLimit, s)
	case n < MinTasksLimit:
		return 0, fmt.Errorf("%w: tasks %d is under %d: a worker's shim alone runs about %d", ErrInvalidLimit, n, MinTasksLimit, TasksPerWorker)
	}
	return n, nil
}

// checkLimits refuses limits that are out of range, or that need a
// controller the user manager cannot apply (when its manager can tell:
// units.Systemd can, fakes cannot): systemd would accept them and enforce
// nothing.
func (f *Fleet) checkLimits(ctx context.Context, l units.Limits) error {
	switch {
	case l.IsZero():
		return nil
	case l.MemoryMax > 0 && (l.MemoryMax < MinMemoryLimit || l.MemoryMax >= maxMemoryLimit):
		return fmt.Errorf("%w: memory %d bytes is out of range (at least %d MiB)", ErrInvalidLimit, l.MemoryMax, MinMemoryLimit>>20)
	case l.CPUQuotaPercent > units.MaxCPUQuotaPercent:
		return fmt.Errorf("%w: cpu %d%% is over %d%%", ErrInvalidLimit, l.CPUQuotaPercent, units.MaxCPUQuotaPercent)
	case l.TasksMax > 0 && l.TasksMax < MinTasksLimit:
		return fmt.Errorf("%w: tasks %d is under %d", ErrInvalidLimit, l.TasksMax, MinTasksLimit)
	}
	sup, ok, err := f.controllers(ctx)
	if !ok {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: could not tell which controllers the user manager has: %w", ErrLimitUnsupported, err)
	}
	flags := map[string]string{"memory": "memory", "cpu": "cpu", "pids": "tasks"}
	for _, ctrl := range l.Controllers() {
		if !sup.Has(ctrl) {
			return fmt.Errorf("%w: --%s needs the %s controller, which it lacks: %s (agent-fleet doctor shows its controllers)",
				ErrLimitUnsupported, flags[ctrl], ctrl, sup.Why[ctrl])
		}
	}
	return nil
}

// controllerProber is a Manager that can tell which resource controllers
// it has (units.Systemd).
type controllerProber interface {
	Controllers(context.Context) (units.ControllerSupport, error)
}

// controllers are the user manager's resource controllers; ok is false
// when its Manager cannot tell.
func (f *Fleet) controllers(ctx context.Context) (units.ControllerSupport, bool, error) {
	p, ok := f.cfg.Units.(controllerProber)
	if !ok {
		return units.ControllerSupport{}, false, nil
	}
	sup, err := p.Controllers(ctx)
	return sup, true, err
}
