package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agent-fleet/agent-fleet/intercom/broker"
)

// Issue 8's targets, at 4 pairs × 100 msg/s of 256-byte text.
const (
	targetP50Ms         = 0.2
	targetP99Ms         = 2
	targetCPUPerMsgUs   = 60
	targetRSSMiB        = 30
	targetUnpacedPerSec = 50000
	targetDrift         = 0.10 // latency and CPU/msg after 1M messages vs the first 100k
	issueLoadPairs      = 4
	issueLoadRate       = 100
	issueLoadText       = 256
)

// loadFlags are the load options bench broker and bench client share.
type loadFlags struct {
	spec     loadSpec
	plan     measurePlan
	socket   string
	pid      int
	asJSON   bool
	sessions int
}

// register adds the load flags of bench broker.
func (o *loadFlags) register(f *pflag.FlagSet) {
	o.registerCommon(f)
	f.IntVar(&o.sessions, "sessions", 0, "sessions registered in all, the pairs' among them (0 = just the pairs); the others only read and publish presence")
	f.IntVar(&o.spec.Scopes, "scopes", 1, "scopes the sessions are spread over, round-robin")
	f.DurationVar(&o.spec.PresenceEvery, "presence-interval", 0, "each session sends a presence update this often (0 = never)")
}

// registerCommon adds the flags bench broker and bench client share.
func (o *loadFlags) registerCommon(f *pflag.FlagSet) {
	f.IntVar(&o.spec.Pairs, "pairs", issueLoadPairs, "sender/receiver session pairs")
	f.IntVar(&o.spec.TextBytes, "size", issueLoadText, "bytes of message text")
	f.Float64Var(&o.spec.Rate, "rate", issueLoadRate, "messages/s each sender offers; 0 = as fast as the window allows (unpaced)")
	f.IntVar(&o.spec.Window, "window", 16, "sends in flight per sender (1–64, the v4 per-sender limit)")
	f.DurationVar(&o.plan.Warmup, "warmup", 2*time.Second, "run this long before measuring")
	f.DurationVar(&o.plan.Duration, "duration", 20*time.Second, "measure this long (ignored with --messages)")
	f.IntVar(&o.plan.Messages, "messages", 0, "measure until this many messages are delivered")
	f.IntVar(&o.plan.Segment, "segment", 0, "also report every this many delivered messages: latency, broker CPU per message, memory")
	f.StringVar(&o.socket, "socket", "", "measure the broker listening on this Unix socket instead of starting one")
	f.IntVar(&o.pid, "pid", 0, "the --socket broker's pid, for CPU and memory (default: broker.pid beside the socket, or its local API)")
	f.BoolVar(&o.asJSON, "json", false, "print the result as JSON")
}

func (o *loadFlags) validate() error {
	s := &o.spec
	switch {
	case s.Pairs < 1 || s.Pairs > 512:
		return &usageError{errors.New("--pairs must be between 1 and 512")}
	case s.TextBytes < 0 || s.TextBytes > 256<<10:
		return &usageError{errors.New("--size must be between 0 and 262144 bytes (the v4 text limit)")}
	case s.Rate < 0:
		return &usageError{errors.New("--rate must not be negative")}
	case s.Window < 1 || s.Window > broker.MaxPendingPerSender:
		return &usageError{fmt.Errorf("--window must be between 1 and %d: a v4 broker refuses more pending deliveries per sender", broker.MaxPendingPerSender)}
	case o.sessions != 0 && o.sessions < 2*s.Pairs:
		return &usageError{fmt.Errorf("--sessions must be at least the pairs' %d sessions", 2*s.Pairs)}
	case s.Scopes < 1:
		return &usageError{errors.New("--scopes must be at least 1")}
	case s.PresenceEvery < 0 || o.plan.Warmup < 0 || o.plan.Duration <= 0 || o.plan.Messages < 0 || o.plan.Segment < 0:
		return &usageError{errors.New("--presence-interval, --warmup, --messages and --segment must not be negative, --duration must be positive")}
	}
	s.Sessions = max(o.sessions, 2*s.Pairs)
	return nil
}

// loadView is the load as the JSON result reports it.
type loadView struct {
	Pairs         int     `json:"pairs"`
	TextBytes     int     `json:"textBytes"`
	RatePerSender float64 `json:"ratePerSender"` // 0 = unpaced
	Window        int     `json:"window"`
	Sessions      int     `json:"sessions"`
	Scopes        int     `json:"scopes"`
	PresenceMs    int64   `json:"presenceIntervalMs"`
	WarmupMs      int64   `json:"warmupMs"`
}

