package harness

// Usage is what one turn's model calls consumed, as the harness's own output
// reports it. Tokens are counts of the model's tokens: InputTokens is the
// input not read from the provider's prompt cache, CacheReadTokens and
// CacheWriteTokens the input read from and written to it, OutputTokens the
// output, reasoning included. CostUSD is in US dollars, the harness's own
// estimate (not a bill); CostKnown says the harness reported a cost at all
// (Codex reports none: CostUSD is then 0 and means nothing). Model is the
// model that did most of the work, "" when the output does not say.
type Usage struct {
	InputTokens      int64   `json:"inputTokens"`
	OutputTokens     int64   `json:"outputTokens"`
	CacheReadTokens  int64   `json:"cacheReadTokens"`
	CacheWriteTokens int64   `json:"cacheWriteTokens"`
	CostUSD          float64 `json:"costUsd"`
	CostKnown        bool    `json:"costKnown"`
	Model            string  `json:"model,omitempty"`
}

// ReportsCost reports whether kind's harness reports what its turns cost
// (Codex reports tokens only).
func ReportsCost(kind string) bool { return IsKind(kind) && kind != "codex" }

// Tokens is every token u counts: input, output and both cache figures.
func (u Usage) Tokens() int64 {
	return u.InputTokens + u.OutputTokens + u.CacheReadTokens + u.CacheWriteTokens
}

// IsZero reports whether u counts no token and no cost.
func (u Usage) IsZero() bool { return u.Tokens() == 0 && u.CostUSD == 0 }

func (u Usage) plus(v Usage) Usage {
	u.InputTokens += v.InputTokens
	u.OutputTokens += v.OutputTokens
	u.CacheReadTokens += v.CacheReadTokens
	u.CacheWriteTokens += v.CacheWriteTokens
	u.CostUSD += v.CostUSD
	u.CostKnown = u.CostKnown || v.CostKnown
	return u
}

// minus is u less v, false when v has more of something than u (v is not
// an earlier reading of the same running totals).
func (u Usage) minus(v Usage) (Usage, bool) {
	if v.InputTokens > u.InputTokens || v.OutputTokens > u.OutputTokens || v.CacheReadTokens > u.CacheReadTokens ||
		v.CacheWriteTokens > u.CacheWriteTokens || v.CostUSD > u.CostUSD+1e-12 {
		return u, false
	}
	u.InputTokens -= v.InputTokens
	u.OutputTokens -= v.OutputTokens
	u.CacheReadTokens -= v.CacheReadTokens
	u.CacheWriteTokens -= v.CacheWriteTokens
	u.CostUSD = max(0, u.CostUSD-v.CostUSD)
	return u, true
}

// UsageTotals is usage summed over turns: Turns counts the turns added
// (those that consumed something), UnpricedTurns those of them whose
// harness reported no cost (CostUSD leaves them out), Model is the last
// turn's. Units as Usage's.
type UsageTotals struct {
	Turns            int     `json:"turns"`
	InputTokens      int64   `json:"inputTokens"`
	OutputTokens     int64   `json:"outputTokens"`
	CacheReadTokens  int64   `json:"cacheReadTokens"`
	CacheWriteTokens int64   `json:"cacheWriteTokens"`
	CostUSD          float64 `json:"costUsd"`
	UnpricedTurns    int     `json:"unpricedTurns,omitempty"`
	Model            string  `json:"model,omitempty"`
}

// Add counts one turn's usage.
func (t *UsageTotals) Add(u Usage) {
	t.Turns++
	t.InputTokens += u.InputTokens
	t.OutputTokens += u.OutputTokens
	t.CacheReadTokens += u.CacheReadTokens
	t.CacheWriteTokens += u.CacheWriteTokens
	t.CostUSD += u.CostUSD
	if !u.CostKnown {
		t.UnpricedTurns++
	}
	if u.Model != "" {
		t.Model = u.Model
	}
}

// Merge adds the turns of o (another worker's, another run's) to t; the
// model stays t's unless t has none.
func (t *UsageTotals) Merge(o UsageTotals) {
	t.Turns += o.Turns
	t.InputTokens += o.InputTokens
	t.OutputTokens += o.OutputTokens
	t.CacheReadTokens += o.CacheReadTokens
	t.CacheWriteTokens += o.CacheWriteTokens
	t.CostUSD += o.CostUSD
	t.UnpricedTurns += o.UnpricedTurns
	if t.Model == "" {
		t.Model = o.Model
	}
}

// Tokens is every token t counts: input, output and both cache figures.
func (t UsageTotals) Tokens() int64 {
	return t.InputTokens + t.OutputTokens + t.CacheReadTokens + t.CacheWriteTokens
}

// CostKnown reports whether CostUSD covers t's turns: at least one was
// counted and each reported its cost.
func (t UsageTotals) CostKnown() bool { return t.Turns > 0 && t.UnpricedTurns == 0 }

// UsageBaseline is the last running totals a conversation's harness
// reported (TurnResult.UsageCumulative), kept to take the next turn's share
// of the next report.
type UsageBaseline struct {
	Session string `json:"session"`
	Totals  Usage  `json:"totals"`
}

// TurnUsage is the usage of the turn that res reports, given the baseline
// of the conversation it ran in (nil when there is none), and the baseline
// for the next turn; nil usage when the output reported none. A harness that
// reports each turn's own usage is taken as it is. Running totals are taken
// less the baseline of the same conversation; totals below it, or of a
// conversation without one, are a conversation that started counting
// afresh (a resume whose totals were not saved, a new conversation) and are
// the turn's own. A report of nothing at all (a crash's zeros) leaves the
// baseline as it was.
func TurnUsage(res TurnResult, base *UsageBaseline) (*Usage, *UsageBaseline) {
	if res.Usage == nil {
		return nil, base
	}
	u := *res.Usage
	if !res.UsageCumulative {
		return &u, base
	}
	if u.IsZero() {
		return &u, base
	}
	next := &UsageBaseline{Session: res.Session, Totals: u}
	if base != nil && base.Session == res.Session && res.Session != "" {
		if d, ok := u.minus(base.Totals); ok {
			d.CostKnown, d.Model = u.CostKnown, u.Model
			return &d, next
		}
	}
	return &u, next
}
