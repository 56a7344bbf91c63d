//go:build !windows

package fleet

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// gitT runs git in dir for a test, as a person with an identity of its
// own and no global configuration.
func gitT(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %v: %s", args, out)
	return strings.TrimSpace(string(out))
}

// testRepo is a repository on main with one commit and a subdirectory.
func testRepo(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	gitT(t, dir, "init", "-q", "-b", "main")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "README"), []byte("hi\n"), 0o644))
	gitT(t, dir, "add", ".")
	gitT(t, dir, "commit", "-qm", "first")
	return dir
}

// worktreeFleet is a Fleet with only what worktrees need: a registry in a
// temp agent directory.
func worktreeFleet(t *testing.T, env map[string]string) (*Fleet, *Registry) {
	t.Helper()
	p := intercom.NewPaths(t.TempDir())
	require.NoError(t, intercom.EnsureDir(p.OrchestratorDir()))
	reg, err := OpenRegistry(context.Background(), RegistryPath(p))
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	return &Fleet{cfg: Config{Paths: p, Registry: reg, Now: time.Now, CallerEnv: func(k string) string { return env[k] }},
		log: slog.New(slog.DiscardHandler)}, reg
}

// reserveWith records a live incarnation of id owning wt, as Spawn does.
func reserveWith(t *testing.T, reg *Registry, id string, wt *Worktree) *Worker {
	t.Helper()
	w := &Worker{ID: id, Kind: "exec", Cwd: wt.Path, Manager: "boss"}
	require.NoError(t, reg.Reserve(context.Background(), w))
	wt.RunID = w.RunID
	require.NoError(t, reg.PutWorktree(context.Background(), wt))
	return w
}

func end(t *testing.T, reg *Registry, w *Worker) {
	t.Helper()
	_, err := reg.Update(context.Background(), w.ID, w.RunID, func(r *Worker) error { r.State = StateStopped; return nil })
	require.NoError(t, err)
}

func TestWorktreeRefusesWhatItCannotMake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, _ := worktreeFleet(t, nil)
	_, _, err := f.createWorktree(ctx, "w1", t.TempDir(), "")
	require.ErrorIs(t, err, ErrNotRepository)
	require.Contains(t, err.Error(), "is not in a git work tree")

	empty := t.TempDir()
	gitT(t, empty, "init", "-q")
	_, _, err = f.createWorktree(ctx, "w1", empty, "")
	require.ErrorIs(t, err, ErrNotRepository)
	require.Contains(t, err.Error(), "has no commit yet")

	repo := testRepo(t)
	_, _, err = f.createWorktree(ctx, "w1", filepath.Join(repo, ".git"), "")
	require.ErrorIs(t, err, ErrNotRepository, "a git directory has no work tree")
	for _, bad := range []string{"a..b", "-x", "has space", "x.lock", "HEAD", "@", "refs/remotes/origin/x", "refs/heads/HEAD"} {
		_, _, err = f.createWorktree(ctx, "w1", repo, bad)
		require.ErrorIs(t, err, ErrInvalidRequest, bad)
	}
	_, _, err = f.createWorktree(ctx, "w1", repo, "main")
	require.ErrorIs(t, err, ErrBranchCheckedOut, "main is the checkout's")
	require.Contains(t, err.Error(), "branch main is checked out at "+repo)

	gitT(t, repo, "branch", "agent-fleet/w1")
	_, _, err = f.createWorktree(ctx, "w1", repo, "")
	require.ErrorIs(t, err, ErrWorktreeConflict, "the default branch must be new")
	require.Contains(t, err.Error(), "--worktree=agent-fleet/w1")

	f2, _ := worktreeFleet(t, map[string]string{EnvWorktreeRoot: "relative/dir"})
	_, _, err = f2.createWorktree(ctx, "w2", repo, "")
	require.ErrorIs(t, err, ErrInvalidRequest)
}

func TestWorktreeOfAWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, reg := worktreeFleet(t, nil)
	repo := testRepo(t)
	require.NoError(t, os.WriteFile(filepath.Join(repo, "scratch"), []byte("x"), 0o644))

	wt, cwd, err := f.createWorktree(ctx, "w1", filepath.Join(repo, "sub"), "")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(repo, ".git", "agent-fleet", "worktrees", "w1"), wt.Path)
	require.Equal(t, filepath.Join(wt.Path, "sub"), cwd, "the same subdirectory of the worktree")
	require.FileExists(t, filepath.Join(cwd, "README"))
	require.Equal(t, "agent-fleet/w1", wt.Branch)
	require.True(t, wt.CreatedBranch)
	require.Equal(t, "main", wt.BaseBranch)
	require.Equal(t, gitT(t, repo, "rev-parse", "HEAD"), wt.BaseCommit)
	require.Equal(t, 1, wt.BaseDirtyFiles, "the untracked scratch file is not in the worktree")
	require.NoFileExists(t, filepath.Join(wt.Path, "scratch"))
	require.Equal(t, "?? scratch", gitT(t, repo, "status", "--porcelain"), "the worktree is invisible to the checkout")
	w := reserveWith(t, reg, "w1", wt)

	// A second worker cannot have the live worker's branch.
	_, _, err = f.createWorktree(ctx, "w2", repo, "agent-fleet/w1")
	require.ErrorIs(t, err, ErrBranchCheckedOut)
	require.Contains(t, err.Error(), "checked out by live worker w1 at "+wt.Path)

	// Work: one commit and a dirty file.
	require.NoError(t, os.WriteFile(filepath.Join(wt.Path, "a.txt"), []byte("a\n"), 0o644))
	gitT(t, wt.Path, "add", "a.txt")
	gitT(t, wt.Path, "commit", "-qm", "a")
	require.NoError(t, os.WriteFile(filepath.Join(wt.Path, "b.txt"), []byte("b\n"), 0o644))
	st := InspectWorktree(ctx, wt)
	require.Equal(t, WorktreeState{Head: gitT(t, wt.Path, "rev-parse", "HEAD"), Branch: "agent-fleet/w1", Against: "main",
		Ahead: 1, Behind: 0, DirtyFiles: 1}, *st)

	out := f.releaseWorktree(ctx, wt, true)
	require.Equal(t, "its worker is live", out.Kept)
	require.DirExists(t, wt.Path)

	end(t, reg, w)
	require.NoError(t, recordWorktreeEnd(ctx, reg, w.ID, w.RunID, time.Now()))
	rec, err := reg.Worktree(ctx, w.ID, w.RunID)
	require.NoError(t, err)
	require.Equal(t, []string{"?? b.txt"}, rec.EndStatus)
	require.Equal(t, st.Head, rec.EndHead)

	out = f.releaseWorktree(ctx, rec, true)
	require.False(t, out.Removed)
	require.Equal(t, "1 uncommitted file (commit or discard them)", out.Kept)
	require.FileExists(t, filepath.Join(wt.Path, "b.txt"), "uncommitted work is never deleted")

	require.NoError(t, os.Remove(filepath.Join(wt.Path, "b.txt")))
	out = f.releaseWorktree(ctx, rec, true)
	require.Equal(t, "1 commit not merged into main nor pushed", out.Kept)

	// The same id cannot get a new worktree while this one is kept.
	_, _, err = f.createWorktree(ctx, "w1", repo, "")
	require.ErrorIs(t, err, ErrWorktreeConflict)
	require.Contains(t, err.Error(), "is kept at "+wt.Path+": 1 commit not merged into main nor pushed")

	gitT(t, repo, "merge", "-q", "--ff-only", "agent-fleet/w1")
	out = f.releaseWorktree(ctx, rec, true)
	require.Equal(t, WorktreeOutcome{ID: "w1", RunID: w.RunID, Path: wt.Path, Branch: "agent-fleet/w1", Removed: true, BranchDeleted: true}, out)
	require.NoDirExists(t, wt.Path)
	require.Empty(t, gitT(t, repo, "branch", "--list", "agent-fleet/w1"), "the merged branch is gone")
	_, err = reg.Worktree(ctx, w.ID, w.RunID)
	require.ErrorIs(t, err, ErrNotFound)
	require.FileExists(t, filepath.Join(repo, "a.txt"), "the work is on main")
}

