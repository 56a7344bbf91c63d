package units

import (
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// Mountinfo texts of the three layouts (trimmed real ones).
const (
	mountinfoUnified = `25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
28 25 0:25 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
30 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw
`
	mountinfoHybrid = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	mountinfoLegacy = `24 18 0:21 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:7 - tmpfs tmpfs ro,mode=755
25 24 0:22 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:8 - cgroup cgroup rw,xattr,release_agent=/usr/lib/systemd/systemd-cgroups-agent,name=systemd
27 24 0:24 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:10 - cgroup cgroup rw,cpu,cpuacct
28 24 0:25 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,memory
`
)

const fixtureUnit = "/user.slice/user-1000.slice/user@1000.service/app.slice/w.service"

// fixture builds a fake root: /proc/self/mountinfo and, below each given
// hierarchy directory, the unit's cgroup with pids 100 and 101 directly and
// 102 in a sub-cgroup, plus cgroup.events/cgroup.kill where cgroup2 has
// them.
func fixture(t *testing.T, mountinfo string, hierarchies map[string]bool) string {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "proc/self/mountinfo"), mountinfo)
	for dir, v2 := range hierarchies {
		unit := filepath.Join(root, dir, fixtureUnit)
		writeFile(t, filepath.Join(unit, "cgroup.procs"), "100\n101\n")
		writeFile(t, filepath.Join(unit, "sub/cgroup.procs"), "102\n101\n")
		writeFile(t, filepath.Join(root, dir, "user.slice/cgroup.procs"), "")
		if v2 {
			writeFile(t, filepath.Join(unit, "cgroup.events"), "populated 1\nfrozen 0\n")
			writeFile(t, filepath.Join(unit, "cgroup.kill"), "")
			writeFile(t, filepath.Join(root, dir, "user.slice/cgroup.kill"), "")
		}
	}
	return root
}

func TestCgroupLayouts(t *testing.T) {
	for _, tc := range []struct {
		name, mountinfo string
		hierarchies     map[string]bool
		layout          Layout
		unified, named  string
		hasKill         bool
	}{
		{"unified", mountinfoUnified, map[string]bool{"/sys/fs/cgroup": true}, LayoutUnified, "/sys/fs/cgroup", "", true},
		{"hybrid", mountinfoHybrid, map[string]bool{"/sys/fs/cgroup/unified": true, "/sys/fs/cgroup/systemd": false},
			LayoutHybrid, "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd", true},
		{"legacy", mountinfoLegacy, map[string]bool{"/sys/fs/cgroup/systemd": false}, LayoutLegacy, "", "/sys/fs/cgroup/systemd", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := fixture(t, tc.mountinfo, tc.hierarchies)
			c, err := OpenCgroups(root)
			require.NoError(t, err)
			require.Equal(t, tc.layout, c.Layout)
			rooted := func(p string) string {
				if p == "" {
					return ""
				}
				return filepath.Join(root, p)
			}
			require.Equal(t, rooted(tc.unified), c.Unified)
			require.Equal(t, rooted(tc.named), c.Named)
			require.Len(t, c.Dirs(fixtureUnit), len(tc.hierarchies))

			pids, err := c.Procs(fixtureUnit)
			require.NoError(t, err)
			require.Equal(t, []int{100, 101, 102}, pids, "recursive, deduplicated, sorted")
			populated, err := c.Populated(fixtureUnit)
			require.NoError(t, err)
			require.True(t, populated)

			gone := "/user.slice/user-1000.slice/user@1000.service/app.slice/gone.service"
			pids, err = c.Procs(gone)
			require.NoError(t, err)
			require.Empty(t, pids, "a removed cgroup is empty, not an error")
			populated, err = c.Populated(gone)
			require.NoError(t, err)
			require.False(t, populated)

			require.Equal(t, tc.hasKill, c.HasKill())
			require.Equal(t, tc.hasKill, c.KillFile(fixtureUnit) != "")
			_, err = c.Procs("/")
			require.Error(t, err, "the root cgroup is never read as a unit")
			if runtime.GOOS == "linux" {
				_, err = c.Kill(t.Context(), fixtureUnit)
				require.Error(t, err, "Kill never signals pids listed under a fixture root")
			}
		})
	}
}

func TestParseMountinfo(t *testing.T) {
	c, err := ParseMountinfo([]byte(mountinfoUnified + "50 28 0:40 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n"))
	require.NoError(t, err)
	require.Equal(t, LayoutUnified, c.Layout, "a stray name=systemd beside cgroup2 at /sys/fs/cgroup stays unified")
	require.Empty(t, c.Named)

	c, err = ParseMountinfo([]byte(`1 0 0:1 / /mnt/cgroup\040v2 rw - cgroup2 cgroup2 rw` + "\n"))
	require.NoError(t, err)
	require.Equal(t, LayoutUnified, c.Layout)
	require.Equal(t, "/mnt/cgroup v2", c.Unified, "octal escapes undone")

	_, err = ParseMountinfo([]byte("30 1 259:2 / / rw,relatime shared:1 - ext4 /dev/sda rw\n"))
	require.ErrorIs(t, err, ErrNoCgroups)
}

// TestCgroupsOfThisHost: the machine the tests run on has a layout the
// package understands (hybrid on the CI machines).
func TestCgroupsOfThisHost(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("cgroups are Linux only")
	}
	c, err := OpenCgroups("")
	require.NoError(t, err)
	t.Logf("layout %s, unified %q, named %q, cgroup.kill %v", c.Layout, c.Unified, c.Named, c.HasKill())
	m, err := c.Membership(1)
	require.NoError(t, err)
	require.NotEmpty(t, m.Path)
}
