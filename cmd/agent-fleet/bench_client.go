package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// clientLoad drives a broker through the Go client: every session is an
// intercom.Session with its durable outbox (the sender writes each message
// before sending it) and inbox (the receiver makes each batch durable
// before acknowledging it). Latency is one Session.Send call.
type clientLoad struct {
	recorder
	spec    loadSpec
	paths   intercom.Paths
	tag     string
	text    string
	drain   time.Duration // how often receivers consume their inbox
	opened  []*intercom.Session
	openMu  sync.Mutex
	workers sync.WaitGroup
}

func newClientLoad(spec loadSpec, p intercom.Paths) *clientLoad {
	return &clientLoad{spec: spec, paths: p, tag: randomTag(), text: benchText(spec.TextBytes), drain: 100 * time.Millisecond}
}

func (l *clientLoad) open(ctx context.Context, id, scope string) (*intercom.Session, error) {
	s, err := intercom.OpenSession(ctx, intercom.SessionConfig{Paths: l.paths, Identity: intercom.Identity{
		SessionID: id, Name: id, Model: "bench", Cwd: "/bench", Scope: scope,
		RuntimeID: "bench-" + l.tag, PID: os.Getpid(), StartedAt: float64(time.Now().UnixMilli()),
	}})
	if err != nil {
		return nil, fmt.Errorf("open session %s: %w", id, err)
	}
	l.openMu.Lock()
	l.opened = append(l.opened, s)
	l.openMu.Unlock()
	return s, nil
}

func (l *clientLoad) run(ctx context.Context, ready chan<- error) {
	ctx, cancel := context.WithCancel(ctx)
	l.cancel = cancel
	defer cancel()
	defer l.closeAll()
	type pairSessions struct{ from, to *intercom.Session }
	pairs := make([]pairSessions, l.spec.Pairs)
	for p := range pairs {
		scope := fmt.Sprintf("agent-fleet-bench-%s-scope-%d", l.tag, p%max(1, l.spec.Scopes))
		to, err := l.open(ctx, fmt.Sprintf("bench-%s-recv-%d", l.tag, p), scope)
		if err != nil {
			ready <- err
			return
		}
		from, err := l.open(ctx, fmt.Sprintf("bench-%s-send-%d", l.tag, p), scope)
		if err != nil {
			ready <- err
			return
		}
		pairs[p] = pairSessions{from, to}
	}
	ready <- nil
	var consumers sync.WaitGroup
	for _, ps := range pairs {
		consumers.Add(1)
		go func() {
			defer consumers.Done()
			l.consume(ctx, ps.to)
		}()
		l.startSender(ctx, ps.from, ps.to.Client().SessionID())
	}
	<-ctx.Done()
	l.stopping.Store(true)
	l.workers.Wait() // sends in flight finish (each within 10 s)
	consumers.Wait()
}

// consume marks what a receiver got read, as an agent that takes its inbox
// in batches does.
func (l *clientLoad) consume(ctx context.Context, s *intercom.Session) {
	t := time.NewTicker(l.drain)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := s.Pending(ctx, intercom.PendingRequest{MarkRead: true}); err != nil && ctx.Err() == nil {
			l.fail(fmt.Errorf("consume the inbox: %w", err))
			return
		}
	}
}

// startSender runs Window workers that send to `to`, each waiting for a
// token from a pacer when Rate is set.
func (l *clientLoad) startSender(ctx context.Context, s *intercom.Session, to string) {
	var tokens chan struct{}
	if l.spec.Rate > 0 {
		tokens = make(chan struct{}, l.spec.Window)
		interval := time.Duration(float64(time.Second) / l.spec.Rate)
		l.workers.Add(1)
		go func() {
			defer l.workers.Done()
			defer close(tokens)
			next := time.Now()
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(next)):
				}
				next = next.Add(interval)
				select {
				case <-ctx.Done():
					return
				case tokens <- struct{}{}:
				}
			}
		}()
	}
	for range l.spec.Window {
		l.workers.Add(1)
		go func() {
			defer l.workers.Done()
			for {
				if tokens != nil {
					if _, ok := <-tokens; !ok {
						return
					}
				}
				if l.stopping.Load() || ctx.Err() != nil {
					return
				}
				began := time.Now()
				// In-flight sends are not cancelled at the end of the run.
				res, err := s.Send(context.WithoutCancel(ctx), intercom.SendRequest{To: to, Text: l.text})
				switch {
				case err != nil:
					l.fail(fmt.Errorf("send: %w", err))
					return
				case !res.OK:
					l.failed(res.Code)
				default:
					l.record(time.Since(began).Nanoseconds())
				}
			}
		}()
	}
}

