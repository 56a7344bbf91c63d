package fleet

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
)

// statements holds a registry's prepared statements by query text. modernc
// SQLite parses a statement in about the time it takes to run it (the
// 37-column INSERT and UPDATE longer), so the fixed statements of the
// write path and of Get are parsed once per connection instead of per use.
// Only fixed query texts are cached: the set stays small.
type statements struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

func newStatements(db *sql.DB) *statements {
	return &statements{db: db, m: map[string]*sql.Stmt{}}
}

// prepared returns the statement for query, preparing it on first use.
func (s *statements) prepared(ctx context.Context, query string) (*sql.Stmt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.m[query]; st != nil {
		return st, nil
	}
	st, err := s.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	s.m[query] = st
	return st, nil
}

// PrepareUpdate prepares the statements of Update (the incarnation's read,
// its UPDATE, and the ended notice an end owes), so that the first Update
// on this Registry parses none: the worker shim prepares them once it is
// READY, and records its workload's end on a stop's path.
func (r *Registry) PrepareUpdate(ctx context.Context) error {
	for _, q := range []string{getRunSQL, updateSQL, oweSQL} {
		if _, err := r.stmts.prepared(ctx, q); err != nil {
			return fmt.Errorf("prepare the registry's update: %w", classify(err))
		}
	}
	return nil
}

// close closes every prepared statement.
func (s *statements) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for q, st := range s.m {
		errs = append(errs, st.Close())
		delete(s.m, q)
	}
	return errors.Join(errs...)
}

// cachedQuerier is a querier whose statements come from statements: in
// transaction tx, or on the database when tx is nil. A statement that
// cannot be prepared runs unprepared, to fail with the same error there.
type cachedQuerier struct {
	s  *statements
	tx *sql.Tx
}

func (q cachedQuerier) stmt(ctx context.Context, query string) *sql.Stmt {
	st, err := q.s.prepared(ctx, query)
	if err != nil {
		return nil
	}
	if q.tx != nil {
		return q.tx.StmtContext(ctx, st)
	}
	return st
}

func (q cachedQuerier) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := q.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	if q.tx != nil {
		return q.tx.QueryRowContext(ctx, query, args...)
	}
	return q.s.db.QueryRowContext(ctx, query, args...)
}

func (q cachedQuerier) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := q.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	if q.tx != nil {
		return q.tx.ExecContext(ctx, query, args...)
	}
	return q.s.db.ExecContext(ctx, query, args...)
}
