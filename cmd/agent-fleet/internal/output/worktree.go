package output

import (
	"fmt"
	"strings"

	"github.com/agent-fleet/agent-fleet/fleet"
)

// Worktree is a worker's git worktree as its record has it (a worker's
// "worktree" in --json and agent_fleet): where it is, its branch
// (createdBranch: the spawn created it), the repository and the commit it
// started from (baseBranch: the branch HEAD was on, absent when detached;
// baseDirtyFiles: files uncommitted in the repository's checkout then,
// which are not in the worktree), and once the worker ended what it held
// then: endHead, and endStatus, the lines of `git status --porcelain`.
type Worktree struct {
	Path           string   `json:"path"`
	Branch         string   `json:"branch"`
	CreatedBranch  bool     `json:"createdBranch"`
	Repository     string   `json:"repository"`
	BaseBranch     string   `json:"baseBranch,omitempty"`
	BaseCommit     string   `json:"baseCommit"`
	BaseDirtyFiles int      `json:"baseDirtyFiles,omitempty"`
	EndHead        string   `json:"endHead,omitempty"`
	EndStatus      []string `json:"endStatus,omitempty"`
	EndedAt        string   `json:"endedAt,omitempty"`
}

// ViewWorktree is wt's JSON view (nil for none).
func ViewWorktree(wt *fleet.Worktree) *Worktree {
	if wt == nil {
		return nil
	}
	return &Worktree{Path: wt.Path, Branch: wt.Branch, CreatedBranch: wt.CreatedBranch, Repository: wt.Repository,
		BaseBranch: wt.BaseBranch, BaseCommit: wt.BaseCommit, BaseDirtyFiles: wt.BaseDirtyFiles,
		EndHead: wt.EndHead, EndStatus: wt.EndStatus, EndedAt: Stamp(wt.EndedAt)}
}

// WorktreeNow is what a worker's worktree holds now, as status shows it:
// HEAD, the branch checked out (absent when detached), how many commits
// it is ahead of and behind against (the base branch, or the base commit
// without one), how many files are dirty (changed, staged or untracked);
// missing when its directory is gone, error when git could not tell.
type WorktreeNow struct {
	Head       string `json:"head,omitempty"`
	Branch     string `json:"branch,omitempty"`
	Against    string `json:"against,omitempty"`
	Ahead      int    `json:"ahead"`
	Behind     int    `json:"behind"`
	DirtyFiles int    `json:"dirtyFiles"`
	Missing    bool   `json:"missing,omitempty"`
	Error      string `json:"error,omitempty"`
}

func viewWorktreeNow(st *fleet.WorktreeState) *WorktreeNow {
	if st == nil {
		return nil
	}
	return &WorktreeNow{Head: st.Head, Branch: st.Branch, Against: st.Against, Ahead: st.Ahead, Behind: st.Behind,
		DirtyFiles: st.DirtyFiles, Missing: st.Missing, Error: st.Error}
}

// WorktreeOutcome is what forget or prune did with a worktree: removed
// (with its branch when branchDeleted: the spawn created it and it is
// merged), or kept, and why — its uncommitted files, commits neither
// merged nor pushed, a live worker — or the error that kept it.
type WorktreeOutcome struct {
	ID            string `json:"id"`
	RunID         string `json:"runId"`
	Path          string `json:"path"`
	Branch        string `json:"branch"`
	Removed       bool   `json:"removed"`
	BranchDeleted bool   `json:"branchDeleted"`
	Kept          string `json:"kept,omitempty"`
	Error         string `json:"error,omitempty"`
}

func viewOutcomes(os []fleet.WorktreeOutcome) []WorktreeOutcome {
	out := make([]WorktreeOutcome, len(os))
	for i, o := range os {
		out[i] = WorktreeOutcome{ID: o.ID, RunID: o.RunID, Path: o.Path, Branch: o.Branch, Removed: o.Removed,
			BranchDeleted: o.BranchDeleted, Kept: o.Kept, Error: o.Error}
	}
	return out
}

// outcomeText is a line per worktree forget or prune removed or kept.
func outcomeText(os []fleet.WorktreeOutcome) string {
	lines := make([]string, 0, len(os))
	for _, o := range os {
		switch {
		case o.Kept != "":
			lines = append(lines, fmt.Sprintf("Kept the worktree of %s at %s (branch %s): %s.", Inline(o.ID), Inline(o.Path), Inline(o.Branch), Inline(o.Kept)))
		case o.Error != "":
			lines = append(lines, fmt.Sprintf("Kept the worktree of %s at %s (branch %s): %s.", Inline(o.ID), Inline(o.Path), Inline(o.Branch), Inline(o.Error)))
		case o.BranchDeleted:
			lines = append(lines, fmt.Sprintf("Removed the worktree of %s at %s and its merged branch %s.", Inline(o.ID), Inline(o.Path), Inline(o.Branch)))
		default:
			lines = append(lines, fmt.Sprintf("Removed the worktree of %s at %s; its branch %s stays.", Inline(o.ID), Inline(o.Path), Inline(o.Branch)))
		}
	}
	return strings.Join(lines, "\n")
}

// worktreeSpawnNote says where a new worker works.
func worktreeSpawnNote(wt *fleet.Worktree) string {
	from := shortHex(wt.BaseCommit)
	if wt.BaseBranch != "" {
		from = wt.BaseBranch + " at " + from
	}
	how := "existing"
	if wt.CreatedBranch {
		how = "new"
	}
	t := fmt.Sprintf("It works in the worktree %s on the %s branch %s (from %s).", Inline(wt.Path), how, Inline(wt.Branch), Inline(from))
	if wt.BaseDirtyFiles > 0 {
		t += fmt.Sprintf(" %s uncommitted in %s %s not in it.", Plural(wt.BaseDirtyFiles, "file"), Inline(wt.Repository), isAre(wt.BaseDirtyFiles))
	}
	return t
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

// writeWorktree shows a worker's worktree in status: where, its branch
// and how far it is from its base now, and what it held at the end.
func writeWorktree(b *strings.Builder, wt *fleet.Worktree, now *fleet.WorktreeState) {
	if wt == nil {
		return
	}
	fmt.Fprintf(b, "  worktree: %s\n", Inline(wt.Path))
	from := shortHex(wt.BaseCommit)
	if wt.BaseBranch != "" {
		from = Inline(wt.BaseBranch) + " at " + from
	}
	line := fmt.Sprintf("%s (from %s)", Inline(wt.Branch), from)
	switch {
	case now == nil:
	case now.Missing:
		line += "; its directory is gone"
	case now.Error != "":
		line += "; git: " + Inline(now.Error)
	default:
		if now.Branch != wt.Branch {
			line += "; now on " + orDetached(now.Branch)
		}
		line += fmt.Sprintf(": %d ahead of and %d behind %s, %s", now.Ahead, now.Behind, Inline(now.Against), Plural(now.DirtyFiles, "dirty file"))
	}
	fmt.Fprintf(b, "  branch:   %s\n", line)
	if !wt.EndedAt.IsZero() {
		fmt.Fprintf(b, "  at end:   HEAD %s, %s\n", shortHex(wt.EndHead), Plural(len(wt.EndStatus), "uncommitted file"))
	}
}

func orDetached(branch string) string {
	if branch == "" {
		return "a detached HEAD"
	}
	return Inline(branch)
}

// shortHex is a commit's first 12 hex digits.
func shortHex(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}