func viewOfLoad(o *loadFlags) loadView {
	return loadView{Pairs: o.spec.Pairs, TextBytes: o.spec.TextBytes, RatePerSender: o.spec.Rate, Window: o.spec.Window,
		Sessions: o.spec.Sessions, Scopes: o.spec.Scopes, PresenceMs: o.spec.PresenceEvery.Milliseconds(), WarmupMs: o.plan.Warmup.Milliseconds()}
}

// benchBrokerResult is what `bench broker --json` prints.
type benchBrokerResult struct {
	Broker *brokerTarget `json:"broker"`
	Load   loadView      `json:"load"`
	Driver string        `json:"driver"`
	Result *measurement  `json:"result"`
	// PresenceUpdates is how many presence frames the sessions sent during
	// the whole run (warm-up included).
	PresenceUpdates int64         `json:"presenceUpdates"`
	Targets         []targetCheck `json:"targets,omitempty"`
	// Includes says what each figure covers.
	Includes map[string]string `json:"includes"`
}

var benchBrokerIncludes = map[string]string{
	"latency":      "send → delivered per message: from just before the sender writes the send frame until it reads the broker's delivered frame (the broker forwarded the message, the receiver acknowledged it)",
	"perSecond":    "messages delivered per second of measured wall time, all pairs together",
	"brokerCpu":    "user+system CPU time of the broker process over the measurement (/proc/<pid>/stat, 10 ms resolution) divided by the messages delivered",
	"brokerMemory": "the broker's resident memory (VmRSS) at the end, and its peak since it started (VmHWM)",
	"benchCpu":     "CPU time of this process, which runs every client, per delivered message",
	"segments":     "with --segment N: the same figures for every N delivered messages, to show whether they change as history grows",
}

