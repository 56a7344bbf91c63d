package output

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
)

// Usage is what turns consumed, as fleet JSON carries it: turns counted
// (those that consumed something), tokens by kind and their sum (tokens:
// input, output and both cache figures), costUsd the US dollars the
// harnesses reported (omitted when none of the turns reported a cost, as
// Codex's do not), unpricedTurns the turns whose cost is not in it, and
// the last turn's model.
type Usage struct {
	Turns            int      `json:"turns"`
	Tokens           int64    `json:"tokens"`
	InputTokens      int64    `json:"inputTokens"`
	OutputTokens     int64    `json:"outputTokens"`
	CacheReadTokens  int64    `json:"cacheReadTokens"`
	CacheWriteTokens int64    `json:"cacheWriteTokens"`
	CostUSD          *float64 `json:"costUsd,omitempty"`
	UnpricedTurns    int      `json:"unpricedTurns,omitempty"`
	Model            string   `json:"model,omitempty"`
}

// ViewUsage is t's JSON view.
func ViewUsage(t harness.UsageTotals) Usage {
	u := Usage{Turns: t.Turns, Tokens: t.Tokens(), InputTokens: t.InputTokens, OutputTokens: t.OutputTokens,
		CacheReadTokens: t.CacheReadTokens, CacheWriteTokens: t.CacheWriteTokens, UnpricedTurns: t.UnpricedTurns, Model: t.Model}
	if t.Turns > t.UnpricedTurns {
		c := t.CostUSD
		u.CostUSD = &c
	}
	return u
}

// Budget is a worker's budget in fleet JSON: usd in US dollars, tokens a
// count; a bound not set is omitted.
type Budget struct {
	USD    float64 `json:"usd,omitempty"`
	Tokens int64   `json:"tokens,omitempty"`
}

// TokensText is a token count for people: "950", "12.5k", "1.2M".
func TokensText(n int64) string {
	switch {
	case n < 1000:
		return fmt.Sprintf("%d", n)
	case n < 10_000:
		return trimZero(fmt.Sprintf("%.1f", float64(n)/1e3)) + "k"
	case n < 1_000_000:
		return fmt.Sprintf("%.0fk", float64(n)/1e3)
	case n < 10_000_000:
		return trimZero(fmt.Sprintf("%.2f", float64(n)/1e6)) + "M"
	}
	return trimZero(fmt.Sprintf("%.1f", float64(n)/1e6)) + "M"
}

