package bench

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

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// clientLoad drives a broker through the Go client: every session is an
// intercom.Session with its durable outbox (the sender writes each message
// before sending it) and inbox (the receiver makes each batch durable
// before acknowledging it). Latency is one Session.Send call.
type clientLoad struct {
	recorder
	spec    LoadSpec
	paths   intercom.Paths
	tag     string
	text    string
	drain   time.Duration // how often receivers consume their inbox
	opened  []*intercom.Session
	openMu  sync.Mutex
	workers sync.WaitGroup
}

func newClientLoad(spec LoadSpec, p intercom.Paths) *clientLoad {
	return &clientLoad{spec: spec, paths: p, tag: randomTag(), text: benchText(spec.TextBytes), drain: 100 * time.Millisecond}
}

func (l *clientLoad) open(ctx context.Context, id, scope string) (*intercom.Session, error) {
	s, err := intercom.OpenSession(ctx, intercom.SessionConfig{Paths: l.paths, Identity: intercom.Identity{
		SessionID: id, Name: id, Model: "bench", Cwd: "/bench", Scope: scope,
		RuntimeID: "bench-" + l.tag, PID: os.Getpid(), StartedAt: float64(time.Now().UnixMilli()),
	}, Unpaced: true}) // the load's rate is checked against the broker's limit (rateTokensPerSecond)
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

// closeAll unregisters every session and removes the inbox, outbox and
// lock files the run created.
func (l *clientLoad) closeAll() {
	l.openMu.Lock()
	defer l.openMu.Unlock()
	for _, s := range l.opened {
		id := s.Client().SessionID()
		_ = s.Close()
		_ = os.Remove(l.paths.Inbox(id))
		_ = os.Remove(l.paths.Outbox(id))
		_ = os.Remove(l.paths.SessionLock(id))
	}
	l.opened = nil
}

// ClientResult is what `bench client --json` prints.
type ClientResult struct {
	Broker *brokerTarget `json:"broker"`
	Load   LoadView      `json:"load"`
	// Client is the load through the Go client; Raw the same load through
	// raw frames on the same broker just before (absent with --raw=false).
	Client *Measurement `json:"client"`
	Raw    *Measurement `json:"raw,omitempty"`
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

// ClientOptions are bench client's: the load, and whether to run it
// through raw frames first for comparison.
type ClientOptions struct {
	LoadOptions
	Raw bool
}

// clientPaths is the agent directory whose broker the client sessions use.
func clientPaths(t *brokerTarget) (intercom.Paths, error) {
	if t.Started {
		return t.paths, nil
	}
	dir := filepath.Dir(t.Socket)
	if filepath.Base(t.Socket) != "broker.sock" || filepath.Base(dir) != "intercom" {
		return intercom.Paths{}, factory.Usage(errors.New("--socket for bench client must be <agent dir>/intercom/broker.sock: the sessions keep their inbox and outbox beside it"))
	}
	return intercom.NewPaths(filepath.Dir(dir)), nil
}

// RunClient is `bench client`: the load o through the Go client (and raw
// frames first), measured, printed to f's stdout.
func RunClient(ctx context.Context, f *factory.Factory, o *ClientOptions) error {
	// SIGHUP ends the run cleanly. SIGPIPE is not caught: once caught, every
	// write to a socket its peer closed would raise it, and the results are
	// printed only after the broker started for the run is stopped.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGHUP)
	defer stop()
	log := progressLog(f, o.JSON)
	awake, err := o.keepAwake(ctx, log)
	if err != nil {
		return fmt.Errorf("bench client: %w", err)
	}
	defer awake()
	t, err := openTarget(ctx, f, &o.LoadOptions, log)
	if err != nil {
		return fmt.Errorf("bench client: %w", err)
	}
	defer t.close(log)
	p, err := clientPaths(t)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "bench: %s\n", t.describe())
	res := &ClientResult{Broker: t, Load: viewOfLoad(&o.LoadOptions), Includes: benchClientIncludes}
	if o.Raw {
		fmt.Fprintln(log, "bench: raw frames first")
		if res.Raw, err = measure(ctx, newRawLoad(o.Spec, t.dial), t.PID, o.Plan, log); err != nil {
			return fmt.Errorf("bench client: raw frames: %w", err)
		}
	}
	fmt.Fprintln(log, "bench: through the Go client")
	if res.Client, err = measure(ctx, newClientLoad(o.Spec, p), t.PID, o.Plan, log); err != nil {
		return fmt.Errorf("bench client: %w", err)
	}
	if res.Raw != nil {
		res.DurabilityCost = compareDurability(res.Raw, res.Client)
	}
	t.close(log)
	if o.JSON {
		return output.PrintJSON(f.IO.Out, res)
	}
	printBenchClient(f.IO.Out, res)
	return nil
}

func compareDurability(raw, client *Measurement) *durabilityCost {
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

func printBenchClient(out io.Writer, r *ClientResult) {
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
