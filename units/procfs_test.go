package units

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestParseProcCgroup feeds the fixtures of docs/systemd.md "Reading /proc/<pid>/cgroup" and more.
func TestParseProcCgroup(t *testing.T) {
	const unit = "/user.slice/user-1000.slice/user@1000.service/app.slice/fleet-w20-x.service"
	hybrid := strings.Join([]string{
		"12:cpuset:/", "11:perf_event:/", "10:net_cls,net_prio:/", "9:hugetlb:/", "8:devices:" + unit,
		"7:freezer:/", "6:memory:" + unit, "5:pids:/user.slice/user-1000.slice/user@1000.service",
		"4:blkio:/user.slice", "3:cpu,cpuacct:/user.slice", "2:misc:/",
		"1:name=systemd:" + unit, "0::" + unit,
	}, "\n") + "\n"
	for _, tc := range []struct {
		name, data string
		want       Membership
		gone       bool
	}{
		{name: "a unified", data: "0::" + unit + "\n",
			want: Membership{Path: unit, Unit: "fleet-w20-x.service", Slice: "app.slice", UserManager: "user@1000.service"}},
		{name: "b hybrid with twelve v1 lines", data: hybrid,
			want: Membership{Path: unit, Unit: "fleet-w20-x.service", Slice: "app.slice", UserManager: "user@1000.service"}},
		{name: "c legacy with unused unified", data: "1:name=systemd:" + unit + "\n0::/\n",
			want: Membership{Path: unit, Unit: "fleet-w20-x.service", Slice: "app.slice", UserManager: "user@1000.service"}},
		{name: "d stray v1 controller line", data: "1:net_cls:/\n0::" + unit + "\n",
			want: Membership{Path: unit, Unit: "fleet-w20-x.service", Slice: "app.slice", UserManager: "user@1000.service"}},
		{name: "e empty file", data: "", gone: true},
		{name: "pure legacy", data: "3:cpu:/\n1:name=systemd:/system.slice/cron.service\n",
			want: Membership{Path: "/system.slice/cron.service", Unit: "cron.service", Slice: "system.slice"}},
		{name: "scope", data: "0::/user.slice/user-1000.slice/session-4.scope\n",
			want: Membership{Path: "/user.slice/user-1000.slice/session-4.scope", Unit: "session-4.scope", Slice: "user-1000.slice"}},
		{name: "slice only", data: "0::/user.slice\n", want: Membership{Path: "/user.slice", Slice: "user.slice"}},
		{name: "root", data: "0::/\n", want: Membership{Path: "/"}},
		{name: "user manager itself", data: "0::/user.slice/user-1000.slice/user@1000.service/init.scope\n",
			want: Membership{Path: "/user.slice/user-1000.slice/user@1000.service/init.scope", Unit: "init.scope",
				Slice: "user-1000.slice", UserManager: "user@1000.service"}},
		{name: "delegated sub-cgroup", data: "0::/user.slice/user-1000.slice/user@1000.service/app.slice/w.service/payload\n",
			want: Membership{Path: "/user.slice/user-1000.slice/user@1000.service/app.slice/w.service/payload", Unit: "w.service",
				Slice: "app.slice", UserManager: "user@1000.service"}},
		{name: "private test manager", data: "1:name=systemd:/agent-fleet-test-ab/agent.slice/agent-fleet.slice/w.service\n0::/agent-fleet-test-ab/agent.slice/agent-fleet.slice/w.service\n",
			want: Membership{Path: "/agent-fleet-test-ab/agent.slice/agent-fleet.slice/w.service", Unit: "w.service", Slice: "agent-fleet.slice"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseProcCgroup([]byte(tc.data))
			if tc.gone {
				require.ErrorIs(t, err, ErrProcessGone)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	_, err := ParseProcCgroup([]byte("5:pids:/user.slice\n"))
	require.Error(t, err, "a controller line alone is never taken as the unit path")
	require.NotErrorIs(t, err, ErrProcessGone)
}

func TestMembershipOfPid(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "proc/42/cgroup"), "0::/user.slice/user-1000.slice/user@1000.service/app.slice/x.service\n")
	writeFile(t, filepath.Join(root, "proc/43/cgroup"), "")
	c := &Cgroups{Root: root}
	m, err := c.Membership(42)
	require.NoError(t, err)
	require.Equal(t, "x.service", m.Unit)
	_, err = c.Membership(43)
	require.ErrorIs(t, err, ErrProcessGone, "an empty file is a process on its way out")
	_, err = c.Membership(44)
	require.ErrorIs(t, err, ErrProcessGone, "ENOENT")
}

func TestInCgroup(t *testing.T) {
	require.True(t, InCgroup("/a/b.service", "/a/b.service"))
	require.True(t, InCgroup("/a/b.service/sub", "/a/b.service"))
	require.False(t, InCgroup("/a/b.service2", "/a/b.service"))
	require.False(t, InCgroup("/a", ""))
}

func TestProcesses(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "proc/7/comm"), "sleep\n")
	require.NoError(t, os.Symlink("/usr/bin/python3.11 (deleted)", filepath.Join(root, "proc/7/exe")))
	writeFile(t, filepath.Join(root, "proc/8/comm"), "bash\n")
	writeFile(t, filepath.Join(root, "proc/8/cmdline"), "bash\x00-c\x00secret prompt\x00")
	c := &Cgroups{Root: root}
	require.Equal(t, []Process{{PID: 7, Name: "python3.11"}, {PID: 8, Name: "bash"}, {PID: 9}}, c.Processes([]int{7, 8, 9}))

	if runtime.GOOS == "linux" {
		self := (&Cgroups{}).Processes([]int{os.Getpid()})
		require.NotEmpty(t, self[0].Name, "the real /proc: this process")
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(data), 0o644))
}