func trimZero(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// CostText is an amount of US dollars for people: "$1.23", "$0.004"
// (fleet.USD).
func CostText(usd float64) string { return fleet.USD(usd) }

// costOf is t's cost for people: "$1.23", "$1.23 + 2 turns without a
// cost", "" when no turn reported one.
func costOf(t harness.UsageTotals) string {
	switch {
	case t.Turns == 0 || t.Turns == t.UnpricedTurns:
		return ""
	case t.UnpricedTurns > 0:
		return fmt.Sprintf("%s + %s without a cost", CostText(t.CostUSD), plural(t.UnpricedTurns, "turn"))
	}
	return CostText(t.CostUSD)
}

// UsageText is a worker's usage on one line: "12 turns, $1.23, 1.2M tokens
// (input 10k, output 50k, cache read 1.1M, cache write 40k), model m".
func UsageText(t harness.UsageTotals) string {
	if t.Turns == 0 {
		return "nothing yet"
	}
	parts := []string{plural(t.Turns, "turn")}
	if c := costOf(t); c != "" {
		parts = append(parts, c)
	} else {
		parts = append(parts, "no cost reported")
	}
	parts = append(parts, fmt.Sprintf("%s tokens (input %s, output %s, cache read %s, cache write %s)", TokensText(t.Tokens()),
		TokensText(t.InputTokens), TokensText(t.OutputTokens), TokensText(t.CacheReadTokens), TokensText(t.CacheWriteTokens)))
	s := strings.Join(parts, ", ")
	if t.Model != "" {
		s += ", model " + Inline(t.Model)
	}
	return s
}

// usageCell is list's USAGE column: "$1.23/$5.00 · 1.2M tok", "1.2M/2M
// tok", "-".
func usageCell(w *fleet.Worker) string {
	t, b := w.Usage, w.Budget
	if t.Turns == 0 && b.IsZero() {
		return "-"
	}
	var parts []string
	if c := costOf(t); c != "" || b.USD > 0 {
		c = CostText(t.CostUSD)
		if b.USD > 0 {
			c += "/" + CostText(b.USD)
		}
		parts = append(parts, c)
	}
	tok := TokensText(t.Tokens())
	if b.Tokens > 0 {
		tok += "/" + TokensText(b.Tokens)
	}
	return strings.Join(append(parts, tok+" tok"), " · ")
}

// budgetText is a worker's budget and what of it is spent, for status:
// "$5.00 ($1.23 spent), 2M tokens (1.2M spent)".
func budgetText(w *fleet.Worker) string {
	var parts []string
	if w.Budget.USD > 0 {
		parts = append(parts, fmt.Sprintf("%s (%s spent)", CostText(w.Budget.USD), CostText(w.Usage.CostUSD)))
	}
	if w.Budget.Tokens > 0 {
		parts = append(parts, fmt.Sprintf("%s tokens (%s spent)", TokensText(w.Budget.Tokens), TokensText(w.Usage.Tokens())))
	}
	s := strings.Join(parts, ", ")
	if spent, _ := w.Budget.Spent(w.Usage); spent {
		s += "; spent: no turn starts until renew raises it"
	}
	return s
}

// pausedState is a paused worker's state for lists: for people "paused:
// rate limit, 4m left" (a table shows spans), for a model "paused: rate
// limit until 2026-12-01T11:07:31Z"; "paused: budget spent"; "" when it is
// not paused.
func pausedState(w *fleet.Worker, s Surface) string {
	switch {
	case !w.State.Live():
		return ""
	case w.StateReason == "rate-limited" && !w.PausedUntil.IsZero():
		if s == Tool {
			return "paused: rate limit until " + toolTime(w.PausedUntil)
		}
		return "paused: rate limit, " + Span(time.Until(w.PausedUntil)) + " left"
	case w.StateReason == "budget-spent":
		return "paused: budget spent"
	}
	return ""
}

// UsageGroup is one group of a usage report in JSON: the group's key (a
// worker id, a manager's session id or a kind), how many incarnations its
// turns ran in, their usage, the models they named, and when the first and
// last of them ended (RFC 3339, UTC).
type UsageGroup struct {
	Key  string `json:"key"`
	Runs int    `json:"runs"`
	Usage
	Models      []string `json:"models,omitempty"`
	FirstTurnAt string   `json:"firstTurnAt"`
	LastTurnAt  string   `json:"lastTurnAt"`
}

// UsageReportJSON is the usage report as `usage --json` prints it and
// agent_fleet usage returns it: the grouping, the start (omitted for all
// turns), the groups costliest first, and the total.
type UsageReportJSON struct {
	By     string       `json:"by"`
	Since  string       `json:"since,omitempty"`
	Groups []UsageGroup `json:"groups"`
	Total  Usage        `json:"total"`
}

// UsageReport is the usage verb's outcome.
type UsageReport struct{ Rep *fleet.UsageReport }

func (r UsageReport) view() UsageReportJSON {
	v := UsageReportJSON{By: r.Rep.By, Since: Stamp(r.Rep.Since), Groups: []UsageGroup{}, Total: ViewUsage(r.Rep.Total)}
	v.Total.Model = ""
	for _, g := range r.Rep.Groups {
		v.Groups = append(v.Groups, UsageGroup{Key: g.Key, Runs: g.Runs, Usage: ViewUsage(g.Totals), Models: g.Models,
			FirstTurnAt: Stamp(g.First), LastTurnAt: Stamp(g.Last)})
	}
	return v
}

// JSON implements Report.
func (r UsageReport) JSON() any { return r.view() }

// Structured implements Report.
func (r UsageReport) Structured() any { return r.view() }

// Text implements Report: a table for people, a line per group for a model.
func (r UsageReport) Text(s Surface) string {
	rep := r.Rep
	since := "since the first turn recorded"
	if !rep.Since.IsZero() {
		since = "since " + HumanWhen(rep.Since, time.Now())
		if s == Tool {
			since = "since " + toolTime(rep.Since)
		}
	}
	if len(rep.Groups) == 0 {
		if rep.Since.IsZero() {
			return "No usage recorded yet."
		}
		return "No usage recorded " + since + "."
	}
	var b strings.Builder
	if s == Tool {
		fmt.Fprintf(&b, "Usage %s, by %s:\n", since, rep.By)
		for _, g := range rep.Groups {
			fmt.Fprintf(&b, "- %s: %s\n", Inline(g.Key), groupLine(g))
		}
		fmt.Fprintf(&b, "Total: %s", groupLine(fleet.UsageGroup{Totals: rep.Total}))
		return b.String()
	}
	fmt.Fprintf(&b, "Usage %s, by %s:\n", since, rep.By)
	tw := tabwriter.NewWriter(&b, 0, 2, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tTURNS\tTOKENS\tINPUT\tOUTPUT\tCACHE READ\tCACHE WRITE\tCOST\tMODELS\n", strings.ToUpper(rep.By))
	row := func(key string, t harness.UsageTotals, models []string) {
		cost := costOf(t)
		if cost == "" {
			cost = "not reported"
		}
		m := Inline(strings.Join(models, ", "))
		if m == "" {
			m = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", key, t.Turns, TokensText(t.Tokens()), TokensText(t.InputTokens),
			TokensText(t.OutputTokens), TokensText(t.CacheReadTokens), TokensText(t.CacheWriteTokens), cost, m)
	}
	for _, g := range rep.Groups {
		row(Inline(g.Key), g.Totals, g.Models)
	}
	if len(rep.Groups) > 1 {
		row("TOTAL", rep.Total, nil)
	}
	tw.Flush()
	return strings.TrimRight(b.String(), "\n")
}

// groupLine is one group's usage for a model.
func groupLine(g fleet.UsageGroup) string {
	t := g.Totals
	s := fmt.Sprintf("%s, %s tokens (input %s, output %s, cache read %s, cache write %s)", plural(t.Turns, "turn"), TokensText(t.Tokens()),
		TokensText(t.InputTokens), TokensText(t.OutputTokens), TokensText(t.CacheReadTokens), TokensText(t.CacheWriteTokens))
	if c := costOf(t); c != "" {
		s += ", " + c
	} else {
		s += ", no cost reported"
	}
	if len(g.Models) > 0 {
		s += "; models " + Inline(strings.Join(g.Models, ", "))
	}
	return s
}
