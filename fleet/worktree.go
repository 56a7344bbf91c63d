package fleet

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// A worker spawned with --worktree works in a git worktree of its own: a
// checkout of the repository its spawn's directory is in, on a branch of
// its own, so that two writers in one repository never edit the same
// files (docs/architecture.md "Worktrees"). Everything here runs the git
// CLI, the user's own git, with the environment gitEnv gives it.

// EnvWorktreeRoot names a directory for worktrees instead of the
// repository's git directory: a worktree then goes to
// <root>/<repository name>-<8 hex of its git directory>/<worker id>.
const EnvWorktreeRoot = "AGENT_FLEET_WORKTREE_ROOT"

// DefaultBranchPrefix starts the branch of a worker spawned with
// --worktree and no branch: agent-fleet/<worker id>.
const DefaultBranchPrefix = "agent-fleet/"

// Worktree is a worker's git worktree as the registry records it. The
// registry keeps it in a table of its own, by incarnation, for as long
// as the worktree is agent-fleet's to remove: a worktree kept for its
// uncommitted or unmerged work outlives its worker's record.
type Worktree struct {
	ID, RunID string
	// Path is the worktree's directory (absolute). The worker's cwd is
	// Path, or the same subdirectory of it as the spawn's cwd was of the
	// repository.
	Path string
	// Repository is the top-level directory of the checkout the worktree
	// was made from; CommonDir is the git directory all its worktrees
	// share (absolute).
	Repository, CommonDir string
	// Branch is the branch checked out in it (a short name such as
	// agent-fleet/w1). CreatedBranch: the spawn created it, so a removal
	// deletes it once it is merged (a branch that existed before is never
	// deleted).
	Branch        string
	CreatedBranch bool
	// BaseBranch is the branch the repository's HEAD was on at the spawn
	// ("" when detached) and BaseCommit the commit the worktree started
	// from (40 hex). BaseDirtyFiles is how many files the checkout had
	// uncommitted then: they are not in the worktree.
	BaseBranch, BaseCommit string
	BaseDirtyFiles         int
	CreatedAt              time.Time
	// EndHead and EndStatus are what the worktree held when its worker
	// ended (a stop, or its command's end): HEAD's commit and the lines of
	// `git status --porcelain`. EndedAt is when they were read (zero: not
	// yet).
	EndHead   string
	EndStatus []string
	EndedAt   time.Time
}

// Clone returns a deep copy of wt.
func (wt *Worktree) Clone() *Worktree {
	if wt == nil {
		return nil
	}
	c := *wt
	c.EndStatus = cloneStrings(wt.EndStatus)
	return &c
}

// WorktreeState is what a worktree holds now, read from git.
type WorktreeState struct {
	// Head is HEAD's commit; Branch the branch checked out ("" when
	// detached).
	Head, Branch string
	// Against is what Ahead and Behind count from: the base branch, or
	// the base commit when there is none (any more).
	Against       string
	Ahead, Behind int
	// DirtyFiles counts the entries of `git status --porcelain`: changed,
	// staged and untracked files (ignored ones not).
	DirtyFiles int
	// Missing: the worktree's directory is gone.
	Missing bool
	// Error says what git could not tell ("" when it told everything).
	Error string
}

// WorktreeOutcome is what forget, prune or cleanup did with a worktree.
type WorktreeOutcome struct {
	ID, RunID, Path, Branch string
	// Removed: the worktree is gone (removed now, or found gone); its
	// record too. BranchDeleted: its branch too (created by the spawn and
	// merged).
	Removed, BranchDeleted bool
	// Kept says why the worktree stays ("" when removed, or in a preview
	// when it would be): uncommitted files, commits neither merged nor
	// pushed, a live worker, a lock.
	Kept string
	// Error is a removal git refused or a check that failed; the
	// worktree stays.
	Error string
}

