package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
)

// Figures from one machine do not carry to another; a ratio measured in
// one run, both brokers under the same load taking turns, does. This is
// `bench broker --against`.

// ComparisonRun is one measured run of a comparison.
type ComparisonRun struct {
	Round int `json:"round"`
	// Broker is "agent-fleet" (the broker under test) or "other" (the
	// --against one).
	Broker          string       `json:"broker"`
	Result          *Measurement `json:"result"`
	PresenceUpdates int64        `json:"presenceUpdates"`
}

// SideFigures are one broker's medians over the rounds. CPU and memory
// are absent when its process could not be read.
type SideFigures struct {
	PerSecond       float64  `json:"perSecond"`
	P50Ms           float64  `json:"p50Ms"`
	P99Ms           float64  `json:"p99Ms"`
	CPUPerMessageUs *float64 `json:"cpuPerMessageUs,omitempty"`
	RSSMiB          *float64 `json:"rssMiB,omitempty"`
}

// ComparisonRatios say how many times agent-fleet's broker is better: the
// other broker's figure over agent-fleet's for latency, CPU and memory
// (above 1: agent-fleet is lower), and agent-fleet's over the other's for
// messages/s (above 1: agent-fleet delivers more). A ratio is absent where
// a figure is zero or unknown.
type ComparisonRatios struct {
	PerSecond     *float64 `json:"perSecond,omitempty"`
	P50           *float64 `json:"p50,omitempty"`
	P99           *float64 `json:"p99,omitempty"`
	CPUPerMessage *float64 `json:"cpuPerMessage,omitempty"`
	RSS           *float64 `json:"rss,omitempty"`
}

// BrokerComparison is what `bench broker --against SOCKET --json` prints.
type BrokerComparison struct {
	Broker  *brokerTarget `json:"broker"`
	Against *brokerTarget `json:"against"`
	Load    LoadView      `json:"load"`
	Driver  string        `json:"driver"`
	// Rounds of one run each; the first broker of a round alternates, so
	// neither always runs on a machine the other has just warmed.
	Rounds   int                     `json:"rounds"`
	Runs     []ComparisonRun         `json:"runs"`
	Medians  map[string]*SideFigures `json:"medians"`
	Ratios   ComparisonRatios        `json:"ratios"`
	Includes map[string]string       `json:"includes"`
}

// runComparison measures the broker under test and the --against one in
// turns under o's load.
func runComparison(ctx context.Context, f *factory.Factory, o *LoadOptions, log io.Writer) error {
	other, err := externalBrokerTarget(ctx, o.Against, o.AgainstPID, "--against")
	if err != nil {
		return fmt.Errorf("bench broker: %w", err)
	}
	ours, err := openTarget(ctx, f, o, log)
	if err != nil {
		return fmt.Errorf("bench broker: %w", err)
	}
	defer ours.close(log)
	if ours.Socket == other.Socket {
		return factory.Usagef("--against names the broker under test itself")
	}
	fmt.Fprintf(log, "bench: %s\nbench: against %s\n", ours.describe(), other.describe())
	res := &BrokerComparison{Broker: ours, Against: other, Load: viewOfLoad(o), Driver: "raw v4 frames",
		Rounds: o.Rounds, Includes: benchBrokerIncludes}
	sides := map[string]*brokerTarget{"agent-fleet": ours, "other": other}
	for round := 1; round <= o.Rounds; round++ {
		order := []string{"agent-fleet", "other"}
		if round%2 == 0 {
			slices.Reverse(order)
		}
		for _, side := range order {
			t := sides[side]
			fmt.Fprintf(log, "bench: round %d of %d, %s\n", round, o.Rounds, side)
			load := newRawLoad(o.Spec, t.dial)
			m, err := measure(ctx, load, t.PID, o.Plan, log)
			if err != nil {
				return fmt.Errorf("bench broker: round %d, %s: %w", round, side, err)
			}
			res.Runs = append(res.Runs, ComparisonRun{Round: round, Broker: side, Result: m, PresenceUpdates: load.presences.Load()})
		}
	}
	ours.close(log)
	res.Medians = map[string]*SideFigures{"agent-fleet": medians(res.Runs, "agent-fleet"), "other": medians(res.Runs, "other")}
	res.Ratios = ratios(res.Medians["agent-fleet"], res.Medians["other"])
	if o.JSON {
		return output.PrintJSON(f.IO.Out, res)
	}
	printComparison(f.IO.Out, res)
	return nil
}

