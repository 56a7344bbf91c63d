package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
)

// LoadOptions are the load options bench broker and bench client share.
type LoadOptions struct {
	Spec LoadSpec
	Plan MeasurePlan
	// Socket measures the broker listening there instead of starting one;
	// PID is its pid (default: broker.pid beside it, or its local API).
	Socket string
	PID    int
	JSON   bool
	// Sessions registered in all, the pairs' among them (0: just the pairs).
	Sessions int
	// Against is another v4 broker's socket to measure in turns with the
	// broker under test, Rounds times each; AgainstPID is its pid (default
	// as for Socket). Only bench broker compares.
	Against    string
	AgainstPID int
	Rounds     int
	// Awake keeps every CPU (runtime.NumCPU) out of its idle state while
	// the load runs (keepAwake), so that no latency includes waking an
	// idle CPU.
	Awake bool
}

// BrokerLong is the help of `bench broker`.
const BrokerLong = `Drive an intercom broker with raw protocol v4 frames and measure it.

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

--against SOCKET compares: the broker under test (started for the run, or
--socket) and the v4 broker on SOCKET (e.g. the TypeScript reference) take
turns under the same load, --rounds runs each, the first of a round
alternating; it prints every run, each broker's medians and the ratios.
Absolute figures do not carry from one machine to another; ratios measured
in one run do.

--awake keeps every CPU busy while measuring, with one busy loop per CPU at
SCHED_IDLE, the lowest priority, which gives way at once to anything that
wakes. On a VM an idle vCPU is halted and waking it goes through the
hypervisor, which adds tenths of a millisecond to a share of the wake-ups
every message needs, whatever the broker; with no CPU idle, the latency is
the brokers' own. The loops' CPU is counted neither for the broker nor for
the clients.`

// The default load: 4 pairs × 100 msg/s of 256 B text, a few agents
// talking briskly.
const (
	DefaultPairs = 4
	DefaultRate  = 100
	DefaultSize  = 256
)

// Validate refuses a load that cannot run (usage errors naming the flag).
func (o *LoadOptions) Validate() error {
	s := &o.Spec
	switch {
	case s.Pairs < 1 || s.Pairs > 512:
		return factory.Usage(errors.New("--pairs must be between 1 and 512"))
	case s.TextBytes < 0 || s.TextBytes > 256<<10:
		return factory.Usage(errors.New("--size must be between 0 and 262144 bytes (the v4 text limit)"))
	case s.Rate < 0:
		return factory.Usage(errors.New("--rate must not be negative"))
	case s.Window < 1 || s.Window > broker.MaxPendingPerSender:
		return factory.Usage(fmt.Errorf("--window must be between 1 and %d: a v4 broker refuses more pending deliveries per sender", broker.MaxPendingPerSender))
	case o.Sessions != 0 && o.Sessions < 2*s.Pairs:
		return factory.Usage(fmt.Errorf("--sessions must be at least the pairs' %d sessions", 2*s.Pairs))
	case s.Scopes < 1:
		return factory.Usage(errors.New("--scopes must be at least 1"))
	case o.Rounds < 0 || o.Rounds > 100:
		return factory.Usage(errors.New("--rounds must be between 1 and 100"))
	case o.Against == "" && o.AgainstPID != 0:
		return factory.Usage(errors.New("--against-pid needs --against"))
	case s.PresenceEvery < 0 || o.Plan.Warmup < 0 || o.Plan.Duration <= 0 || o.Plan.Messages < 0 || o.Plan.Segment < 0:
		return factory.Usage(errors.New("--presence-interval, --warmup, --messages and --segment must not be negative, --duration must be positive"))
	}
	s.Sessions = max(o.Sessions, 2*s.Pairs)
	if o.Rounds == 0 {
		o.Rounds = 3
	}
	return nil
}