// gitEnv is the environment of agent-fleet's own git commands: the
// process's without any GIT_* variable (a GIT_DIR or GIT_INDEX_FILE of a
// hook the caller runs in would send them elsewhere), in the C locale
// (git's messages are matched), never prompting, and without the
// optional index refresh of `git status`, whose index.lock would make a
// worker's own git commands beside it fail.
func gitEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "GIT_") || k == "LC_ALL" || k == "LANGUAGE" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C", "GIT_TERMINAL_PROMPT=0", "GIT_OPTIONAL_LOCKS=0")
}

// gitTimeout bounds one git command (a hang guard: a worktree checkout of
// a large repository takes seconds).
const gitTimeout = 5 * time.Minute

// gitError is a git command that failed: its arguments, exit status and
// what it said on stderr. It wraps ErrGit.
type gitError struct {
	args   []string
	status int
	stderr string
}

func (e *gitError) Error() string {
	msg := e.stderr
	if msg == "" {
		msg = "exit status " + strconv.Itoa(e.status)
	}
	return "git " + strings.Join(e.args, " ") + ": " + msg
}

func (e *gitError) Unwrap() error { return ErrGit }

// git runs git in dir and returns its stdout.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, gitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	cmd.Env = gitEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), nil
	case errors.Is(err, exec.ErrNotFound):
		return "", fmt.Errorf("%w: git is not on PATH (worktrees need it)", ErrCommandNotFound)
	case errors.As(err, &ee):
		return stdout.String(), &gitError{args: args, status: ee.ExitCode(), stderr: strings.TrimSpace(stderr.String())}
	}
	return "", fmt.Errorf("%w: git %s: %w", ErrGit, strings.Join(args, " "), err)
}

// gitExit is the exit status of a failed git command (-1: it did not
// fail, or did not run).
func gitExit(err error) int {
	var ge *gitError
	if errors.As(err, &ge) {
		return ge.status
	}
	return -1
}

// gitQuiet runs a query git answers with exit status 1 for "no" (rev-parse
// --verify --quiet, symbolic-ref --quiet, merge-base --is-ancestor): ok
// false then, with no error.
func gitQuiet(ctx context.Context, dir string, args ...string) (out string, ok bool, err error) {
	out, err = git(ctx, dir, args...)
	if gitExit(err) == 1 {
		return "", false, nil
	}
	return strings.TrimSpace(out), err == nil, err
}

// worktreePlan is a worktree to make, checked.
type worktreePlan struct {
	wt Worktree
	// cwd is the worker's working directory in it.
	cwd          string
	branchExists bool
}