// closeAll unregisters every session and removes the inbox and outbox
// files the run created.
func (l *clientLoad) closeAll() {
	l.openMu.Lock()
	defer l.openMu.Unlock()
	for _, s := range l.opened {
		id := s.Client().SessionID()
		_ = s.Close()
		_ = os.Remove(l.paths.Inbox(id))
		_ = os.Remove(l.paths.Outbox(id))
	}
	l.opened = nil
}

// benchClientResult is what `bench client --json` prints.
type benchClientResult struct {
	Broker *brokerTarget `json:"broker"`
	Load   loadView      `json:"load"`
	// Client is the load through the Go client; Raw the same load through
	// raw frames on the same broker just before (absent with --raw=false).
	Client *measurement `json:"client"`
	Raw    *measurement `json:"raw,omitempty"`
	// DurabilityCost is what the client adds to the raw figures.
	DurabilityCost *durabilityCost   `json:"durabilityCost,omitempty"`
	Includes       map[string]string `json:"includes"`
}

// durabilityCost compares the client run with the raw run.
type durabilityCost struct {
	P50AddedMs  float64 `json:"p50AddedMs"`
	P99AddedMs  float64 `json:"p99AddedMs"`
	P50Ratio    float64 `json:"p50Ratio"`
	PerSecRatio float64 `json:"perSecondRatio"`
	// ClientCPUAddedUs is the extra CPU per message in the clients' process.
	ClientCPUAddedUs float64 `json:"clientCpuAddedUs,omitempty"`
}

var benchClientIncludes = map[string]string{
	"client":    "each message is one intercom.Session.Send: compose and validate, write the sender's durable outbox (atomic file write, fsync of file and directory), the send frame, the receiver storing it in its durable inbox (atomic write, fsyncs) before acknowledging, delivered, and the outbox entry removed (another atomic write)",
	"receivers": "receivers take their unread messages every 100 ms and mark them read (one more inbox write per batch), as an agent that consumes its inbox does",
	"raw":       "the same pairs, rate and window through raw v4 frames against the same broker, for comparison (see bench broker)",
}

type benchClientOptions struct {
	loadFlags
	raw bool
}