func newBenchBrokerCmd(s *streams) *cobra.Command {
	opts := &loadFlags{}
	cmd := &cobra.Command{
		Use:   "broker [--socket PATH] [--pairs N] [--size BYTES] [--rate MSGS/S] [--window N] [--json]",
		Short: "Latency, throughput, CPU and memory of an intercom broker, through raw v4 frames",
		Long: `Drive an intercom broker with raw protocol v4 frames and measure it.

N sender/receiver pairs register; each sender sends messages of --size bytes of
text to its receiver at --rate messages/s (0: as fast as --window sends in
flight allow), and each receiver acknowledges what it gets. The benchmark
reports delivered messages/s, the p50/p90/p99/p99.9 send → delivered latency
and, when it can read the broker's process, the broker's CPU time per
delivered message and its resident memory.

Without --socket it starts an agent-fleet broker for the run in a temporary
directory (rate limit raised only when the load needs more than the v4
default allows) and stops it afterwards. With --socket it measures whatever
v4 broker listens there — another agent-fleet broker, or the TypeScript
reference — and leaves it running; its pid comes from --pid, broker.pid
beside the socket, or agent-fleet's local API.

--sessions, --scopes and --presence-interval add idle sessions that read
everything the broker sends them and publish presence, for a broker at
scale. --messages with --segment shows whether latency, CPU and memory stay
flat as history grows.

Issue 8's targets are checked where the load is theirs: 4 pairs × 100 msg/s
of 256 B (p50 ≤ 0.2 ms, p99 ≤ 2 ms, ≤ 60 µs broker CPU per message, ≤ 30 MiB
resident), unpaced (≥ 50,000 messages/s), and with segments (the last within
10% of the first, memory no longer growing).`,
		Example: `  agent-fleet bench broker
  agent-fleet bench broker --rate 0 --window 64 --duration 10s
  agent-fleet bench broker --sessions 1000 --scopes 10 --presence-interval 10s
  agent-fleet bench broker --rate 2000 --messages 1000000 --segment 100000
  agent-fleet bench broker --socket /tmp/ref/intercom/broker.sock --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.validate(); err != nil {
				return err
			}
			return runBenchBroker(cmd.Context(), s, opts)
		},
	}
	opts.register(cmd.Flags())
	return cmd
}

// openTarget starts a broker for the run or finds the --socket one.
func openTarget(ctx context.Context, o *loadFlags, log io.Writer) (*brokerTarget, error) {
	if o.socket != "" {
		return externalBrokerTarget(ctx, o.socket, o.pid)
	}
	return startBrokerTarget(ctx, o.spec, log)
}

func runBenchBroker(ctx context.Context, s *streams, o *loadFlags) error {
	// SIGHUP ends the run cleanly. SIGPIPE is not caught: once caught, every
	// write to a socket its peer closed would raise it, and the results are
	// printed only after the broker started for the run is stopped.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGHUP)
	defer stop()
	log := s.Err
	if o.asJSON {
		log = io.Discard
	}
	t, err := openTarget(ctx, o, log)
	if err != nil {
		return fmt.Errorf("bench broker: %w", err)
	}
	defer t.close(log)
	fmt.Fprintf(log, "bench: %s\n", t.describe())
	load := newRawLoad(o.spec, t.dial)
	m, err := measure(ctx, load, t.PID, o.plan, log)
	if err != nil {
		return fmt.Errorf("bench broker: %w", err)
	}
	res := &benchBrokerResult{Broker: t, Load: viewOfLoad(o), Driver: "raw v4 frames", Result: m,
		PresenceUpdates: load.presences.Load(), Includes: benchBrokerIncludes}
	res.Targets = checkTargets(o, m)
	t.close(log)
	if o.asJSON {
		return printJSON(s.Out, res)
	}
	printBenchBroker(s.Out, res)
	return nil
}

// checkTargets compares m with issue 8's targets that apply to its load.
func checkTargets(o *loadFlags, m *measurement) []targetCheck {
	var out []targetCheck
	add := func(name, limit string, value float64, unit string, met bool) {
		out = append(out, targetCheck{Name: name, Limit: limit, Value: value, Unit: unit, Met: met})
	}
	sp := o.spec
	if sp.Pairs == issueLoadPairs && sp.Rate == issueLoadRate && sp.TextBytes == issueLoadText {
		add("p50 send → delivered", "≤ 0.2 ms", m.Latency.P50Ms, "ms", m.Latency.P50Ms <= targetP50Ms)
		add("p99 send → delivered", "≤ 2 ms", m.Latency.P99Ms, "ms", m.Latency.P99Ms <= targetP99Ms)
		if m.BrokerCPU != nil {
			add("broker CPU per message", "≤ 60 µs", m.BrokerCPU.PerMessageUs, "µs", m.BrokerCPU.PerMessageUs <= targetCPUPerMsgUs)
		}
		if m.BrokerMemory != nil {
			add("broker resident memory", "≤ 30 MiB", m.BrokerMemory.RSSMiB, "MiB", m.BrokerMemory.RSSMiB <= targetRSSMiB)
		}
	}
	if sp.Rate == 0 {
		add("unpaced delivered messages/s", "≥ 50,000", m.PerSecond, "msgs/s", m.PerSecond >= targetUnpacedPerSec)
	}
	if segs := m.Segments; len(segs) >= 2 {
		a, z := segs[0], segs[len(segs)-1]
		drift := func(x, y float64) float64 {
			if x == 0 {
				return 0
			}
			return round((y-x)/x, 3)
		}
		d50, d99 := drift(a.Latency.P50Ms, z.Latency.P50Ms), drift(a.Latency.P99Ms, z.Latency.P99Ms)
		add("p50 change, last segment vs first", "≤ +10%", d50, "ratio", d50 <= targetDrift)
		add("p99 change, last segment vs first", "≤ +10%", d99, "ratio", d99 <= targetDrift)
		if a.BrokerCPUPerMessageUs > 0 {
			dc := drift(a.BrokerCPUPerMessageUs, z.BrokerCPUPerMessageUs)
			add("broker CPU/message change, last segment vs first", "≤ +10%", dc, "ratio", dc <= targetDrift)
		}
		if mid := segs[(len(segs)-1)/2]; mid.RSSMiB > 0 && len(segs) >= 3 {
			// Memory has stopped growing when the second half adds no
			// more than the larger of 1 MiB and 5%.
			var top float64
			for _, s := range segs[(len(segs)-1)/2:] {
				top = max(top, s.RSSMiB)
			}
			growth := round(top-mid.RSSMiB, 1)
			add("broker RSS growth over the second half", "≤ max(1 MiB, 5%)", growth, "MiB", growth <= max(1, 0.05*mid.RSSMiB))
		}
	}
	return out
}

func printBenchBroker(out io.Writer, r *benchBrokerResult) {
	fmt.Fprintf(out, "Broker benchmark: %s, through %s.\n", r.Broker.describe(), r.Driver)
	fmt.Fprintf(out, "Rate limit: %s.\n", r.Broker.RateLimit)
	printLoad(out, r.Load)
	printMeasurement(out, r.Result)
	if r.PresenceUpdates > 0 {
		fmt.Fprintf(out, "  (%d presence updates sent during the run)\n", r.PresenceUpdates)
	}
	printTargets(out, r.Targets)
}

func printLoad(out io.Writer, l loadView) {
	rate := fmt.Sprintf("%g msg/s each", l.RatePerSender)
	if l.RatePerSender == 0 {
		rate = "unpaced"
	}
	fmt.Fprintf(out, "Load: %d pairs, %s, %d B text, window %d", l.Pairs, rate, l.TextBytes, l.Window)
	if l.Sessions > 2*l.Pairs || l.Scopes > 1 {
		fmt.Fprintf(out, "; %d sessions in %d scopes", l.Sessions, l.Scopes)
	}
	if l.PresenceMs > 0 {
		fmt.Fprintf(out, ", presence every %s", time.Duration(l.PresenceMs)*time.Millisecond)
	}
	fmt.Fprintln(out, ".")
}

func printMeasurement(out io.Writer, m *measurement) {
	fmt.Fprintf(out, "Measured %.1f s.\n\n", m.DurationMs/1000)
	tw := tabwriter.NewWriter(out, 0, 2, 2, ' ', 0)
	failed := 0
	for _, n := range m.Failed {
		failed += n
	}
	fmt.Fprintf(tw, "  delivered\t%d messages, %.0f/s", m.Delivered, m.PerSecond)
	if failed > 0 {
		codes := slices.Sorted(maps.Keys(m.Failed))
		fmt.Fprintf(tw, " (%d failed: %s)", failed, strings.Join(codes, ", "))
	}
	fmt.Fprintln(tw)
	l := m.Latency
	fmt.Fprintf(tw, "  send → delivered\tp50 %s  p90 %s  p99 %s  p99.9 %s  max %s\n",
		fmtMs(l.P50Ms), fmtMs(l.P90Ms), fmtMs(l.P99Ms), fmtMs(l.P999Ms), fmtMs(l.MaxMs))
	if c := m.BrokerCPU; c != nil {
		fmt.Fprintf(tw, "  broker CPU\t%.1f µs per message (%.1f%% of one core)\n", c.PerMessageUs, c.CoreShare*100)
	} else {
		fmt.Fprintf(tw, "  broker CPU\tunknown (no broker pid)\n")
	}
	if mm := m.BrokerMemory; mm != nil {
		fmt.Fprintf(tw, "  broker memory\t%.1f MiB resident (peak %.1f MiB)\n", mm.RSSMiB, mm.PeakRSSMiB)
	}
	if c := m.BenchCPU; c != nil {
		fmt.Fprintf(tw, "  bench clients CPU\t%.1f µs per message (%.1f%% of one core)\n", c.PerMessageUs, c.CoreShare*100)
	}
	tw.Flush()
	if len(m.Segments) > 0 {
		fmt.Fprintln(out)
		tw := tabwriter.NewWriter(out, 0, 2, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "segment\tmessages\tmsg/s\tp50\tp99\tp99.9\tbroker µs/msg\tRSS MiB\t")
		for _, s := range m.Segments {
			fmt.Fprintf(tw, "%d\t%d\t%.0f\t%s\t%s\t%s\t%.1f\t%.1f\t\n", s.Index, s.Messages, s.PerSecond,
				fmtMs(s.Latency.P50Ms), fmtMs(s.Latency.P99Ms), fmtMs(s.Latency.P999Ms), s.BrokerCPUPerMessageUs, s.RSSMiB)
		}
		tw.Flush()
	}
}

func printTargets(out io.Writer, ts []targetCheck) {
	if len(ts) == 0 {
		return
	}
	fmt.Fprintln(out, "\nIssue 8 targets at this load:")
	tw := tabwriter.NewWriter(out, 0, 2, 2, ' ', 0)
	for _, t := range ts {
		v := fmt.Sprintf("%g %s", t.Value, t.Unit)
		if t.Unit == "ratio" {
			v = fmt.Sprintf("%+.1f%%", t.Value*100)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", t.Name, t.Limit, v, verdict(t.Met))
	}
	tw.Flush()
}
