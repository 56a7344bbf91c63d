package units

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const managerRoot = "/user.slice/user-1000.slice/user@1000.service"

func TestManagerControllersUnified(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "proc/self/mountinfo"), mountinfoUnified)
	writeFile(t, filepath.Join(root, "sys/fs/cgroup", managerRoot, "cgroup.controllers"), "cpuset io memory pids\n")
	cg, err := OpenCgroups(root)
	require.NoError(t, err)
	sup, err := cg.ManagerControllers(managerRoot)
	require.NoError(t, err)
	require.Equal(t, []string{"memory", "pids"}, sup.Available)
	require.True(t, sup.Has("memory"))
	require.False(t, sup.Has("cpu"))
	require.Contains(t, sup.Why["cpu"], "not delegated")
	require.Contains(t, sup.Why["cpu"], "Delegate=")
	_, err = cg.ManagerControllers("/")
	require.Error(t, err)
}

// On a hybrid host systemd uses the v1 hierarchies for limits: a
// controller counts only where the manager's cgroup exists there.
func TestManagerControllersHybrid(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "proc/self/mountinfo"), mountinfoHybrid)
	writeFile(t, filepath.Join(root, "sys/fs/cgroup/pids", managerRoot, "cgroup.procs"), "")
	cg, err := OpenCgroups(root)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"cpu": filepath.Join(root, "sys/fs/cgroup/cpu"), "pids": filepath.Join(root, "sys/fs/cgroup/pids")}, cg.V1)
	sup, err := cg.ManagerControllers(managerRoot)
	require.NoError(t, err)
	require.Equal(t, []string{"pids"}, sup.Available)
	require.Contains(t, sup.Why["memory"], "no memory controller hierarchy is mounted")
	require.Contains(t, sup.Why["cpu"], "only the system manager applies limits there")
}

func TestUsage(t *testing.T) {
	root := fixture(t, mountinfoUnified, map[string]bool{"sys/fs/cgroup": true})
	unit := filepath.Join(root, "sys/fs/cgroup", fixtureUnit)
	writeFile(t, filepath.Join(unit, "memory.current"), "67100672\n")
	writeFile(t, filepath.Join(unit, "memory.events"), "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n")
	writeFile(t, filepath.Join(unit, "cpu.stat"), "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n")
	writeFile(t, filepath.Join(unit, "pids.current"), "7\n")
	writeFile(t, filepath.Join(unit, "cgroup.events"), "populated 1\nfrozen 1\n")
	cg, err := OpenCgroups(root)
	require.NoError(t, err)
	u, err := cg.Usage(fixtureUnit)
	require.NoError(t, err)
	require.Equal(t, uint64(67100672), *u.MemoryBytes)
	require.Equal(t, 1500*time.Millisecond, *u.CPU)
	require.Equal(t, uint64(7), *u.Tasks)
	require.Equal(t, uint64(1), u.OOMKills)
	require.True(t, *u.Frozen)

	gone, err := cg.Usage(fixtureUnit + "-gone")
	require.NoError(t, err, "a cgroup that is gone uses nothing")
	require.Equal(t, Usage{}, gone)
}

// On a hybrid host without the controllers in cgroup2, usage comes from
// the v1 hierarchies (cpuacct.usage is in nanoseconds, memory.oom_control
// counts OOM kills).
func TestUsageV1(t *testing.T) {
	const info = mountinfoHybrid + `35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
`
	root := fixture(t, info, map[string]bool{"sys/fs/cgroup/unified": true, "sys/fs/cgroup/systemd": false})
	writeFile(t, filepath.Join(root, "sys/fs/cgroup/memory", fixtureUnit, "memory.usage_in_bytes"), "4096\n")
	writeFile(t, filepath.Join(root, "sys/fs/cgroup/memory", fixtureUnit, "memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
	writeFile(t, filepath.Join(root, "sys/fs/cgroup/cpuacct", fixtureUnit, "cpuacct.usage"), "2000000000\n")
	writeFile(t, filepath.Join(root, "sys/fs/cgroup/pids", fixtureUnit, "pids.current"), "3\n")
	cg, err := OpenCgroups(root)
	require.NoError(t, err)
	u, err := cg.Usage(fixtureUnit)
	require.NoError(t, err)
	require.Equal(t, uint64(4096), *u.MemoryBytes)
	require.Equal(t, 2*time.Second, *u.CPU)
	require.Equal(t, uint64(3), *u.Tasks)
	require.Equal(t, uint64(2), u.OOMKills)
	require.False(t, *u.Frozen)
}