func newBenchClientCmd(s *streams) *cobra.Command {
	opts := &benchClientOptions{}
	opts.spec.Scopes = 1
	cmd := &cobra.Command{
		Use:   "client [--socket PATH] [--pairs N] [--size BYTES] [--rate MSGS/S] [--window N] [--json]",
		Short: "Send → delivered through the Go client with its durable outbox and inbox, beside raw frames",
		Long: `Measure what agents see: N pairs of intercom sessions through the Go client
that agent-fleet's CLI, MCP server and workers use, with its durable outbox
(every message is written to disk before it is sent) and inbox (every
message is on disk before the receiver acknowledges it). Each sender calls
Send at --rate messages/s (0: back to back) from --window concurrent
callers; receivers mark their inbox read every 100 ms.

Before that, the same load runs through raw frames against the same broker
(--raw=false skips it), so the cost of durability is plain: latency added,
throughput kept, client CPU per message.

Without --socket it starts an agent-fleet broker for the run. With --socket
PATH, PATH must be <agent dir>/intercom/broker.sock: the sessions keep their
inbox and outbox files in that agent directory, and remove them afterwards.`,
		Example: `  agent-fleet bench client
  agent-fleet bench client --rate 0 --window 16 --duration 10s --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.validate(); err != nil {
				return err
			}
			return runBenchClient(cmd.Context(), s, opts)
		},
	}
	opts.registerCommon(cmd.Flags())
	cmd.Flags().BoolVar(&opts.raw, "raw", true, "also run the load through raw frames first, for comparison")
	return cmd
}

// clientPaths is the agent directory whose broker the client sessions use.
func clientPaths(t *brokerTarget) (intercom.Paths, error) {
	if t.Started {
		return t.paths, nil
	}
	dir := filepath.Dir(t.Socket)
	if filepath.Base(t.Socket) != "broker.sock" || filepath.Base(dir) != "intercom" {
		return intercom.Paths{}, &usageError{errors.New("--socket for bench client must be <agent dir>/intercom/broker.sock: the sessions keep their inbox and outbox beside it")}
	}
	return intercom.NewPaths(filepath.Dir(dir)), nil
}

func runBenchClient(ctx context.Context, s *streams, o *benchClientOptions) error {
	// SIGHUP ends the run cleanly. SIGPIPE is not caught: once caught, every
	// write to a socket its peer closed would raise it, and the results are
	// printed only after the broker started for the run is stopped.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGHUP)
	defer stop()
	log := s.Err
	if o.asJSON {
		log = io.Discard
	}
	t, err := openTarget(ctx, &o.loadFlags, log)
	if err != nil {
		return fmt.Errorf("bench client: %w", err)
	}
	defer t.close(log)
	p, err := clientPaths(t)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "bench: %s\n", t.describe())
	res := &benchClientResult{Broker: t, Load: viewOfLoad(&o.loadFlags), Includes: benchClientIncludes}
	if o.raw {
		fmt.Fprintln(log, "bench: raw frames first")
		if res.Raw, err = measure(ctx, newRawLoad(o.spec, t.dial), t.PID, o.plan, log); err != nil {
			return fmt.Errorf("bench client: raw frames: %w", err)
		}
	}
	fmt.Fprintln(log, "bench: through the Go client")
	if res.Client, err = measure(ctx, newClientLoad(o.spec, p), t.PID, o.plan, log); err != nil {
		return fmt.Errorf("bench client: %w", err)
	}
	if res.Raw != nil {
		res.DurabilityCost = compareDurability(res.Raw, res.Client)
	}
	t.close(log)
	if o.asJSON {
		return printJSON(s.Out, res)
	}
	printBenchClient(s.Out, res)
	return nil
}

func compareDurability(raw, client *measurement) *durabilityCost {
	c := &durabilityCost{
		P50AddedMs: round(client.Latency.P50Ms-raw.Latency.P50Ms, 3),
		P99AddedMs: round(client.Latency.P99Ms-raw.Latency.P99Ms, 3),
	}
	if raw.Latency.P50Ms > 0 {
		c.P50Ratio = round(client.Latency.P50Ms/raw.Latency.P50Ms, 2)
	}
	if raw.PerSecond > 0 {
		c.PerSecRatio = round(client.PerSecond/raw.PerSecond, 3)
	}
	if raw.BenchCPU != nil && client.BenchCPU != nil {
		c.ClientCPUAddedUs = round(client.BenchCPU.PerMessageUs-raw.BenchCPU.PerMessageUs, 1)
	}
	return c
}

func printBenchClient(out io.Writer, r *benchClientResult) {
	fmt.Fprintf(out, "Client benchmark: %s, through the Go client (durable outbox and inbox).\n", r.Broker.describe())
	fmt.Fprintf(out, "Rate limit: %s.\n", r.Broker.RateLimit)
	printLoad(out, r.Load)
	if r.Raw != nil {
		fmt.Fprintln(out, "\nRaw v4 frames (no durability):")
		printMeasurement(out, r.Raw)
	}
	fmt.Fprintln(out, "\nGo client, durable outbox and inbox:")
	printMeasurement(out, r.Client)
	if c := r.DurabilityCost; c != nil {
		fmt.Fprintf(out, "\nCost of durability: p50 +%s (%.1f× raw), p99 +%s, throughput %.0f%% of raw",
			fmtMs(c.P50AddedMs), c.P50Ratio, fmtMs(c.P99AddedMs), c.PerSecRatio*100)
		if c.ClientCPUAddedUs != 0 {
			fmt.Fprintf(out, ", client CPU +%.1f µs per message", c.ClientCPUAddedUs)
		}
		fmt.Fprintln(out, ".")
	}
}