// planWorktree checks that a worktree for worker id can be made from the
// repository dir is in, on branch ("" = agent-fleet/<id>), and says where
// it goes. root is EnvWorktreeRoot's value ("" = inside the repository's
// git directory).
func planWorktree(ctx context.Context, dir, root, id, branch string) (*worktreePlan, error) {
	inside, err := git(ctx, dir, "rev-parse", "--is-inside-work-tree")
	if err != nil || strings.TrimSpace(inside) != "true" {
		if errors.Is(err, ErrCommandNotFound) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s is not in a git work tree (--worktree makes one from a repository's checkout)", ErrNotRepository, dir)
	}
	out, err := git(ctx, dir, "rev-parse", "--path-format=absolute", "--show-toplevel", "--git-common-dir", "--show-prefix")
	if err != nil {
		return nil, err
	}
	lines := strings.Split(out, "\n")
	if len(lines) < 3 {
		return nil, fmt.Errorf("%w: git rev-parse said %q", ErrGit, out)
	}
	p := &worktreePlan{wt: Worktree{Repository: lines[0], CommonDir: filepath.Clean(lines[1])}}
	prefix := lines[2]
	head, ok, err := gitQuiet(ctx, dir, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: %s has no commit yet to branch from; commit something first", ErrNotRepository, p.wt.Repository)
	}
	p.wt.BaseCommit = head
	if p.wt.BaseBranch, _, err = gitQuiet(ctx, dir, "symbolic-ref", "--quiet", "--short", "HEAD"); err != nil {
		return nil, err
	}
	if status, err := git(ctx, p.wt.Repository, "status", "--porcelain=v1", "-z", "--untracked-files=normal"); err == nil {
		p.wt.BaseDirtyFiles = len(porcelainEntries(status))
	}

	defaulted := branch == ""
	if defaulted {
		branch = DefaultBranchPrefix + id
	}
	// A branch spelled as its full ref is that branch; HEAD, @ and other
	// refs name no branch (git would make one named so, or fail raw).
	branch = strings.TrimPrefix(branch, "refs/heads/")
	if strings.HasPrefix(branch, "-") || branch == "HEAD" || branch == "@" || strings.HasPrefix(branch, "refs/") {
		return nil, fmt.Errorf("%w: %q is not a branch name (give the branch's short name, such as feature/x)", ErrInvalidRequest, branch)
	}
	if _, err := git(ctx, dir, "check-ref-format", "refs/heads/"+branch); gitExit(err) > 0 {
		return nil, fmt.Errorf("%w: %q is not a valid branch name (git check-ref-format)", ErrInvalidRequest, branch)
	} else if err != nil {
		return nil, err
	}
	p.wt.Branch = branch
	_, p.branchExists, err = gitQuiet(ctx, dir, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch+"^{commit}")
	if err != nil {
		return nil, err
	}
	p.wt.CreatedBranch = !p.branchExists
	if at, err := checkedOutAt(ctx, p.wt.Repository, branch); err != nil {
		return nil, err
	} else if at != "" {
		return p, &branchCheckedOut{branch: branch, path: at}
	}
	if defaulted && p.branchExists {
		return nil, fmt.Errorf("%w: branch %s exists already (an earlier worker's?): continue on it with --worktree=%s, or delete it (git branch -d %s)",
			ErrWorktreeConflict, branch, branch, branch)
	}

	base := filepath.Join(p.wt.CommonDir, "agent-fleet", "worktrees")
	if root != "" {
		if !filepath.IsAbs(root) {
			return nil, fmt.Errorf("%w: %s must be an absolute directory, not %q", ErrInvalidRequest, EnvWorktreeRoot, root)
		}
		sum := sha256.Sum256([]byte(p.wt.CommonDir))
		base = filepath.Join(root, filepath.Base(p.wt.Repository)+"-"+hex.EncodeToString(sum[:4]))
	}
	p.wt.Path = filepath.Join(base, id)
	p.cwd = filepath.Join(p.wt.Path, filepath.FromSlash(prefix))
	return p, nil
}

// branchCheckedOut is planWorktree's refusal of a branch checked out in
// another worktree; Spawn names the live worker it belongs to, if any.
type branchCheckedOut struct {
	branch, path string
	worker       string // the live worker working there, if one is
}

func (e *branchCheckedOut) Error() string {
	if e.worker != "" {
		return fmt.Sprintf("branch %s is checked out by live worker %s at %s; pick another branch, or stop %s first", e.branch, e.worker, e.path, e.worker)
	}
	return fmt.Sprintf("branch %s is checked out at %s; git checks a branch out in one worktree at a time: pick another branch", e.branch, e.path)
}

func (e *branchCheckedOut) Unwrap() error { return ErrBranchCheckedOut }

// worktreeEntry is one worktree of `git worktree list --porcelain`.
type worktreeEntry struct {
	path, head, branch string // branch: refs/heads/…, "" when detached or bare
	locked             bool
}

// listWorktrees lists the worktrees of the repository dir is in.
func listWorktrees(ctx context.Context, dir string) ([]worktreeEntry, error) {
	out, err := git(ctx, dir, "worktree", "list", "--porcelain", "-z")
	if err != nil {
		return nil, err
	}
	var list []worktreeEntry
	var cur *worktreeEntry
	for _, f := range strings.Split(out, "\x00") {
		key, val, _ := strings.Cut(f, " ")
		switch key {
		case "worktree":
			list = append(list, worktreeEntry{path: val})
			cur = &list[len(list)-1]
		case "HEAD":
			if cur != nil {
				cur.head = val
			}
		case "branch":
			if cur != nil {
				cur.branch = val
			}
		case "locked":
			if cur != nil {
				cur.locked = true
			}
		}
	}
	return list, nil
}

// checkedOutAt is the worktree where branch is checked out ("" = none).
func checkedOutAt(ctx context.Context, dir, branch string) (string, error) {
	list, err := listWorktrees(ctx, dir)
	if err != nil {
		return "", err
	}
	for _, e := range list {
		if e.branch == "refs/heads/"+branch {
			return e.path, nil
		}
	}
	return "", nil
}

// porcelainEntries splits `git status --porcelain=v1 -z` into its
// entries ("XY path"); a rename's or copy's second path belongs to its
// entry.
func porcelainEntries(out string) []string {
	var entries []string
	fields := strings.Split(out, "\x00")
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if len(f) < 4 {
			continue
		}
		if f[0] == 'R' || f[0] == 'C' || f[1] == 'R' || f[1] == 'C' {
			if i+1 < len(fields) {
				f += " <- " + fields[i+1]
			}
			i++
		}
		entries = append(entries, f)
	}
	return entries
}

