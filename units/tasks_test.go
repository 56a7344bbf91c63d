package units

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTasksOf reads fixture trees: the tightest of the pids.max limits
// above the process and the kernel's.
func TestTasksOf(t *testing.T) {
	const mgr = "/user.slice/user-1000.slice/user@1000.service/init.scope"
	write := func(t *testing.T, root, path, data string) {
		t.Helper()
		p := filepath.Join(root, path)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(data), 0o644))
	}
	kernel := func(t *testing.T, root string, pidMax, threads, tasks string) {
		write(t, root, "/proc/sys/kernel/pid_max", pidMax+"\n")
		write(t, root, "/proc/sys/kernel/threads-max", threads+"\n")
		write(t, root, "/proc/loadavg", "0.50 0.40 0.30 2/"+tasks+" 4242\n")
	}
	limit := func(t *testing.T, dir, max, cur string) {
		write(t, dir, "pids.max", max+"\n")
		write(t, dir, "pids.current", cur+"\n")
	}
	const unifiedMount = "22 1 0:21 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
	const hybridMount = "25 24 0:22 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n" +
		"30 24 0:27 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n" +
		"31 24 0:28 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd\n"

	t.Run("unified: the user slice is tightest", func(t *testing.T) {
		root := t.TempDir()
		write(t, root, "/proc/self/mountinfo", unifiedMount)
		write(t, root, "/proc/77/cgroup", "0::"+mgr+"\n")
		kernel(t, root, "4194304", "254000", "900")
		cg := filepath.Join(root, "/sys/fs/cgroup")
		limit(t, filepath.Join(cg, mgr), "max", "1")
		limit(t, filepath.Join(cg, "/user.slice/user-1000.slice/user@1000.service"), "max", "4600")
		limit(t, filepath.Join(cg, "/user.slice/user-1000.slice"), "10813", "4700")
		got, err := TasksOf(root, 77)
		require.NoError(t, err)
		require.Equal(t, TaskLimit{Where: "/user.slice/user-1000.slice", Current: 4700, Max: 10813}, got)
		require.Equal(t, 6113, got.Room())
		require.Equal(t, "4700 of 10813 tasks (pids.max of /user.slice/user-1000.slice)", got.String())
	})
	t.Run("hybrid: the v1 pids hierarchy, not the unified one", func(t *testing.T) {
		root := t.TempDir()
		write(t, root, "/proc/self/mountinfo", hybridMount)
		write(t, root, "/proc/77/cgroup", "9:name=systemd:"+mgr+"\n8:pids:/boxed\n0::"+mgr+"\n")
		kernel(t, root, "32768", "192729", "900")
		limit(t, filepath.Join(root, "/sys/fs/cgroup/pids/boxed"), "4700", "4695")
		limit(t, filepath.Join(root, "/sys/fs/cgroup/unified", mgr), "10", "9") // not the pids controller's
		got, err := TasksOf(root, 77)
		require.NoError(t, err)
		require.Equal(t, TaskLimit{Where: "/boxed", Current: 4695, Max: 4700}, got)
		require.Equal(t, 5, got.Room())
	})
	t.Run("the kernel, where no cgroup limits", func(t *testing.T) {
		root := t.TempDir()
		write(t, root, "/proc/self/mountinfo", unifiedMount)
		write(t, root, "/proc/77/cgroup", "0::"+mgr+"\n")
		kernel(t, root, "32768", "30000", "29990")
		got, err := TasksOf(root, 77)
		require.NoError(t, err)
		require.Equal(t, TaskLimit{Where: "kernel", Current: 29990, Max: 30000}, got)
		require.Equal(t, "29990 of 30000 tasks (the kernel's pid_max and threads-max)", got.String())
	})
	t.Run("nothing readable limits", func(t *testing.T) {
		root := t.TempDir()
		write(t, root, "/proc/77/cgroup", "0::"+mgr+"\n")
		got, err := TasksOf(root, 77)
		require.NoError(t, err)
		require.Equal(t, TaskLimit{}, got)
		require.Equal(t, "no task limit", got.String())
	})
	t.Run("a process that is gone", func(t *testing.T) {
		_, err := TasksOf(t.TempDir(), 77)
		require.ErrorIs(t, err, os.ErrNotExist)
	})
}