func medians(runs []ComparisonRun, side string) *SideFigures {
	var rate, p50, p99, cpu, rss []float64
	for _, r := range runs {
		if r.Broker != side {
			continue
		}
		m := r.Result
		rate, p50, p99 = append(rate, m.PerSecond), append(p50, m.Latency.P50Ms), append(p99, m.Latency.P99Ms)
		if m.BrokerCPU != nil {
			cpu = append(cpu, m.BrokerCPU.PerMessageUs)
		}
		if m.BrokerMemory != nil {
			rss = append(rss, m.BrokerMemory.RSSMiB)
		}
	}
	s := &SideFigures{PerSecond: median(rate), P50Ms: median(p50), P99Ms: median(p99)}
	if len(cpu) > 0 {
		v := median(cpu)
		s.CPUPerMessageUs = &v
	}
	if len(rss) > 0 {
		v := median(rss)
		s.RSSMiB = &v
	}
	return s
}

// median of vs (the mean of the middle two for an even count); 0 for none.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(vs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return round((s[n/2-1]+s[n/2])/2, 3)
}

func ratios(ours, other *SideFigures) ComparisonRatios {
	div := func(a, b float64) *float64 {
		if a <= 0 || b <= 0 {
			return nil
		}
		v := round(a/b, 2)
		return &v
	}
	opt := func(a, b *float64) *float64 {
		if a == nil || b == nil {
			return nil
		}
		return div(*a, *b)
	}
	return ComparisonRatios{
		PerSecond:     div(ours.PerSecond, other.PerSecond),
		P50:           div(other.P50Ms, ours.P50Ms),
		P99:           div(other.P99Ms, ours.P99Ms),
		CPUPerMessage: opt(other.CPUPerMessageUs, ours.CPUPerMessageUs),
		RSS:           opt(other.RSSMiB, ours.RSSMiB),
	}
}

func printComparison(out io.Writer, r *BrokerComparison) {
	fmt.Fprintf(out, "Broker comparison through %s, %d rounds taking turns:\n", r.Driver, r.Rounds)
	fmt.Fprintf(out, "  agent-fleet: %s\n  other:       %s\n", r.Broker.describe(), r.Against.describe())
	printLoad(out, r.Load)
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "round\tbroker\tmsg/s\tp50\tp99\tp99.9\tbroker µs/msg\tRSS MiB")
	for _, run := range r.Runs {
		m := run.Result
		cpu, rss := "?", "?"
		if m.BrokerCPU != nil {
			cpu = fmt.Sprintf("%.1f", m.BrokerCPU.PerMessageUs)
		}
		if m.BrokerMemory != nil {
			rss = fmt.Sprintf("%.1f", m.BrokerMemory.RSSMiB)
		}
		fmt.Fprintf(tw, "%d\t%s\t%.0f\t%s\t%s\t%s\t%s\t%s\n", run.Round, run.Broker, m.PerSecond,
			fmtMs(m.Latency.P50Ms), fmtMs(m.Latency.P99Ms), fmtMs(m.Latency.P999Ms), cpu, rss)
	}
	tw.Flush()

	fmt.Fprintln(out, "\nMedians, and how many times agent-fleet is better:")
	tw = tabwriter.NewWriter(out, 0, 2, 2, ' ', 0)
	a, o := r.Medians["agent-fleet"], r.Medians["other"]
	ratio := func(v *float64) string {
		if v == nil {
			return "?"
		}
		return fmt.Sprintf("%.2f×", *v)
	}
	opt := func(v *float64, format string) string {
		if v == nil {
			return "?"
		}
		return fmt.Sprintf(format, *v)
	}
	fmt.Fprintln(tw, "  \tagent-fleet\tother\tratio")
	fmt.Fprintf(tw, "  messages/s\t%.0f\t%.0f\t%s (agent-fleet ÷ other)\n", a.PerSecond, o.PerSecond, ratio(r.Ratios.PerSecond))
	fmt.Fprintf(tw, "  p50 send → delivered\t%s\t%s\t%s (other ÷ agent-fleet)\n", fmtMs(a.P50Ms), fmtMs(o.P50Ms), ratio(r.Ratios.P50))
	fmt.Fprintf(tw, "  p99 send → delivered\t%s\t%s\t%s\n", fmtMs(a.P99Ms), fmtMs(o.P99Ms), ratio(r.Ratios.P99))
	fmt.Fprintf(tw, "  broker CPU per message\t%s\t%s\t%s\n", opt(a.CPUPerMessageUs, "%.1f µs"), opt(o.CPUPerMessageUs, "%.1f µs"), ratio(r.Ratios.CPUPerMessage))
	fmt.Fprintf(tw, "  broker resident memory\t%s\t%s\t%s\n", opt(a.RSSMiB, "%.1f MiB"), opt(o.RSSMiB, "%.1f MiB"), ratio(r.Ratios.RSS))
	tw.Flush()
}