// addWorktree makes the planned worktree: `git worktree add` on a new
// branch from the base commit, or on the existing branch.
func addWorktree(ctx context.Context, p *worktreePlan) error {
	if err := os.MkdirAll(filepath.Dir(p.wt.Path), 0o755); err != nil {
		return fmt.Errorf("worktree directory: %w", err)
	}
	args := []string{"worktree", "add", "--quiet"}
	if p.branchExists {
		args = append(args, p.wt.Path, p.wt.Branch)
	} else {
		args = append(args, "-b", p.wt.Branch, p.wt.Path, p.wt.BaseCommit)
	}
	_, err := git(ctx, p.wt.Repository, args...)
	var ge *gitError
	if errors.As(err, &ge) {
		switch {
		case strings.Contains(ge.stderr, "already checked out"), strings.Contains(ge.stderr, "is already used by worktree"):
			return fmt.Errorf("%w: %s", ErrBranchCheckedOut, ge.stderr)
		case strings.Contains(ge.stderr, "already exists"):
			return fmt.Errorf("%w: %s", ErrWorktreeConflict, ge.stderr)
		}
	}
	return err
}

// discardFreshWorktree removes a worktree addWorktree made moments ago
// for a spawn that then failed before its worker existed: nothing but the
// checkout is in it. Its branch goes too if the spawn created it and it
// still points at the base commit.
func discardFreshWorktree(ctx context.Context, wt *Worktree) error {
	if _, err := git(ctx, wt.Repository, "worktree", "remove", "--force", wt.Path); err != nil {
		return err
	}
	if wt.CreatedBranch {
		_, err := git(ctx, wt.Repository, "update-ref", "-d", "refs/heads/"+wt.Branch, wt.BaseCommit)
		return err
	}
	return nil
}

// snapshotWorktree reads HEAD and `git status --porcelain` of a worktree.
func snapshotWorktree(ctx context.Context, path string) (head string, status []string, err error) {
	if head, _, err = gitQuiet(ctx, path, "rev-parse", "--verify", "--quiet", "HEAD"); err != nil {
		return "", nil, err
	}
	out, err := git(ctx, path, "status", "--porcelain=v1", "-z", "--untracked-files=all")
	if err != nil {
		return head, nil, err
	}
	return head, porcelainEntries(out), nil
}

// baseRef is what a worktree's work is measured against: its base branch
// while that exists, else its base commit.
func baseRef(ctx context.Context, wt *Worktree) (ref, name string) {
	if wt.BaseBranch != "" {
		if _, ok, _ := gitQuiet(ctx, wt.CommonDir, "rev-parse", "--verify", "--quiet", "refs/heads/"+wt.BaseBranch+"^{commit}"); ok {
			return "refs/heads/" + wt.BaseBranch, wt.BaseBranch
		}
	}
	return wt.BaseCommit, shortCommit(wt.BaseCommit)
}