// LoadView is the load as the JSON result reports it.
type LoadView struct {
	Pairs         int     `json:"pairs"`
	TextBytes     int     `json:"textBytes"`
	RatePerSender float64 `json:"ratePerSender"` // 0 = unpaced
	Window        int     `json:"window"`
	Sessions      int     `json:"sessions"`
	Scopes        int     `json:"scopes"`
	PresenceMs    int64   `json:"presenceIntervalMs"`
	WarmupMs      int64   `json:"warmupMs"`
	// AwakeCPUs is how many CPUs --awake kept out of their idle state
	// (absent: none).
	AwakeCPUs int `json:"awakeCpus,omitempty"`
}

func viewOfLoad(o *LoadOptions) LoadView {
	v := LoadView{Pairs: o.Spec.Pairs, TextBytes: o.Spec.TextBytes, RatePerSender: o.Spec.Rate, Window: o.Spec.Window,
		Sessions: o.Spec.Sessions, Scopes: o.Spec.Scopes, PresenceMs: o.Spec.PresenceEvery.Milliseconds(), WarmupMs: o.Plan.Warmup.Milliseconds()}
	if o.Awake {
		v.AwakeCPUs = runtime.NumCPU() // a run whose loops did not start ended with the error
	}
	return v
}

// keepAwake starts keeping every CPU awake where o.Awake asks for it, and
// returns what stops it (never nil).
func (o *LoadOptions) keepAwake(ctx context.Context, log io.Writer) (stop func(), err error) {
	if !o.Awake {
		return func() {}, nil
	}
	n := runtime.NumCPU()
	loops, err := keepAwake(ctx, n)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "bench: keeping %d CPUs out of idle with busy loops at SCHED_IDLE priority\n", n)
	return loops.stop, nil
}

// BrokerResult is what `bench broker --json` prints.
type BrokerResult struct {
	Broker *brokerTarget `json:"broker"`
	Load   LoadView      `json:"load"`
	Driver string        `json:"driver"`
	Result *Measurement  `json:"result"`
	// PresenceUpdates is how many presence frames the sessions sent during
	// the whole run (warm-up included).
	PresenceUpdates int64 `json:"presenceUpdates"`
	// Drift compares the last segment with the first (with --segment).
	Drift *Drift `json:"drift,omitempty"`
	// Includes says what each figure covers.
	Includes map[string]string `json:"includes"`
}

var benchBrokerIncludes = map[string]string{
	"latency":      "send → delivered per message: from just before the sender writes the send frame until it reads the broker's delivered frame (the broker forwarded the message, the receiver acknowledged it)",
	"perSecond":    "messages delivered per second of measured wall time, all pairs together",
	"brokerCpu":    "CPU time of the broker process over the Measurement (its threads' run time from /proc/<pid>/task/*/schedstat, in ns; user+system from /proc/<pid>/stat, 10 ms resolution, where a thread exited meanwhile) divided by the messages delivered",
	"brokerMemory": "the broker's resident memory (VmRSS) at the end, and its peak since it started (VmHWM)",
	"benchCpu":     "CPU time of this process, which runs every client, per delivered message",
	"segments":     "with --segment N: the same figures for every N delivered messages, to show whether they change as history grows",
}

// openTarget starts a broker for the run or finds the --socket one.
func openTarget(ctx context.Context, f *factory.Factory, o *LoadOptions, log io.Writer) (*brokerTarget, error) {
	if o.Socket != "" {
		return externalBrokerTarget(ctx, o.Socket, o.PID, "--socket")
	}
	return startBrokerTarget(ctx, f, o.Spec, log)
}

