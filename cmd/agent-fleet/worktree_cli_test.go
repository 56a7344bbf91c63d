//go:build linux

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/mcpserver/mcptest"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/units/unitstest"
)

// gitIn runs git in dir as a test person without the user's configuration.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %v: %s", args, out)
	return strings.TrimSpace(string(out))
}

// committer is an exec worker's command that commits file from its own
// working directory, then leaves dirty (if not "") untracked, and waits.
func committer(id, file, dirty string) []string {
	script := "echo " + id + " > " + file + " && git add " + file +
		" && git -c user.name=" + id + " -c user.email=" + id + "@example.invalid commit -qm 'from " + id + "'"
	if dirty != "" {
		script += " && echo notes > " + dirty
	}
	return []string{"--env", "GIT_CONFIG_GLOBAL=/dev/null", "--", "sh", "-c", script + " && exec sleep 300"}
}

// Two workers with --worktree on one repository work on branches of their
// own; status shows each branch's progress; a branch a live worker has is
// refused, as is a directory outside a repository; prune removes the
// worktree whose work is merged and keeps (and names) the dirty one, which
// nothing deletes until its work is safe.
func TestWorktreesOfTwoWorkers(t *testing.T) {
	t.Parallel()
	inst := unitstest.Require(t)
	dir := shortDir(t)
	repo := filepath.Join(t.TempDir(), "app")
	require.NoError(t, os.MkdirAll(repo, 0o755))
	gitIn(t, repo, "init", "-q", "-b", "main")
	require.NoError(t, os.WriteFile(filepath.Join(repo, "README"), []byte("app\n"), 0o644))
	gitIn(t, repo, "add", "README")
	gitIn(t, repo, "commit", "-qm", "first")
	base := gitIn(t, repo, "rev-parse", "HEAD")
	t.Cleanup(func() {
		_, _ = fleetCLI(t, dir, "stop", "--all", "--kill")
		stopBroker(t, dir)
	})
	spawn := func(id string, args ...string) output.Worker {
		t.Helper()
		out, err := fleetCLI(t, dir, append([]string{"spawn", "--id", id, "--cwd", repo, "--worktree", "--json"}, args...)...)
		require.NoError(t, err, "%s", out)
		var w output.Worker
		require.NoError(t, json.Unmarshal(out, &w), "%s", out)
		return w
	}
	wa := spawn("wt-a", committer("wt-a", "a.txt", "")...)
	wb := spawn("wt-b", committer("wt-b", "b.txt", "notes.txt")...)
	for _, w := range []output.Worker{wa, wb} {
		require.NotNil(t, w.Worktree, w.ID)
		require.Equal(t, filepath.Join(repo, ".git", "agent-fleet", "worktrees", w.ID), w.Worktree.Path)
		require.Equal(t, w.Worktree.Path, w.Cwd, "the worktree is the worker's cwd")
		require.Equal(t, "agent-fleet/"+w.ID, w.Worktree.Branch)
		require.Equal(t, "main", w.Worktree.BaseBranch)
		require.Equal(t, base, w.Worktree.BaseCommit)
	}

	status := func(id string) output.Status {
		t.Helper()
		out, err := fleetCLI(t, dir, "status", id, "--json")
		require.NoError(t, err, "%s", out)
		var st output.Status
		require.NoError(t, json.Unmarshal(out, &st), "%s", out)
		return st
	}
	for _, id := range []string{"wt-a", "wt-b"} {
		require.Eventually(t, func() bool {
			st := status(id)
			return st.Worktree != nil && st.Worktree.Ahead == 1
		}, 2*time.Minute, 100*time.Millisecond, "%s commits from its worktree", id)
	}
	require.Eventually(t, func() bool { return status("wt-b").Worktree.DirtyFiles == 1 }, time.Minute, 100*time.Millisecond)
	st := status("wt-a")
	require.Equal(t, output.WorktreeNow{Head: gitIn(t, repo, "rev-parse", "agent-fleet/wt-a"), Branch: "agent-fleet/wt-a",
		Against: "main", Ahead: 1, Behind: 0, DirtyFiles: 0}, *st.Worktree)
	out, err := fleetCLI(t, dir, "status", "wt-b")
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "  worktree: "+wb.Worktree.Path+"\n")
	require.Contains(t, string(out), "  branch:   agent-fleet/wt-b (from main at "+base[:12]+"): 1 ahead of and 0 behind main, 1 dirty file\n")

	// Each branch has its worker's commit, and only that.
	for _, id := range []string{"wt-a", "wt-b"} {
		branch := "agent-fleet/" + id
		require.Equal(t, "from "+id, gitIn(t, repo, "log", "-1", "--format=%s", branch))
		require.Equal(t, base, gitIn(t, repo, "rev-parse", branch+"~1"))
	}
	require.Equal(t, "wt-a", gitIn(t, repo, "show", "agent-fleet/wt-a:a.txt"))
	require.Equal(t, "wt-b", gitIn(t, repo, "show", "agent-fleet/wt-b:b.txt"))
	require.Equal(t, "README\na.txt", gitIn(t, repo, "ls-tree", "--name-only", "agent-fleet/wt-a"))
	require.Empty(t, gitIn(t, repo, "status", "--porcelain"), "the checkout sees none of it")

	// Refusals: a live worker's branch, a directory outside a repository.
	out, err = fleetCLI(t, dir, "spawn", "--id", "wt-c", "--cwd", repo, "--worktree=agent-fleet/wt-a", "--", "sleep", "300")
	requireExit(t, err, exitConflict)
	require.Contains(t, string(out), "branch agent-fleet/wt-a is checked out by live worker wt-a at "+wa.Worktree.Path)
	// A live worker's own id: that worker is the conflict, not its worktree.
	out, err = fleetCLI(t, dir, "spawn", "--id", "wt-a", "--cwd", repo, "--worktree=other", "--", "sleep", "300")
	requireExit(t, err, exitConflict)
	require.Contains(t, string(out), "stop it first")
	require.NotContains(t, string(out), "move it away")
	out, err = fleetCLI(t, dir, "spawn", "--id", "wt-c", "--cwd", t.TempDir(), "--worktree", "--json", "--", "sleep", "300")
	requireExit(t, err, exitUsage)
	require.Contains(t, string(out), `"ok":false`)
	require.Contains(t, string(out), "is not in a git work tree")
	out, err = fleetCLI(t, dir, "spawn", "--id", "wt-c", "--cwd", repo, "--worktree", "feature", "--", "sleep", "300")
	requireExit(t, err, exitUsage)
	require.Contains(t, string(out), "--worktree=BRANCH")
	out, err = fleetCLI(t, dir, "list", "--all", "--json")
	require.NoError(t, err, "%s", out)
	require.NotContains(t, string(out), `"wt-c"`, "a refused spawn leaves no record")

	// The agent_fleet tool spawns the same way, on a branch it names.
	in := cliIn{env: withEnv(nil, append(inst.Env(), "PI_CODING_AGENT_DIR="+dir, "AGENT_INTERCOM_SESSION_ID=operator-test")...)}
	s, _, _ := testStreams()
	call := mcptest.Caller(t, mcptest.Connect(t, mcpserver.New(nil, mcpserver.Options{Fleet: in.factory(s), Caller: "operator-test"})))
	r := call("agent_fleet", map[string]any{"action": "spawn", "id": "wt-d", "cwd": repo, "branch": "feature/d", "command": []any{"sleep", "300"}})
	require.False(t, r.IsError, r.Text)
	require.Contains(t, r.Text, "It works in the worktree "+filepath.Join(repo, ".git", "agent-fleet", "worktrees", "wt-d")+" on the new branch feature/d (from main at "+base[:12]+").")
	wd := r.Structured["worktree"].(map[string]any)
	require.Equal(t, "feature/d", wd["branch"])
	r = call("agent_fleet", map[string]any{"action": "spawn", "id": "wt-e", "cwd": repo, "branch": "feature/d", "command": []any{"sleep", "300"}})
	require.True(t, r.IsError, r.Text)
	require.Contains(t, r.Text, "checked out by live worker wt-d")

	// Stopping records what each worktree held.
	for _, id := range []string{"wt-a", "wt-b", "wt-d"} {
		out, err := fleetCLI(t, dir, "stop", id)
		require.NoError(t, err, "%s", out)
	}
	end := status("wt-b").Worker.Worktree
	require.Equal(t, []string{"?? notes.txt"}, end.EndStatus)
	require.Equal(t, gitIn(t, repo, "rev-parse", "agent-fleet/wt-b"), end.EndHead)

	// wt-a's work is merged: prune removes its worktree and branch; wt-b's
	// worktree has an uncommitted file: kept, and said so; wt-d's branch
	// is its base's commit, so merged too.
	gitIn(t, repo, "merge", "-q", "--ff-only", "agent-fleet/wt-a")
	out, err = fleetCLI(t, dir, "prune", "--acknowledge", "--json")
	require.NoError(t, err, "%s", out)
	var pruned struct {
		Deleted   int                      `json:"deleted"`
		Worktrees []output.WorktreeOutcome `json:"worktrees"`
	}
	require.NoError(t, json.Unmarshal(out, &pruned), "%s", out)
	require.Equal(t, 3, pruned.Deleted)
	byID := map[string]output.WorktreeOutcome{}
	for _, o := range pruned.Worktrees {
		byID[o.ID] = o
	}
	require.Len(t, byID, 3, "%s", out)
	require.True(t, byID["wt-a"].Removed && byID["wt-a"].BranchDeleted, "%+v", byID["wt-a"])
	require.True(t, byID["wt-d"].Removed && byID["wt-d"].BranchDeleted, "%+v", byID["wt-d"])
	require.Equal(t, output.WorktreeOutcome{ID: "wt-b", RunID: wb.RunID, Path: wb.Worktree.Path, Branch: "agent-fleet/wt-b",
		Kept: "1 uncommitted file (commit or discard them)"}, byID["wt-b"])
	require.NoDirExists(t, wa.Worktree.Path)
	require.FileExists(t, filepath.Join(wb.Worktree.Path, "notes.txt"), "uncommitted work is never deleted")
	require.Equal(t, "agent-fleet/wt-b", gitIn(t, repo, "branch", "--list", "--format=%(refname:short)", "agent-fleet/*"))

	// Its record is gone, its worktree is not: every prune and cleanup
	// says so, with its path, until its work is safe.
	out, err = fleetCLI(t, dir, "prune", "--acknowledge")
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "Kept the worktree of wt-b at "+wb.Worktree.Path+" (branch agent-fleet/wt-b): 1 uncommitted file")
	out, err = fleetCLI(t, dir, "cleanup", "--json")
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), `"kind":"keep-worktree","id":"wt-b"`)
	require.DirExists(t, wb.Worktree.Path)

	gitIn(t, wb.Worktree.Path, "add", "notes.txt")
	gitIn(t, wb.Worktree.Path, "commit", "-qm", "notes")
	gitIn(t, repo, "merge", "-q", "--no-edit", "agent-fleet/wt-b")
	out, err = fleetCLI(t, dir, "prune", "--acknowledge")
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "Removed the worktree of wt-b at "+wb.Worktree.Path+" and its merged branch agent-fleet/wt-b.")
	require.NoDirExists(t, wb.Worktree.Path)
	require.Equal(t, "notes", gitIn(t, repo, "show", "main:notes.txt"))
}