// shortCommit is a commit's first 12 hex digits.
func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

// InspectWorktree reads what wt holds now: HEAD, branch, how far it is
// ahead of and behind its base, and how many files are dirty.
func InspectWorktree(ctx context.Context, wt *Worktree) *WorktreeState {
	st := &WorktreeState{}
	if _, err := os.Stat(wt.Path); errors.Is(err, os.ErrNotExist) {
		st.Missing = true
		return st
	}
	head, status, err := snapshotWorktree(ctx, wt.Path)
	if err != nil {
		st.Error = err.Error()
		return st
	}
	st.Head, st.DirtyFiles = head, len(status)
	st.Branch, _, _ = gitQuiet(ctx, wt.Path, "symbolic-ref", "--quiet", "--short", "HEAD")
	ref, name := baseRef(ctx, wt)
	st.Against = name
	if head == "" {
		return st
	}
	out, err := git(ctx, wt.Path, "rev-list", "--left-right", "--count", ref+"..."+head)
	if err != nil {
		st.Error = err.Error()
		return st
	}
	if f := strings.Fields(out); len(f) == 2 {
		st.Behind, _ = strconv.Atoi(f[0])
		st.Ahead, _ = strconv.Atoi(f[1])
	}
	return st
}

// safeToRemove says why wt must be kept ("" when nothing would be lost
// by removing it): uncommitted files, or commits neither merged into its
// base branch nor on any remote-tracking branch (pushed), or a lock.
func safeToRemove(ctx context.Context, wt *Worktree) (string, error) {
	list, err := listWorktrees(ctx, wt.CommonDir)
	if err != nil {
		return "", err
	}
	for _, e := range list {
		if e.path == wt.Path && e.locked {
			return "it is locked (git worktree unlock " + wt.Path + ")", nil
		}
	}
	head, status, err := snapshotWorktree(ctx, wt.Path)
	if err != nil {
		return "", err
	}
	if len(status) > 0 {
		return Plural(len(status), "uncommitted file") + " (commit or discard them)", nil
	}
	if head == "" {
		return "", nil
	}
	ref, name := baseRef(ctx, wt)
	if _, merged, err := gitQuiet(ctx, wt.CommonDir, "merge-base", "--is-ancestor", head, ref); err != nil || merged {
		return "", err
	}
	pushed, err := git(ctx, wt.CommonDir, "for-each-ref", "--count=1", "--contains", head, "refs/remotes/")
	if err != nil || strings.TrimSpace(pushed) != "" {
		return "", err
	}
	// Counted as neither merged nor on a remote-tracking branch: some of
	// them may be pushed already.
	n, _ := git(ctx, wt.CommonDir, "rev-list", "--count", head, "--not", ref, "--remotes")
	return fmt.Sprintf("%s not merged into %s nor pushed", Plural(atoi(strings.TrimSpace(n)), "commit"), name), nil
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// removeWorktree removes wt's directory (git refuses it if it became
// dirty meanwhile: no --force) and its branch if the spawn created it
// and it is merged into the base and checked out nowhere.
func removeWorktree(ctx context.Context, wt *Worktree) (branchDeleted bool, err error) {
	if _, err := os.Stat(wt.Path); errors.Is(err, os.ErrNotExist) {
		if _, err := git(ctx, wt.CommonDir, "worktree", "prune"); err != nil {
			return false, err
		}
	} else if _, err := git(ctx, wt.CommonDir, "worktree", "remove", wt.Path); err != nil {
		return false, err
	}
	if !wt.CreatedBranch {
		return false, nil
	}
	tip, ok, err := gitQuiet(ctx, wt.CommonDir, "rev-parse", "--verify", "--quiet", "refs/heads/"+wt.Branch+"^{commit}")
	if err != nil || !ok {
		return false, err
	}
	ref, _ := baseRef(ctx, wt)
	if _, merged, err := gitQuiet(ctx, wt.CommonDir, "merge-base", "--is-ancestor", tip, ref); err != nil || !merged {
		return false, err
	}
	if at, err := checkedOutAt(ctx, wt.CommonDir, wt.Branch); err != nil || at != "" {
		return false, err
	}
	// The expected old value: a commit made since the check keeps the branch.
	if _, err := git(ctx, wt.CommonDir, "update-ref", "-d", "refs/heads/"+wt.Branch, tip); err != nil {
		return false, err
	}
	return true, nil
}

// ---- the fleet's side ----

// worktreeLock serialises this agent directory's worktree changes: a
// removal re-reads its record under it, so it never meets a worktree
// that a spawn made at the same path meanwhile (the spawn records it
// only once its incarnation is reserved).
func (f *Fleet) worktreeLock() (func(), error) {
	if err := intercom.EnsureDir(f.cfg.Paths.OrchestratorDir()); err != nil {
		return nil, err
	}
	return lockFile(filepath.Join(f.cfg.Paths.OrchestratorDir(), "worktrees.lock"))
}

// createWorktree makes the worktree of a spawn from the repository cwd
// is in and returns it with the worker's cwd in it.
func (f *Fleet) createWorktree(ctx context.Context, id, cwd, branch string) (*Worktree, string, error) {
	unlock, err := f.worktreeLock()
	if err != nil {
		return nil, "", err
	}
	defer unlock()
	// An earlier incarnation's worktree in the way is removed when nothing
	// would be lost (as prune would), else it blocks the spawn.
	if prev, err := f.cfg.Registry.Worktrees(ctx, id); err == nil {
		for _, wt := range prev {
			if live, _ := f.cfg.Registry.GetRun(ctx, wt.ID, wt.RunID); live != nil && live.State.Live() {
				continue // Reserve refuses the id
			}
			if out := f.releaseLocked(ctx, wt, true); !out.Removed {
				why := out.Kept
				if why == "" {
					why = out.Error
				}
				return nil, "", fmt.Errorf("%w: the worktree of %s's earlier run %s is kept at %s: %s; then forget it (agent-fleet forget %s --acknowledge), or spawn under another id",
					ErrWorktreeConflict, id, wt.RunID, wt.Path, why, id)
			}
		}
	}
	p, err := planWorktree(ctx, cwd, f.cfg.CallerEnv(EnvWorktreeRoot), id, branch)
	var bc *branchCheckedOut
	if errors.As(err, &bc) {
		if wt, werr := f.cfg.Registry.WorktreeAt(ctx, filepath.Clean(bc.path)); werr == nil {
			if w, _ := f.cfg.Registry.GetRun(ctx, wt.ID, wt.RunID); w != nil && w.State.Live() {
				bc.worker = w.ID
			}
		}
		return nil, "", err
	}
	if err != nil {
		return nil, "", err
	}
	if _, err := os.Lstat(p.wt.Path); err == nil {
		return nil, "", fmt.Errorf("%w: %s exists and is no worktree agent-fleet keeps; move it away or spawn under another id", ErrWorktreeConflict, p.wt.Path)
	}
	if err := addWorktree(ctx, p); err != nil {
		return nil, "", err
	}
	wt := p.wt
	wt.ID = id
	return &wt, p.cwd, nil
}

// recordWorktreeEnd records what the worktree of id+runID holds at its
// worker's end (nothing when it has none).
func recordWorktreeEnd(ctx context.Context, reg *Registry, id, runID string, now time.Time) error {
	wt, err := reg.Worktree(ctx, id, runID)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	head, status, err := snapshotWorktree(ctx, wt.Path)
	if err != nil {
		return err
	}
	return reg.RecordWorktreeEnd(ctx, id, runID, head, status, now)
}

// RecordWorktreeEnd records what the worktree of worker id+runID holds as
// the worker ends — HEAD and `git status --porcelain` — for the worker
// shim, when its command has ended. A worker without a worktree is no
// error.
func RecordWorktreeEnd(ctx context.Context, reg *Registry, id, runID string) error {
	return recordWorktreeEnd(ctx, reg, id, runID, time.Now())
}

// noteWorktreeEnd is recordWorktreeEnd for a worker the fleet saw end;
// a failure is logged (the worktree itself is untouched).
func (f *Fleet) noteWorktreeEnd(ctx context.Context, w *Worker) {
	if err := recordWorktreeEnd(context.WithoutCancel(ctx), f.cfg.Registry, w.ID, w.RunID, f.cfg.Now()); err != nil {
		f.log.Warn("could not record the worktree's state at the worker's end", "id", w.ID, "run", w.RunID, "err", err)
	}
}

// releaseWorktree removes wt (with execute; else says whether it would)
// when nothing would be lost: its worker has ended, it has no
// uncommitted files, and its commits are merged into its base branch or
// pushed. Otherwise it stays, and the outcome says why.
func (f *Fleet) releaseWorktree(ctx context.Context, wt *Worktree, execute bool) WorktreeOutcome {
	unlock, err := f.worktreeLock()
	if err != nil {
		return WorktreeOutcome{ID: wt.ID, RunID: wt.RunID, Path: wt.Path, Branch: wt.Branch, Error: err.Error()}
	}
	defer unlock()
	return f.releaseLocked(ctx, wt, execute)
}

// releaseLocked is releaseWorktree under worktreeLock.
func (f *Fleet) releaseLocked(ctx context.Context, wt *Worktree, execute bool) WorktreeOutcome {
	out := WorktreeOutcome{ID: wt.ID, RunID: wt.RunID, Path: wt.Path, Branch: wt.Branch}
	// The record as it is now: another process may have released it.
	cur, err := f.cfg.Registry.Worktree(ctx, wt.ID, wt.RunID)
	switch {
	case errors.Is(err, ErrNotFound):
		out.Removed = true // by another process, meanwhile
		return out
	case err != nil:
		out.Error = err.Error()
		return out
	}
	wt = cur
	if w, err := f.cfg.Registry.GetRun(ctx, wt.ID, wt.RunID); err == nil && w.State.Live() {
		out.Kept = "its worker is live"
		return out
	} else if err != nil && !errors.Is(err, ErrNotFound) {
		out.Error = err.Error()
		return out
	}
	forget := func() {
		if err := f.cfg.Registry.DeleteWorktree(ctx, wt.ID, wt.RunID); err != nil {
			out.Error = err.Error()
		}
	}
	if _, err := os.Stat(wt.CommonDir); errors.Is(err, os.ErrNotExist) {
		out.Removed = execute // the repository is gone, and its worktrees with it
		if execute {
			forget()
		}
		return out
	}
	if _, err := os.Stat(wt.Path); err == nil {
		why, err := safeToRemove(ctx, wt)
		if err != nil {
			out.Error = err.Error()
			return out
		}
		if why != "" {
			out.Kept = why
			return out
		}
	}
	if !execute {
		return out
	}
	deleted, err := removeWorktree(ctx, wt)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	out.Removed, out.BranchDeleted = true, deleted
	forget()
	f.log.Info("worktree removed", "id", wt.ID, "run", wt.RunID, "path", wt.Path, "branchDeleted", deleted)
	return out
}

// releaseWorktrees releases each of wts (releaseWorktree).
func (f *Fleet) releaseWorktrees(ctx context.Context, wts []*Worktree, execute bool) []WorktreeOutcome {
	var out []WorktreeOutcome
	for _, wt := range wts {
		out = append(out, f.releaseWorktree(ctx, wt, execute))
	}
	return out
}

// withWorktrees sets the Worktree of each of ws that has one.
func (f *Fleet) withWorktrees(ctx context.Context, ws ...*Worker) {
	all, err := f.cfg.Registry.Worktrees(ctx, "")
	if err != nil || len(all) == 0 {
		return
	}
	byRun := make(map[string]*Worktree, len(all))
	for _, wt := range all {
		byRun[wt.ID+"/"+wt.RunID] = wt
	}
	for _, w := range ws {
		if w != nil {
			w.Worktree = byRun[w.ID+"/"+w.RunID]
		}
	}
}
