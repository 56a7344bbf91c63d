package fleet

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet/harness"
)

// Budget bounds what a coding-agent worker may spend: USD in US dollars as
// its harness reports cost, Tokens in every token its harness reports
// (input, output and both cache figures). Zero is no bound. Its shim starts
// no turn once either is reached (a turn under way is not cut short, so a
// worker may end a little past it).
type Budget struct {
	USD    float64
	Tokens int64
}

// IsZero reports whether b bounds nothing.
func (b Budget) IsZero() bool { return b.USD == 0 && b.Tokens == 0 }

// Spent reports whether t reaches b, and how, for people ("$5.02 of
// $5.00", "1203000 of 1000000 tokens").
func (b Budget) Spent(t harness.UsageTotals) (bool, string) {
	switch {
	case b.USD > 0 && t.CostUSD >= b.USD:
		return true, USD(t.CostUSD) + " of " + USD(b.USD)
	case b.Tokens > 0 && t.Tokens() >= b.Tokens:
		return true, fmt.Sprintf("%d of %d tokens", t.Tokens(), b.Tokens)
	}
	return false, ""
}

// USD is an amount of US dollars for people: "$1.23", and below a cent
// to a hundredth of one, "$0.004" (a budget of $0.001 is not "$0.00").
func USD(usd float64) string {
	if usd > 0 && usd < 0.01 {
		s := strings.TrimRight(fmt.Sprintf("$%.4f", usd), "0")
		return strings.TrimSuffix(s, ".")
	}
	return fmt.Sprintf("$%.2f", usd)
}

// BudgetChange is a change to a worker's budget (spawn's, renew's): a nil
// bound is left as it is. A bound given must be positive.
type BudgetChange struct {
	USD    *float64
	Tokens *int64
}

// IsZero reports whether c changes nothing.
func (c BudgetChange) IsZero() bool { return c.USD == nil && c.Tokens == nil }

// apply sets the bounds c gives on b.
func (c BudgetChange) apply(b Budget) Budget {
	if c.USD != nil {
		b.USD = *c.USD
	}
	if c.Tokens != nil {
		b.Tokens = *c.Tokens
	}
	return b
}

// check refuses a budget for a worker of kind that cannot be kept: on an
// exec worker (it has no turns), a USD bound for a harness that reports no
// cost, a bound that is not a positive, finite amount. Errors wrap
// ErrInvalidRequest.
func (c BudgetChange) check(kind string) error {
	if c.IsZero() {
		return nil
	}
	if !harness.IsKind(kind) {
		return fmt.Errorf("%w: a budget is for the coding-agent kinds (claude, codex, opencode, pi); an exec worker has no turns to count", ErrInvalidRequest)
	}
	if c.USD != nil {
		if v := *c.USD; !(v > 0) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: a budget in US dollars must be a positive amount", ErrInvalidRequest)
		}
		if !harness.ReportsCost(kind) {
			return fmt.Errorf("%w: %s reports no cost, so a budget in US dollars would never be reached; give a budget in tokens", ErrInvalidRequest, kind)
		}
	}
	if c.Tokens != nil && *c.Tokens <= 0 {
		return fmt.Errorf("%w: a budget in tokens must be a positive number", ErrInvalidRequest)
	}
	return nil
}

// TurnUsage is one turn's usage as a worker's shim records it: the turn
// (1-based) of incarnation ID+RunID, when it ended, who managed the worker
// then, and what it consumed.
type TurnUsage struct {
	ID, RunID string
	Turn      int
	EndedAt   time.Time
	Manager   string
	Usage     harness.Usage
}