// A pushed branch's worktree is removed, and the branch kept: it is not
// merged. An existing branch is never deleted.
func TestWorktreePushedAndGivenBranches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := t.TempDir()
	f, reg := worktreeFleet(t, map[string]string{EnvWorktreeRoot: root})
	repo := testRepo(t)
	remote := filepath.Join(t.TempDir(), "remote.git")
	gitT(t, repo, "init", "-q", "--bare", remote)
	gitT(t, repo, "remote", "add", "origin", remote)

	wt, _, err := f.createWorktree(ctx, "p1", repo, "feature/x")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(wt.Path, filepath.Join(root, "repo-")), wt.Path)
	require.Equal(t, "feature/x", wt.Branch)
	w := reserveWith(t, reg, "p1", wt)
	require.NoError(t, os.WriteFile(filepath.Join(wt.Path, "p.txt"), []byte("p\n"), 0o644))
	gitT(t, wt.Path, "add", "p.txt")
	gitT(t, wt.Path, "commit", "-qm", "p")
	end(t, reg, w)
	require.Contains(t, f.releaseWorktree(ctx, wt, false).Kept, "1 commit not merged into main nor pushed")
	// Pushed, then one more: only that one is counted.
	gitT(t, wt.Path, "push", "-q", "origin", "feature/x")
	require.NoError(t, os.WriteFile(filepath.Join(wt.Path, "q.txt"), []byte("q\n"), 0o644))
	gitT(t, wt.Path, "add", "q.txt")
	gitT(t, wt.Path, "commit", "-qm", "q")
	require.Contains(t, f.releaseWorktree(ctx, wt, false).Kept, "1 commit not merged into main nor pushed")
	gitT(t, wt.Path, "push", "-q", "origin", "feature/x")
	require.Equal(t, "", f.releaseWorktree(ctx, wt, false).Kept, "a preview says it would go")
	require.DirExists(t, wt.Path, "a preview removes nothing")
	out := f.releaseWorktree(ctx, wt, true)
	require.True(t, out.Removed)
	require.False(t, out.BranchDeleted, "pushed, not merged: the branch stays")
	require.Equal(t, "feature/x", gitT(t, repo, "branch", "--list", "--format=%(refname:short)", "feature/x"))

	// The existing branch, checked out again (spelled as its full ref
	// too): merged or not, never deleted.
	wt2, _, err := f.createWorktree(ctx, "p2", repo, "refs/heads/feature/x")
	require.NoError(t, err)
	require.False(t, wt2.CreatedBranch)
	require.Equal(t, "feature/x", wt2.Branch)
	w2 := reserveWith(t, reg, "p2", wt2)
	end(t, reg, w2)
	out = f.releaseWorktree(ctx, wt2, true)
	require.True(t, out.Removed)
	require.False(t, out.BranchDeleted)
}

func TestPorcelainEntries(t *testing.T) {
	require.Equal(t, []string{" M a", "R  new <- old", "?? c d"}, porcelainEntries(" M a\x00R  new\x00old\x00?? c d\x00"))
	require.Empty(t, porcelainEntries(""))
}

// A worktree's record reads back as written, every field; a second one
// for the same run or path is a conflict.
func TestWorktreeRecordRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, reg := worktreeFleet(t, nil)
	w := &Worker{ID: "rt", Kind: "exec", Manager: "boss"}
	require.NoError(t, reg.Reserve(ctx, w))
	in := &Worktree{ID: "rt", RunID: w.RunID, Path: "/r/.git/agent-fleet/worktrees/rt", Repository: "/r", CommonDir: "/r/.git",
		Branch: "agent-fleet/rt", CreatedBranch: true, BaseBranch: "main", BaseCommit: strings.Repeat("a", 40), BaseDirtyFiles: 2,
		CreatedAt: time.UnixMilli(1_700_000_000_123).UTC()}
	require.NoError(t, reg.PutWorktree(ctx, in.Clone()))
	end := time.UnixMilli(1_700_000_100_456).UTC()
	require.NoError(t, reg.RecordWorktreeEnd(ctx, "rt", w.RunID, strings.Repeat("b", 40), []string{"?? x", " M y"}, end))
	in.EndHead, in.EndStatus, in.EndedAt = strings.Repeat("b", 40), []string{"?? x", " M y"}, end
	v := reflect.ValueOf(*in)
	for i := range v.NumField() {
		require.False(t, v.Field(i).IsZero(), "the test leaves %s zero", v.Type().Field(i).Name)
	}
	got, err := reg.Worktree(ctx, "rt", w.RunID)
	require.NoError(t, err)
	require.Equal(t, in, got)
	got, err = reg.WorktreeAt(ctx, in.Path)
	require.NoError(t, err)
	require.Equal(t, in, got)
	require.ErrorIs(t, reg.PutWorktree(ctx, in.Clone()), ErrConflict)
	require.NoError(t, reg.DeleteWorktree(ctx, "rt", w.RunID))
	_, err = reg.Worktree(ctx, "rt", w.RunID)
	require.ErrorIs(t, err, ErrNotFound)
}