// RunBroker is `bench broker`: the load o through raw v4 frames against a
// broker, measured, printed to f's stdout.
func RunBroker(ctx context.Context, f *factory.Factory, o *LoadOptions) error {
	// SIGHUP ends the run cleanly. SIGPIPE is not caught: once caught, every
	// write to a socket its peer closed would raise it, and the results are
	// printed only after the broker started for the run is stopped.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGHUP)
	defer stop()
	log := progressLog(f, o.JSON)
	awake, err := o.keepAwake(ctx, log)
	if err != nil {
		return fmt.Errorf("bench broker: %w", err)
	}
	defer awake()
	if o.Against != "" {
		return runComparison(ctx, f, o, log)
	}
	t, err := openTarget(ctx, f, o, log)
	if err != nil {
		return fmt.Errorf("bench broker: %w", err)
	}
	defer t.close(log)
	fmt.Fprintf(log, "bench: %s\n", t.describe())
	load := newRawLoad(o.Spec, t.dial)
	m, err := measure(ctx, load, t.PID, o.Plan, log)
	if err != nil {
		return fmt.Errorf("bench broker: %w", err)
	}
	res := &BrokerResult{Broker: t, Load: viewOfLoad(o), Driver: "raw v4 frames", Result: m,
		PresenceUpdates: load.presences.Load(), Includes: benchBrokerIncludes}
	res.Drift = drift(m)
	t.close(log)
	if o.JSON {
		return output.PrintJSON(f.IO.Out, res)
	}
	printBenchBroker(f.IO.Out, res)
	return nil
}

// Drift is how the last segment of a long run differs from the first, as
// fractions (+0.05: 5% higher), and how much resident memory the second
// half added, in MiB: whether figures stay flat as history grows.
type Drift struct {
	P50              float64  `json:"p50"`
	P99              float64  `json:"p99"`
	BrokerCPU        *float64 `json:"brokerCpuPerMessage,omitempty"`
	SecondHalfRSSMiB *float64 `json:"secondHalfRssGrowthMiB,omitempty"`
}

// drift compares m's segments; nil for fewer than two.
func drift(m *Measurement) *Drift {
	segs := m.Segments
	if len(segs) < 2 {
		return nil
	}
	a, z := segs[0], segs[len(segs)-1]
	change := func(x, y float64) float64 {
		if x == 0 {
			return 0
		}
		return round((y-x)/x, 3)
	}
	d := &Drift{P50: change(a.Latency.P50Ms, z.Latency.P50Ms), P99: change(a.Latency.P99Ms, z.Latency.P99Ms)}
	if a.BrokerCPUPerMessageUs > 0 {
		c := change(a.BrokerCPUPerMessageUs, z.BrokerCPUPerMessageUs)
		d.BrokerCPU = &c
	}
	if mid := segs[(len(segs)-1)/2]; mid.RSSMiB > 0 && len(segs) >= 3 {
		var top float64
		for _, s := range segs[(len(segs)-1)/2:] {
			top = max(top, s.RSSMiB)
		}
		g := round(top-mid.RSSMiB, 1)
		d.SecondHalfRSSMiB = &g
	}
	return d
}

func printBenchBroker(out io.Writer, r *BrokerResult) {
	fmt.Fprintf(out, "Broker benchmark: %s, through %s.\n", r.Broker.describe(), r.Driver)
	fmt.Fprintf(out, "Rate limit: %s.\n", r.Broker.RateLimit)
	printLoad(out, r.Load)
	printMeasurement(out, r.Result)
	if r.PresenceUpdates > 0 {
		fmt.Fprintf(out, "  (%d presence updates sent during the run)\n", r.PresenceUpdates)
	}
	printDrift(out, r.Drift)
}

func printLoad(out io.Writer, l LoadView) {
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
	if l.AwakeCPUs > 0 {
		fmt.Fprintf(out, "CPUs kept out of idle: %d (--awake: busy loops at SCHED_IDLE priority).\n", l.AwakeCPUs)
	}
}

func printMeasurement(out io.Writer, m *Measurement) {
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

func printDrift(out io.Writer, d *Drift) {
	if d == nil {
		return
	}
	fmt.Fprintf(out, "\nLast segment vs first: p50 %+.1f%%, p99 %+.1f%%", d.P50*100, d.P99*100)
	if d.BrokerCPU != nil {
		fmt.Fprintf(out, ", broker CPU/message %+.1f%%", *d.BrokerCPU*100)
	}
	if d.SecondHalfRSSMiB != nil {
		fmt.Fprintf(out, "; the second half added %.1f MiB resident", *d.SecondHalfRSSMiB)
	}
	fmt.Fprintln(out, ".")
}