// RecordTurnUsage adds one turn's usage to incarnation u.ID+u.RunID's
// totals (Worker.Usage) and to the usage history the usage report reads,
// in one transaction. A turn recorded already (same id, run and turn) is
// ErrConflict and changes nothing. Returns the record as stored. Errors:
// ErrInvalidID, ErrNotFound, ErrConflict, ErrBusy.
func (r *Registry) RecordTurnUsage(ctx context.Context, u TurnUsage) (*Worker, error) {
	op := fmt.Sprintf("record the usage of turn %d of worker %q run %s", u.Turn, u.ID, u.RunID)
	if err := ValidID(u.ID); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := ValidRunID(u.RunID); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if u.Turn < 1 {
		return nil, fmt.Errorf("%s: %w: turns count from 1", op, ErrInvalidRecord)
	}
	var out *Worker
	err := r.write(ctx, func(tx querier) error {
		w, err := getRun(ctx, tx, u.ID, u.RunID)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO turn_usage (id, run_id, turn, ended_at_ms, kind, manager, model,
			input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, cost_known)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			u.ID, u.RunID, u.Turn, toMS(u.EndedAt), w.Kind, u.Manager, u.Usage.Model,
			u.Usage.InputTokens, u.Usage.OutputTokens, u.Usage.CacheReadTokens, u.Usage.CacheWriteTokens,
			u.Usage.CostUSD, u.Usage.CostKnown); err != nil {
			return classify(err)
		}
		w.Usage.Add(u.Usage)
		w.UpdatedAt = r.now()
		if err := updateWorker(ctx, tx, w); err != nil {
			return err
		}
		out = roundTrip(w)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return out, nil
}

// The groupings of a usage report.
const (
	UsageByWorker  = "worker"
	UsageByManager = "manager"
	UsageByKind    = "kind"
)

// UsageBy are the groupings UsageReport takes.
var UsageBy = []string{UsageByWorker, UsageByManager, UsageByKind}

// usageKey is the turn_usage column of each grouping.
var usageKey = map[string]string{UsageByWorker: "id", UsageByManager: "manager", UsageByKind: "kind"}

// UsageGroup is the usage of one group of turns: a worker id (every
// incarnation of it), a manager (the turns its workers made while it
// managed them) or a kind. Runs counts the incarnations, Models the models
// the turns named (sorted), First and Last when the first and last turn
// ended. Totals.Model is empty: Models says it.
type UsageGroup struct {
	Key         string
	Runs        int
	Models      []string
	First, Last time.Time
	Totals      harness.UsageTotals
}

// UsageReport is usage summed per group: turns that ended at Since or
// later (zero: every turn recorded), grouped By, costliest first.
type UsageReport struct {
	By     string
	Since  time.Time
	Groups []UsageGroup
	Total  harness.UsageTotals
}

// UsageReport sums the recorded turns' usage (every manager's) that ended
// at since or later, grouped by (UsageBy; "" is UsageByWorker). Turns of
// records since forgotten or pruned are counted: the history keeps them.
// Errors: ErrInvalidRequest (an unknown grouping), ErrBusy.
func (r *Registry) UsageReport(ctx context.Context, since time.Time, by string) (*UsageReport, error) {
	if by == "" {
		by = UsageByWorker
	}
	key, ok := usageKey[by]
	if !ok {
		return nil, fmt.Errorf("usage report: %w: group by %q (one of %s)", ErrInvalidRequest, by, strings.Join(UsageBy, ", "))
	}
	rows, err := r.db.QueryContext(ctx, `SELECT `+key+`, COUNT(*), COUNT(DISTINCT id || '/' || run_id),
		SUM(input_tokens), SUM(output_tokens), SUM(cache_read_tokens), SUM(cache_write_tokens),
		TOTAL(cost_usd), SUM(1 - cost_known), MIN(ended_at_ms), MAX(ended_at_ms),
		COALESCE(GROUP_CONCAT(DISTINCT NULLIF(model, '')), '')
		FROM turn_usage WHERE ended_at_ms >= ? GROUP BY `+key, toMS(since))
	if err != nil {
		return nil, fmt.Errorf("usage report: %w", classify(err))
	}
	defer rows.Close()
	rep := &UsageReport{By: by, Since: since}
	for rows.Next() {
		var g UsageGroup
		var first, last int64
		var models string
		t := &g.Totals
		if err := rows.Scan(&g.Key, &t.Turns, &g.Runs, &t.InputTokens, &t.OutputTokens, &t.CacheReadTokens, &t.CacheWriteTokens,
			&t.CostUSD, &t.UnpricedTurns, &first, &last, &models); err != nil {
			return nil, fmt.Errorf("usage report: %w", classify(err))
		}
		g.First, g.Last = fromMS(first), fromMS(last)
		if models != "" {
			g.Models = strings.Split(models, ",")
			sort.Strings(g.Models)
		}
		rep.Total.Merge(g.Totals)
		rep.Groups = append(rep.Groups, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("usage report: %w", classify(err))
	}
	sort.SliceStable(rep.Groups, func(i, j int) bool {
		a, b := rep.Groups[i].Totals, rep.Groups[j].Totals
		if a.CostUSD != b.CostUSD {
			return a.CostUSD > b.CostUSD
		}
		if a.Tokens() != b.Tokens() {
			return a.Tokens() > b.Tokens()
		}
		return rep.Groups[i].Key < rep.Groups[j].Key
	})
	return rep, nil
}

// Usage is the fleet's usage report: UsageReport of its registry.
func (f *Fleet) Usage(ctx context.Context, since time.Time, by string) (*UsageReport, error) {
	return f.cfg.Registry.UsageReport(ctx, since, by)
}
