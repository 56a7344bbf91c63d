package fleet

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// The registry's side of worktrees: the worktrees table (migration 2 → 3),
// one row per incarnation whose worktree is still agent-fleet's to remove.

const worktreeColumns = `id, run_id, path, repository, common_dir, branch, created_branch,
	base_branch, base_commit, base_dirty_files, created_at_ms, end_head, end_status, ended_at_ms`

func scanWorktree(s rowScanner) (*Worktree, error) {
	var wt Worktree
	var created, ended, dirty int64
	var status string
	err := s.Scan(&wt.ID, &wt.RunID, &wt.Path, &wt.Repository, &wt.CommonDir, &wt.Branch, &wt.CreatedBranch,
		&wt.BaseBranch, &wt.BaseCommit, &dirty, &created, &wt.EndHead, &status, &ended)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, ErrNotFound
		}
		return nil, classify(err)
	}
	if wt.EndStatus, err = decodeList(status); err != nil {
		return nil, fmt.Errorf("%w: worktree of %q run %s: end_status: %v", ErrCorrupt, wt.ID, wt.RunID, err)
	}
	wt.BaseDirtyFiles, wt.CreatedAt, wt.EndedAt = int(dirty), fromMS(created), fromMS(ended)
	return &wt, nil
}

// PutWorktree records the worktree of incarnation wt.ID+wt.RunID (which
// must be in the run ledger: Reserve puts it there). CreatedAt zero is
// now. ErrConflict when that incarnation or that path has one already.
func (r *Registry) PutWorktree(ctx context.Context, wt *Worktree) error {
	if wt.CreatedAt.IsZero() {
		wt.CreatedAt = r.now().Truncate(time.Millisecond)
	}
	err := r.writeLocked(ctx, func(tx querier) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO worktrees (`+worktreeColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			wt.ID, wt.RunID, wt.Path, wt.Repository, wt.CommonDir, wt.Branch, wt.CreatedBranch,
			wt.BaseBranch, wt.BaseCommit, int64(wt.BaseDirtyFiles), toMS(wt.CreatedAt), wt.EndHead, encodeList(wt.EndStatus), toMS(wt.EndedAt))
		if err = classify(err); errors.Is(err, ErrConflict) {
			return fmt.Errorf("%w: a worktree is recorded for this run or at %s already", ErrConflict, wt.Path)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("record the worktree of %q run %s: %w", wt.ID, wt.RunID, err)
	}
	return nil
}

// Worktree is the recorded worktree of incarnation id+runID; ErrNotFound
// when it has none (any more).
func (r *Registry) Worktree(ctx context.Context, id, runID string) (*Worktree, error) {
	return scanWorktree(r.db.QueryRowContext(ctx, `SELECT `+worktreeColumns+` FROM worktrees WHERE id = ? AND run_id = ?`, id, runID))
}

// WorktreeAt is the recorded worktree at path; ErrNotFound when none is.
func (r *Registry) WorktreeAt(ctx context.Context, path string) (*Worktree, error) {
	return scanWorktree(r.db.QueryRowContext(ctx, `SELECT `+worktreeColumns+` FROM worktrees WHERE path = ?`, path))
}

// Worktrees lists the recorded worktrees: every one, or with id only that
// id's, oldest first.
func (r *Registry) Worktrees(ctx context.Context, id string) ([]*Worktree, error) {
	return r.queryWorktrees(ctx, `SELECT `+worktreeColumns+` FROM worktrees WHERE ? = '' OR id = ? ORDER BY created_at_ms`, id, id)
}

// PrunableWorktrees are the worktrees Prune would leave without a record:
// those of the terminal incarnations that ended before olderThan (of
// manager, "" = every manager), and those whose records are gone already
// (forgotten or pruned while their worktree was kept).
func (r *Registry) PrunableWorktrees(ctx context.Context, olderThan time.Time, manager string) ([]*Worktree, error) {
	cutoff := int64(0)
	if !olderThan.IsZero() {
		cutoff = olderThan.UnixMilli()
	}
	return r.queryWorktrees(ctx, `SELECT `+worktreeColumns+` FROM worktrees t WHERE NOT EXISTS (
			SELECT 1 FROM workers w WHERE w.id = t.id AND w.run_id = t.run_id
		) OR EXISTS (
			SELECT 1 FROM workers w WHERE w.id = t.id AND w.run_id = t.run_id AND w.`+terminalStatesSQL+`
			AND (CASE WHEN w.ended_at_ms != 0 THEN w.ended_at_ms ELSE w.updated_at_ms END) < ?
			AND (? = '' OR w.manager = ?)
		) ORDER BY created_at_ms`, cutoff, manager, manager)
}

func (r *Registry) queryWorktrees(ctx context.Context, q string, args ...any) ([]*Worktree, error) {
	rows, err := r.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []*Worktree
	for rows.Next() {
		wt, err := scanWorktree(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, wt)
	}
	return out, classify(rows.Err())
}

// RecordWorktreeEnd records what the worktree of id+runID held at its
// worker's end: HEAD's commit and `git status --porcelain` lines, at at.
// A run without a worktree is no error.
func (r *Registry) RecordWorktreeEnd(ctx context.Context, id, runID, head string, status []string, at time.Time) error {
	return r.writeLocked(ctx, func(tx querier) error {
		_, err := tx.ExecContext(ctx, `UPDATE worktrees SET end_head = ?, end_status = ?, ended_at_ms = ? WHERE id = ? AND run_id = ?`,
			head, encodeList(status), toMS(at), id, runID)
		return classify(err)
	})
}

// DeleteWorktree forgets the worktree of id+runID (once it was removed, or
// is gone). Deleting one that is not recorded is no error.
func (r *Registry) DeleteWorktree(ctx context.Context, id, runID string) error {
	return r.writeLocked(ctx, func(tx querier) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM worktrees WHERE id = ? AND run_id = ?`, id, runID)
		return classify(err)
	})
}
