//go:build !windows

package shim

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet"
)

// The shim is its unit's main process: the end it records carries its pid
// when the record has none yet — a command that ends within the readiness
// grace ends before its spawn could read the unit's MainPID (the unit is
// collected by then) — and leaves a recorded one alone.
func TestRecordedExitCarriesTheMainPID(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fleet.db")
	reg, err := fleet.OpenRegistry(ctx, path)
	require.NoError(t, err)
	defer reg.Close()
	early := &fleet.Worker{ID: "early", Kind: "exec", Manager: "boss", FirstManager: "boss", Command: []string{"true"}}
	require.NoError(t, reg.Reserve(ctx, early))
	known := &fleet.Worker{ID: "known", Kind: "exec", Manager: "boss", FirstManager: "boss", Command: []string{"true"}}
	require.NoError(t, reg.Reserve(ctx, known))
	_, err = reg.Update(ctx, known.ID, known.RunID, func(r *fleet.Worker) error {
		r.MainPID, r.State = 1234, fleet.StateRunning
		return nil
	})
	require.NoError(t, err)

	regs := fleet.NewRegistryHandle(path, false)
	defer regs.Close()
	log := slog.New(slog.DiscardHandler)
	recordExit(ctx, regs, early.ID, early.RunID, ending{exitCode: "exited"}, nil, false, log)
	recordExit(ctx, regs, known.ID, known.RunID, ending{exitCode: "exited"}, nil, false, log)

	got, err := reg.GetRun(ctx, early.ID, early.RunID)
	require.NoError(t, err)
	require.Equal(t, os.Getpid(), got.MainPID)
	require.Equal(t, fleet.StateExited, got.State)
	got, err = reg.GetRun(ctx, known.ID, known.RunID)
	require.NoError(t, err)
	require.Equal(t, 1234, got.MainPID)
}

// The end the shim records carries what the worker's worktree holds, but
// not on a stop: the stop reads the worktree itself once the cgroup is
// proven empty, and waits for the shim's exit meanwhile.
func TestRecordedExitLeavesAStopsWorktreeToTheStop(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fleet.db")
	reg, err := fleet.OpenRegistry(ctx, path)
	require.NoError(t, err)
	defer reg.Close()
	regs := fleet.NewRegistryHandle(path, false)
	defer regs.Close()
	log := slog.New(slog.DiscardHandler)
	for _, stopping := range []bool{false, true} {
		w := &fleet.Worker{ID: "ended", Kind: "exec", Manager: "boss", FirstManager: "boss", Command: []string{"true"}}
		if stopping {
			w.ID = "stopped"
		}
		require.NoError(t, reg.Reserve(ctx, w))
		repo := t.TempDir()
		for _, args := range [][]string{{"init", "-q"}, {"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "--allow-empty", "-m", "a"}} {
			out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput()
			require.NoError(t, err, "%s", out)
		}
		require.NoError(t, os.WriteFile(filepath.Join(repo, "notes.txt"), []byte("x\n"), 0o644))
		require.NoError(t, reg.PutWorktree(ctx, &fleet.Worktree{ID: w.ID, RunID: w.RunID, Path: repo, Repository: repo,
			CommonDir: filepath.Join(repo, ".git"), Branch: w.ID}))
		_, err := reg.Update(ctx, w.ID, w.RunID, func(r *fleet.Worker) error {
			r.State = fleet.StateRunning
			if stopping {
				r.State = fleet.StateStopping
			}
			return nil
		})
		require.NoError(t, err)

		recordExit(ctx, regs, w.ID, w.RunID, ending{exitCode: "killed", status: int(syscall.SIGTERM)}, nil, stopping, log)
		got, err := reg.GetRun(ctx, w.ID, w.RunID)
		require.NoError(t, err)
		require.True(t, got.HasExit, "stopping=%v: the exit is recorded", stopping)
		wt, err := reg.Worktree(ctx, w.ID, w.RunID)
		require.NoError(t, err)
		if stopping {
			require.Empty(t, wt.EndHead, "the stop reads the worktree")
			require.True(t, wt.EndedAt.IsZero())
			continue
		}
		require.Len(t, wt.EndHead, 40)
		require.Equal(t, []string{"?? notes.txt"}, wt.EndStatus)
	}
}

// A stop at the maximum runtime is told by the shim's own SIGTERM or by
// the workload's death of one, whichever is seen first: systemd signals
// the whole cgroup at once.
func TestAtMaxRuntime(t *testing.T) {
	killed := ending{exitCode: "killed", status: int(syscall.SIGTERM)}
	past := &endCause{started: time.Now().Add(-2 * time.Second), maxRuntime: time.Second}
	require.True(t, past.atMaxRuntime(killed), "killed by SIGTERM past the limit, before the shim noted its own")
	require.False(t, past.atMaxRuntime(ending{exitCode: "exited", status: 0}), "it exited by itself")
	require.False(t, past.atMaxRuntime(ending{exitCode: "killed", status: int(syscall.SIGKILL)}))
	past.termed.Store(true)
	require.True(t, past.atMaxRuntime(ending{exitCode: "exited", status: 143}), "the shim's SIGTERM past the limit")

	early := &endCause{started: time.Now(), maxRuntime: time.Hour}
	early.termed.Store(true)
	require.False(t, early.atMaxRuntime(killed), "before the limit")
	require.False(t, (&endCause{started: time.Now().Add(-time.Hour)}).atMaxRuntime(killed), "no limit")
	require.False(t, (*endCause)(nil).atMaxRuntime(killed))
}

// The fence is read once, from the first SIGTERM on; an end that came
// before any SIGTERM reads it itself, and a SIGTERM after that reads
// nothing.
func TestFenceRead(t *testing.T) {
	reads := 0
	read := func() bool { reads++; return true }

	f := &fenceRead{read: read}
	f.start()
	f.start()
	require.True(t, f.fenced())
	require.True(t, f.fenced())
	require.Equal(t, 1, reads)

	reads = 0
	late := &fenceRead{read: read}
	require.False(t, late.fenced(), "no SIGTERM came: the caller reads the fence")
	late.start()
	require.False(t, late.fenced())
	require.Zero(t, reads)

	// The first SIGTERM starts the read, before the signal goes on.
	started := make(chan struct{}, 3)
	c := &endCause{onTerm: func() { started <- struct{}{} }}
	caught := make(chan os.Signal, 3)
	out := c.watch(caught)
	defer c.close()
	caught <- syscall.SIGHUP
	require.Equal(t, syscall.SIGHUP, <-out)
	require.Empty(t, started)
	caught <- syscall.SIGTERM
	caught <- syscall.SIGTERM
	require.Equal(t, syscall.SIGTERM, <-out)
	require.Len(t, started, 1, "started before the SIGTERM was passed on")
	require.Equal(t, syscall.SIGTERM, <-out)
	require.Len(t, started, 1, "once")
	require.True(t, c.termed.Load())
}
