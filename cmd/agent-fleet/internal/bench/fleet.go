package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
)

// ListAim is what the fleet benchmark holds `list --all` to at its largest
// size: under 50 ms at p50 for 500 workers. Absolute, so it is printed
// beside the ratios to the same run's D-Bus and systemctl references, not
// as a verdict.
const ListAim = 50.0

// Limits of bench fleet's options.
const (
	MaxFleetWorkers  = 1000
	MaxFleetParallel = 64
)

// FleetOptions are bench fleet's.
type FleetOptions struct {
	// Sizes are the fleet sizes measured, ascending: the run grows the
	// fleet to each in turn and measures it there.
	Sizes []int
	// Managers own the workers, round-robin; each is also an intercom
	// session of this process, registered with the run's broker.
	Managers int
	// Parallel is how many spawns are in flight in the concurrent half of
	// each growth step (the other half spawns one at a time).
	Parallel int
	// Samples is how many times each list and status kind is measured at
	// each size (a tenth as many, at least 3, for the process runs and
	// the janitor).
	Samples int
	JSON    bool
	// NoBoot forbids booting a private user manager.
	NoBoot bool
}

// Validate refuses options the benchmark cannot run (usage errors).
func (o *FleetOptions) Validate() error {
	if len(o.Sizes) == 0 {
		return factory.Usagef("--sizes needs at least one fleet size")
	}
	for i, n := range o.Sizes {
		if n < 1 || n > MaxFleetWorkers {
			return factory.Usagef("--sizes: %d is not between 1 and %d", n, MaxFleetWorkers)
		}
		if i > 0 && n <= o.Sizes[i-1] {
			return factory.Usagef("--sizes must grow: %d after %d", n, o.Sizes[i-1])
		}
	}
	switch {
	case o.Managers < 1 || o.Managers > o.Sizes[len(o.Sizes)-1]:
		return factory.Usagef("--managers must be between 1 and the largest size (%d)", o.Sizes[len(o.Sizes)-1])
	case o.Parallel < 1 || o.Parallel > MaxFleetParallel:
		return factory.Usagef("--parallel must be between 1 and %d", MaxFleetParallel)
	case o.Samples < 1 || o.Samples > 1000:
		return factory.Usagef("--samples must be between 1 and 1000")
	}
	return nil
}

// SpawnRate is one way of spawning measured over a growth step.
type SpawnRate struct {
	Workers int `json:"workers"`
	// InFlight is how many spawns ran at once.
	InFlight int `json:"inFlight"`
	// WallMs is from the first spawn's start to the last one's READY
	// (one at a time: the sum of the spawns).
	WallMs    float64 `json:"wallMs"`
	PerSecond float64 `json:"perSecond"`
	// Latency is each spawn until READY.
	Latency Latency `json:"latency"`
}

// Memory is a process's resident memory, in MiB (0 when unreadable).
type Memory struct {
	PID    int     `json:"pid,omitempty"`
	RSSMiB float64 `json:"rssMiB"`
}

// FleetStep is the fleet measured at one size.
type FleetStep struct {
	Workers int `json:"workers"`
	// SpawnSequential and SpawnConcurrent grew the fleet to Workers: half
	// of the new workers one at a time, half Parallel at a time, each as
	// `agent-fleet spawn` runs (open the manager's fleet, spawn, close).
	SpawnSequential SpawnRate `json:"spawnSequential"`
	SpawnConcurrent SpawnRate `json:"spawnConcurrent"`
	// BareStart is the reference of the sequential spawns: as many bare
	// Type=exec units, each started (and stopped again, untimed).
	BareStart Latency `json:"bareStart"`
	// ListMine, ListAll and Status run the verbs as the CLI does,
	// in-process: open the fleet (D-Bus connection, registry, reconcile),
	// verbs.Run, print the text. ListMine is one manager's workers.
	ListMine Latency `json:"listMine"`
	ListAll  Latency `json:"listAll"`
	Status   Latency `json:"status"`
	// ListProcess is `agent-fleet list --all --json` as a process;
	// SystemctlList its reference, `systemctl --user list-units` of the
	// worker units (absent where systemctl cannot reach the manager).
	ListProcess   Latency  `json:"listProcess"`
	SystemctlList *Latency `json:"systemctlList,omitempty"`
	// UnitsList is the D-Bus query list makes: one ListUnits call of the
	// worker units, on an open connection.
	UnitsList Latency `json:"unitsList"`
	// Janitor is `agent-fleet cleanup --execute` passes, in-process, with
	// nothing due (every lease fresh): reconcile, settle, tidy.
	Janitor Latency `json:"janitor"`
	// RegistryBytes is the registry database's size (its pages, in the
	// file or still in the write-ahead log), WALBytes the log file's
	// (SQLite folds it back at 1,000 pages and reuses it), ViewBytes
	// workers.json's.
	RegistryBytes int64 `json:"registryBytes"`
	WALBytes      int64 `json:"walBytes"`
	ViewBytes     int64 `json:"viewBytes"`
	// Broker: its sessions (Workers + Managers), memory, and the CPU time
	// it spent while the step grew and measured the fleet.
	BrokerSessions int     `json:"brokerSessions"`
	Broker         Memory  `json:"broker"`
	BrokerCPUMs    float64 `json:"brokerCpuMs"`
	UserManager    Memory  `json:"userManager"`
	// WorkerPrivateKiB and WorkerTasks are the mean over (up to 50)
	// workers of their processes' private resident memory (RssAnon: the
	// binary's pages are shared) and their tasks (threads, what TasksMax
	// counts).
	WorkerPrivateKiB float64 `json:"workerPrivateKiB"`
	WorkerTasks      float64 `json:"workerTasks"`
}

// Growth compares the largest size with the smallest: for times the
// exponent k of time ∝ workers^k (1 is linear, 0 flat), for memory the
// KiB each added worker cost between consecutive sizes.
type Growth struct {
	From int `json:"fromWorkers"`
	To   int `json:"toWorkers"`
	// Exponents of the p50s.
	Exponents map[string]float64 `json:"exponents"`
	// PerWorkerKiB[k][i] is what step i+1 added over step i, per added
	// worker.
	PerWorkerKiB map[string][]float64 `json:"perWorkerKiB"`
}

// FleetResult is what `bench fleet --json` prints.
type FleetResult struct {
	Sizes          []int    `json:"sizes"`
	Managers       int      `json:"managers"`
	Parallel       int      `json:"parallel"`
	Command        []string `json:"command"`
	Manager        string   `json:"manager"` // "user" or "private"
	SystemdVersion string   `json:"systemdVersion"`
	// ReadyGraceMs is how long each exec worker's command runs before its
	// shim signals READY (AGENT_FLEET_READY_GRACE).
	ReadyGraceMs float64     `json:"readyGraceMs"`
	Steps        []FleetStep `json:"steps"`
	Growth       *Growth     `json:"growth,omitempty"`
	// Teardown stopped every worker, Parallel at a time, each until its
	// cgroup was proven empty.
	Teardown SpawnRate `json:"teardown"`
	Aim      struct {
		ListAllP50Ms float64 `json:"listAllP50Ms"`
		Within       bool    `json:"within"`
	} `json:"aim"`
	Includes     map[string]string `json:"includes"`
	UnitPatterns []string          `json:"unitPatterns"`
}

var fleetIncludes = map[string]string{
	"spawn":       "a spawn of an exec worker as its manager, as agent-fleet spawn runs it in-process: open the fleet (D-Bus connection, registry, reconcile), fleet.Spawn until READY (the command ran for the readiness grace and its session is registered), close (the workers.json view written); half of each step's new workers one at a time, half --parallel at a time",
	"bareStart":   "a bare Type=exec transient unit running the same command, as many as the step's one-at-a-time spawns, each timed until its start job is done (and stopped again, untimed)",
	"list":        "the CLI's code path in-process: open the fleet (D-Bus connection, registry, reconcile), verbs.Run list (registry query, one ListUnits of the worker units, settle), the text table; mine = one manager's workers, all = --all",
	"status":      "the same for status of a random worker: its record, its unit's properties, its cgroup's processes",
	"listProcess": "agent-fleet list --all --json run as a process, beside systemctl --user list-units of the worker units (the reference)",
	"unitsList":   "one ListUnits D-Bus call of the worker units on an open connection: the query list makes",
	"janitor":     "agent-fleet cleanup --execute in-process with nothing due: reconcile, settle of every live worker, log and exit-record tidying",
	"memory":      "resident memory: the broker, the user manager, and per worker the private memory (RssAnon) of its shim and command",
}

// RunFleet is `bench fleet`: grow a fleet of exec workers owned by
// opts.Managers managers to each of opts.Sizes, measure it at each, and
// print the figures to f's stdout. Everything it started is stopped and
// checked by name at the end, also after a failure or Ctrl-C.
func RunFleet(ctx context.Context, f *factory.Factory, opts *FleetOptions) (err error) {
	ctx, stop := factory.UntilHangup(ctx)
	defer stop()
	log := progressLog(f, opts.JSON)
	sb, err := f.NewSandbox("agent-fleet-bench-")
	if err != nil {
		return fmt.Errorf("bench fleet: %w", err)
	}
	b := &fleetBench{f: f, sb: sb, opts: opts, log: log, tag: randomTag()}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout(len(sb.Workers)))
		defer cancel()
		err = errors.Join(err, b.teardown(cctx))
		for _, line := range sb.Close(cctx) {
			fmt.Fprintln(log, "bench fleet:", line)
		}
		err = errors.Join(err, sb.CloseErr)
		if err == nil && b.res != nil {
			err = b.print()
		}
	}()
	if err := sb.FindManager(ctx, !opts.NoBoot, "bench"); err != nil {
		return err
	}
	if err := sb.Unavailable(); err != nil {
		return err
	}
	return b.run(ctx)
}

type fleetBench struct {
	f    *factory.Factory
	sb   *factory.Sandbox
	opts *FleetOptions
	log  io.Writer
	tag  string

	managers []string
	sessions []*intercom.Session
	workers  []*fleet.Worker // spawned, in order
	res      *FleetResult    // set once the run measured everything
}

func (b *fleetBench) run(ctx context.Context) error {
	sb, opts := b.sb, b.opts
	res := &FleetResult{Sizes: opts.Sizes, Managers: opts.Managers, Parallel: opts.Parallel, Manager: "user",
		SystemdVersion: sb.Probe.Version.Raw, Includes: fleetIncludes}
	if sb.Private != nil {
		res.Manager = "private"
		fmt.Fprintf(b.log, "bench fleet: no user manager is reachable; booted a private one (pid %d)\n", sb.Private.PID)
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return fmt.Errorf("bench fleet: %w", err)
	}
	if sleep, err = filepath.Abs(sleep); err != nil {
		return err
	}
	res.Command = []string{sleep, benchSleep}
	res.UnitPatterns = []string{fleet.WorkerUnitName("fleet-"+b.tag+"-*", "*"), "agent-fleet-bench-" + b.tag + "-*.service"}
	sb.BrokerArgs = []string{"--max-sessions", strconv.Itoa(max(broker.DefaultMaxSessions, opts.Sizes[len(opts.Sizes)-1]+opts.Managers+16))}
	if err := sb.EnsureBroker(ctx); err != nil {
		return fmt.Errorf("bench fleet: start the intercom broker: %w", err)
	}
	fe, err := sb.OpenFleet(ctx) // the janitor's caller
	if err != nil {
		return err
	}
	res.ReadyGraceMs = float64(fe.Fleet.ReadyGrace()) / float64(time.Millisecond)

	fmt.Fprintf(b.log, "bench fleet: %d managers join the broker\n", opts.Managers)
	for i := range opts.Managers {
		id := fmt.Sprintf("fleet-%s-m%02d", b.tag, i)
		b.managers = append(b.managers, id)
		ident, err := intercom.ResolveIdentity(intercom.IdentityOptions{Kind: intercom.Worker, WorkerID: id, Cwd: sb.Paths.AgentDir})
		if err != nil {
			return err
		}
		s, err := sb.OpenSession(ctx, ident)
		if err != nil {
			return fmt.Errorf("bench fleet: manager session %s: %w", id, err)
		}
		b.sessions = append(b.sessions, s)
	}
	api := &intercom.LocalAPIClient{Path: sb.Paths.LocalAPISocket()}
	warm, _, err := b.spawnOne(ctx, res, -1)
	if err != nil {
		return err
	}
	if _, err := sb.Stop(ctx, warm.ID); err != nil {
		return fmt.Errorf("bench fleet: %w", err)
	}

	for _, size := range opts.Sizes {
		st := FleetStep{Workers: size}
		cpu0 := brokerCPU(ctx, api)
		if err := b.grow(ctx, res, &st, size); err != nil {
			return err
		}
		fmt.Fprintf(b.log, "bench fleet: %d workers: measuring\n", size)
		if err := b.measure(ctx, &st); err != nil {
			return err
		}
		if stats, err := api.Stats(ctx); err == nil {
			st.BrokerSessions = stats.Sessions
			st.Broker = memoryOf(stats.PID)
			if cpu0 >= 0 {
				st.BrokerCPUMs = float64(brokerCPU(ctx, api)-cpu0) / float64(time.Millisecond)
			}
		}
		st.UserManager = memoryOf(sb.ManagerPID(ctx))
		res.Steps = append(res.Steps, st)
	}
	res.Growth = growthOf(res.Steps)
	last := res.Steps[len(res.Steps)-1]
	res.Aim.ListAllP50Ms = ListAim
	res.Aim.Within = last.ListAll.P50Ms <= ListAim
	b.res = res
	return nil
}

// spawnOne spawns worker i (-1: the warm-up) as its manager, the way
// `agent-fleet spawn` does (open the fleet, spawn, close), and times it.
func (b *fleetBench) spawnOne(ctx context.Context, res *FleetResult, i int) (*fleet.Worker, time.Duration, error) {
	id := fmt.Sprintf("fleet-%s-%03d", b.tag, i)
	if i < 0 {
		id = "fleet-" + b.tag + "-warmup"
	}
	req := fleet.SpawnRequest{ID: id, Role: "bench", Cwd: b.sb.Paths.AgentDir, Command: res.Command, MaxRuntime: benchMaxRuntime}
	began := time.Now()
	w, err := b.sb.SpawnAs(ctx, b.managers[max(i, 0)%len(b.managers)], req)
	took := time.Since(began)
	if err != nil {
		return nil, 0, fmt.Errorf("bench fleet: %w", err)
	}
	return w, took, nil
}

// grow spawns workers until there are size, half one at a time (each
// followed by a bare unit's start, the reference) and half opts.Parallel
// at a time.
func (b *fleetBench) grow(ctx context.Context, res *FleetResult, st *FleetStep, size int) error {
	from := len(b.workers)
	add := size - from
	seq := (add + 1) / 2
	fmt.Fprintf(b.log, "bench fleet: growing to %d workers: %d one at a time, %d %d at a time\n", size, seq, add-seq, b.opts.Parallel)
	var spawnT, bareT []time.Duration
	began := time.Now()
	for i := from; i < from+seq; i++ {
		w, took, err := b.spawnOne(ctx, res, i)
		if err != nil {
			return err
		}
		b.workers = append(b.workers, w)
		spawnT = append(spawnT, took)
	}
	st.SpawnSequential = rateOf(spawnT, time.Since(began), 1)
	for i := range seq {
		name := fmt.Sprintf("agent-fleet-bench-%s-bare-%d-%d.service", b.tag, size, i)
		began := time.Now()
		if err := b.sb.StartBareUnit(ctx, factory.BareUnit{Name: name, Description: "agent-fleet bench fleet: bare unit",
			Argv: res.Command, MaxRuntime: benchMaxRuntime, LogFile: b.bareLog()}); err != nil {
			return fmt.Errorf("bench fleet: bare unit: %w", err)
		}
		bareT = append(bareT, time.Since(began))
		if err := b.sb.StopBareUnit(ctx, name); err != nil {
			return fmt.Errorf("bench fleet: bare unit: %w", err)
		}
	}
	st.BareStart = summarize(bareT)

	// The concurrent half: the spawns report back here, in the order they
	// end.
	type done struct {
		w    *fleet.Worker
		took time.Duration
		err  error
	}
	next := make(chan int)
	out := make(chan done)
	var wg sync.WaitGroup
	for range b.opts.Parallel {
		wg.Go(func() {
			for i := range next {
				w, took, err := b.spawnOne(ctx, res, i)
				out <- done{w, took, err}
			}
		})
	}
	go func() {
		defer close(next)
		for i := from + seq; i < size; i++ {
			select {
			case next <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() { wg.Wait(); close(out) }()
	began = time.Now()
	var concT []time.Duration
	var errs []error
	for d := range out {
		if d.err != nil {
			errs = append(errs, d.err)
			continue
		}
		b.workers = append(b.workers, d.w)
		concT = append(concT, d.took)
	}
	st.SpawnConcurrent = rateOf(concT, time.Since(began), b.opts.Parallel)
	if len(errs) > 0 {
		return fmt.Errorf("bench fleet: %d of %d concurrent spawns failed: %w", len(errs), size-from-seq, errs[0])
	}
	return ctx.Err()
}

func (b *fleetBench) bareLog() string {
	if b.f.Journald() {
		return ""
	}
	return filepath.Join(b.sb.Paths.AgentDir, "bare.log")
}

// measure times list, status, the D-Bus and systemctl references and the
// janitor at the current size, the kinds in a fresh order each round, and
// reads the files' sizes and the workers' memory.
func (b *fleetBench) measure(ctx context.Context, st *FleetStep) error {
	p := b.sb.Paths
	pattern := fleet.WorkerUnitName("*", "*")
	exe, err := b.f.Exe()
	if err != nil {
		return err
	}
	systemctl, _ := exec.LookPath("systemctl")
	var mineT, allT, statusT, procT, ctlT, unitsT, janT []time.Duration
	ctlOK := systemctl != ""
	timed := func(into *[]time.Duration, op func() error) error {
		began := time.Now()
		if err := op(); err != nil {
			return err
		}
		*into = append(*into, time.Since(began))
		return nil
	}
	anyManager := func() string { return b.managers[mrand.IntN(len(b.managers))] }
	few := max(3, b.opts.Samples/10)
	for r := range max(b.opts.Samples, few) {
		var ops []func() error
		if r < b.opts.Samples {
			ops = append(ops,
				func() error {
					return timed(&mineT, func() error { return b.verb(ctx, anyManager(), verbs.Args{Action: "list"}) })
				},
				func() error {
					return timed(&allT, func() error { return b.verb(ctx, anyManager(), verbs.Args{Action: "list", All: true}) })
				},
				func() error {
					w := b.workers[mrand.IntN(len(b.workers))]
					return timed(&statusT, func() error { return b.verb(ctx, w.Manager, verbs.Args{Action: "status", ID: w.ID}) })
				},
				func() error {
					return timed(&unitsT, func() error {
						n, err := b.sb.CountUnits(ctx, pattern)
						if err == nil && n < len(b.workers) {
							err = fmt.Errorf("ListUnits found %d worker units of %d", n, len(b.workers))
						}
						return err
					})
				})
		}
		if r < few {
			ops = append(ops, func() error {
				return timed(&procT, func() error {
					cmd := exec.CommandContext(ctx, exe, "list", "--all", "--json")
					cmd.Env = append(append(os.Environ(), b.f.ChildEnv...), intercom.SessionIDEnv+"="+anyManager())
					if out, err := cmd.CombinedOutput(); err != nil {
						return fmt.Errorf("agent-fleet list: %w: %s", err, bytes.TrimSpace(out))
					}
					return nil
				})
			})
			if ctlOK {
				ops = append(ops, func() error {
					err := timed(&ctlT, func() error {
						return exec.CommandContext(ctx, systemctl, "--user", "list-units", "--all", "--no-pager", "--no-legend", pattern).Run()
					})
					if err != nil {
						ctlOK = false // no reference where systemctl cannot reach this manager
					}
					return nil
				})
			}
		}
		mrand.Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
		for _, op := range ops {
			if err := op(); err != nil {
				return fmt.Errorf("bench fleet: %w", err)
			}
		}
	}
	for range few {
		if err := timed(&janT, func() error { return b.verb(ctx, "", verbs.Args{Action: "cleanup", Execute: true}) }); err != nil {
			return fmt.Errorf("bench fleet: %w", err)
		}
	}
	st.ListMine, st.ListAll, st.Status = summarize(mineT), summarize(allT), summarize(statusT)
	st.ListProcess, st.UnitsList, st.Janitor = summarize(procT), summarize(unitsT), summarize(janT)
	if ctlOK && len(ctlT) > 0 {
		l := summarize(ctlT)
		st.SystemctlList = &l
	}
	if st.RegistryBytes, err = b.sb.Fleet.Registry.Bytes(ctx); err != nil {
		return fmt.Errorf("bench fleet: %w", err)
	}
	if fi, err := os.Stat(fleet.RegistryPath(p) + "-wal"); err == nil {
		st.WALBytes = fi.Size()
	}
	if fi, err := os.Stat(fleet.WorkersViewPath(p)); err == nil {
		st.ViewBytes = fi.Size()
	}
	st.WorkerPrivateKiB, st.WorkerTasks = b.workerFootprint()
	return nil
}

// verb runs a fleet verb as `agent-fleet` does for caller ("" = the run's
// own), printing its text to nowhere.
func (b *fleetBench) verb(ctx context.Context, caller string, a verbs.Args) error {
	if err := a.Check(); err != nil {
		return err
	}
	if caller == "" {
		caller = b.sb.Fleet.Caller
	}
	open := b.f.FleetAs
	if verbs.ReadOnly(a.Action) {
		open = b.f.ReadFleetAs
	}
	fe, err := open(ctx, b.sb.Paths, caller)
	if err != nil {
		return err
	}
	defer fe.Close()
	rep, err := verbs.Run(ctx, fe, a)
	if err != nil {
		return fmt.Errorf("%s: %w", a.Action, err)
	}
	if ws, ok := rep.(output.WorkersReport); ok && a.All && len(ws.WS) < len(b.workers) {
		return fmt.Errorf("list --all showed %d workers of %d", len(ws.WS), len(b.workers))
	}
	return output.Print(io.Discard, rep, false)
}

// workerFootprint is the mean private memory (KiB) and task count of up to
// 50 workers picked at random.
func (b *fleetBench) workerFootprint() (kib, tasks float64) {
	picked := slices.Clone(b.workers)
	mrand.Shuffle(len(picked), func(i, j int) { picked[i], picked[j] = picked[j], picked[i] })
	picked = picked[:min(50, len(picked))]
	n := 0
	for _, w := range picked {
		pids, err := b.sb.CgroupProcs(w.ControlGroup)
		if err != nil || len(pids) == 0 {
			continue
		}
		n++
		for _, pid := range pids {
			if k, th, ok := privateMemory(pid); ok {
				kib, tasks = kib+float64(k), tasks+float64(th)
			}
		}
	}
	if n == 0 {
		return 0, 0
	}
	return round(kib/float64(n), 1), round(tasks/float64(n), 1)
}

// teardown stops every worker still running, Parallel at a time, and
// closes the manager sessions; the sandbox's Close does the rest.
func (b *fleetBench) teardown(ctx context.Context) error {
	for _, s := range b.sessions {
		s.Close()
	}
	var ids []string
	for _, w := range b.workers {
		if !b.sb.Stopped[w.ID] {
			ids = append(ids, w.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	fmt.Fprintf(b.log, "bench fleet: stopping %d workers, %d at a time\n", len(ids), b.opts.Parallel)
	next := make(chan string)
	var mu sync.Mutex
	var took []time.Duration
	var errs []error
	var wg sync.WaitGroup
	for range b.opts.Parallel {
		wg.Go(func() {
			for id := range next {
				began := time.Now()
				_, err := b.sb.Stop(ctx, id)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					took = append(took, time.Since(began))
				}
				mu.Unlock()
			}
		})
	}
	began := time.Now()
	for _, id := range ids {
		next <- id
	}
	close(next)
	wg.Wait()
	if b.res != nil {
		b.res.Teardown = rateOf(took, time.Since(began), b.opts.Parallel)
	}
	if len(errs) > 0 {
		return fmt.Errorf("bench fleet: %d of %d workers not stopped: %w", len(errs), len(ids), errors.Join(errs...))
	}
	if b.res != nil {
		if n, err := b.sb.UnitsLeft(ctx, b.res.UnitPatterns...); err != nil || n > 0 {
			return fmt.Errorf("bench fleet: %d units of the run left after the teardown (%v)", n, err)
		}
	}
	return nil
}

func (b *fleetBench) print() error {
	if b.opts.JSON {
		return output.PrintJSON(b.f.IO.Out, b.res)
	}
	printBenchFleet(b.f.IO.Out, b.res)
	return nil
}

func rateOf(ds []time.Duration, wall time.Duration, inFlight int) SpawnRate {
	r := SpawnRate{Workers: len(ds), InFlight: inFlight, WallMs: round(float64(wall)/float64(time.Millisecond), 1), Latency: summarize(ds)}
	if wall > 0 && len(ds) > 0 {
		r.PerSecond = round(float64(len(ds))/wall.Seconds(), 2)
	}
	return r
}

func sum(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
}

// brokerCPU is the broker's CPU time so far, -1 when it cannot be read.
func brokerCPU(ctx context.Context, api *intercom.LocalAPIClient) time.Duration {
	stats, err := api.Stats(ctx)
	if err != nil {
		return -1
	}
	u, err := readProcUsage(stats.PID)
	if err != nil {
		return -1
	}
	return u.CPU
}

func memoryOf(pid int) Memory {
	if pid <= 0 {
		return Memory{}
	}
	u, err := readProcUsage(pid)
	if err != nil {
		return Memory{PID: pid}
	}
	return Memory{PID: pid, RSSMiB: mib(u.RSSKiB)}
}

// growthOf compares the steps (nil for one step).
func growthOf(steps []FleetStep) *Growth {
	if len(steps) < 2 {
		return nil
	}
	first, last := steps[0], steps[len(steps)-1]
	g := &Growth{From: first.Workers, To: last.Workers, Exponents: map[string]float64{}, PerWorkerKiB: map[string][]float64{}}
	scale := math.Log(float64(last.Workers) / float64(first.Workers))
	exp := func(name string, a, b float64) {
		if a > 0 && b > 0 {
			g.Exponents[name] = round(math.Log(b/a)/scale, 2)
		}
	}
	exp("spawnSequential", first.SpawnSequential.Latency.P50Ms, last.SpawnSequential.Latency.P50Ms)
	exp("spawnConcurrent", first.SpawnConcurrent.Latency.P50Ms, last.SpawnConcurrent.Latency.P50Ms)
	exp("bareStart", first.BareStart.P50Ms, last.BareStart.P50Ms)
	exp("listMine", first.ListMine.P50Ms, last.ListMine.P50Ms)
	exp("listAll", first.ListAll.P50Ms, last.ListAll.P50Ms)
	exp("status", first.Status.P50Ms, last.Status.P50Ms)
	exp("listProcess", first.ListProcess.P50Ms, last.ListProcess.P50Ms)
	exp("unitsList", first.UnitsList.P50Ms, last.UnitsList.P50Ms)
	exp("janitor", first.Janitor.P50Ms, last.Janitor.P50Ms)
	exp("registryBytes", float64(first.RegistryBytes), float64(last.RegistryBytes))
	for i := 1; i < len(steps); i++ {
		a, b := steps[i-1], steps[i]
		added := float64(b.Workers - a.Workers)
		per := func(name string, x, y float64) {
			g.PerWorkerKiB[name] = append(g.PerWorkerKiB[name], round((y-x)/added, 1))
		}
		per("registry", float64(a.RegistryBytes)/1024, float64(b.RegistryBytes)/1024)
		per("broker", a.Broker.RSSMiB*1024, b.Broker.RSSMiB*1024)
		per("userManager", a.UserManager.RSSMiB*1024, b.UserManager.RSSMiB*1024)
	}
	return g
}

func printBenchFleet(out io.Writer, r *FleetResult) {
	where := "your user manager"
	if r.Manager == "private" {
		where = "a private user manager booted for the run"
	}
	fmt.Fprintf(out, "Fleet benchmark: exec workers running %q owned by %d managers, systemd %s (%s); readiness grace %s.\n\n",
		strings.Join(r.Command, " "), r.Managers, r.SystemdVersion, where, ms(r.ReadyGraceMs))
	tw := tabwriter.NewWriter(out, 0, 2, 2, ' ', tabwriter.AlignRight)
	head := "\t"
	for _, s := range r.Steps {
		head += fmt.Sprintf("%d workers\t", s.Workers)
	}
	fmt.Fprintln(tw, head)
	row := func(name string, cell func(FleetStep) string) {
		line := name + "\t"
		for _, s := range r.Steps {
			line += cell(s) + "\t"
		}
		fmt.Fprintln(tw, line)
	}
	lat := func(l Latency) string {
		if l.N == 0 {
			return "–"
		}
		return ms(l.P50Ms) + " / " + ms(l.P99Ms)
	}
	row("spawns/s, one at a time", func(s FleetStep) string { return fmt.Sprintf("%.1f", s.SpawnSequential.PerSecond) })
	row(fmt.Sprintf("spawns/s, %d at a time", r.Parallel), func(s FleetStep) string { return fmt.Sprintf("%.1f", s.SpawnConcurrent.PerSecond) })
	row("spawn p50 / p99, one at a time", func(s FleetStep) string { return lat(s.SpawnSequential.Latency) })
	row(fmt.Sprintf("spawn p50 / p99, %d at a time", r.Parallel), func(s FleetStep) string { return lat(s.SpawnConcurrent.Latency) })
	row("bare unit start p50 / p99", func(s FleetStep) string { return lat(s.BareStart) })
	row("list (one manager's) p50 / p99", func(s FleetStep) string { return lat(s.ListMine) })
	row("list --all p50 / p99", func(s FleetStep) string { return lat(s.ListAll) })
	row("status p50 / p99", func(s FleetStep) string { return lat(s.Status) })
	row("ListUnits D-Bus call p50 / p99", func(s FleetStep) string { return lat(s.UnitsList) })
	row("list --all / ListUnits (p50)", func(s FleetStep) string { return fmt.Sprintf("%.1f×", s.ListAll.P50Ms/s.UnitsList.P50Ms) })
	row("agent-fleet list --all process", func(s FleetStep) string { return lat(s.ListProcess) })
	row("systemctl --user list-units process", func(s FleetStep) string {
		if s.SystemctlList == nil {
			return "–"
		}
		return lat(*s.SystemctlList)
	})
	row("list process / systemctl (p50)", func(s FleetStep) string {
		if s.SystemctlList == nil {
			return "–"
		}
		return fmt.Sprintf("%.1f×", s.ListProcess.P50Ms/s.SystemctlList.P50Ms)
	})
	row("janitor pass p50 / max", func(s FleetStep) string { return ms(s.Janitor.P50Ms) + " / " + ms(s.Janitor.MaxMs) })
	row("registry database", func(s FleetStep) string { return fmt.Sprintf("%.0f KiB", float64(s.RegistryBytes)/1024) })
	row("registry WAL file", func(s FleetStep) string { return fmt.Sprintf("%.0f KiB", float64(s.WALBytes)/1024) })
	row("workers.json view", func(s FleetStep) string { return fmt.Sprintf("%.0f KiB", float64(s.ViewBytes)/1024) })
	row("broker sessions", func(s FleetStep) string { return fmt.Sprint(s.BrokerSessions) })
	row("broker RSS", func(s FleetStep) string { return fmt.Sprintf("%.1f MiB", s.Broker.RSSMiB) })
	row("broker CPU during the step", func(s FleetStep) string { return ms(s.BrokerCPUMs) })
	row("user manager RSS", func(s FleetStep) string {
		if s.UserManager.RSSMiB == 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f MiB", s.UserManager.RSSMiB)
	})
	row("per worker: private memory", func(s FleetStep) string { return fmt.Sprintf("%.0f KiB", s.WorkerPrivateKiB) })
	row("per worker: tasks", func(s FleetStep) string { return fmt.Sprintf("%.1f", s.WorkerTasks) })
	tw.Flush()
	if g := r.Growth; g != nil {
		fmt.Fprintf(out, "\nGrowth from %d to %d workers (time ∝ workers^k; 1 is linear, 0 flat):\n", g.From, g.To)
		keys := make([]string, 0, len(g.Exponents))
		for k := range g.Exponents {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(out, "  %-16s k = %.2f\n", k, g.Exponents[k])
		}
		fmt.Fprintln(out, "Memory added per added worker, step by step (flat is linear):")
		for _, k := range []string{"registry", "broker", "userManager"} {
			fmt.Fprintf(out, "  %-16s %v KiB\n", k, g.PerWorkerKiB[k])
		}
	}
	last := r.Steps[len(r.Steps)-1]
	fmt.Fprintf(out, "\nlist --all at %d workers: %s at p50 (the aim: under %s at 500 workers).\n", last.Workers, ms(last.ListAll.P50Ms), ms(r.Aim.ListAllP50Ms))
	if r.Teardown.Workers > 0 {
		fmt.Fprintf(out, "Teardown: %d workers stopped %d at a time, cgroups proven empty, %.1f/s.\n", r.Teardown.Workers, r.Teardown.InFlight, r.Teardown.PerSecond)
	}
	fmt.Fprintln(out, "\nWhat the figures include:")
	for _, k := range []string{"spawn", "bareStart", "list", "status", "listProcess", "unitsList", "janitor", "memory"} {
		fmt.Fprintf(out, "  %-12s %s\n", k+":", r.Includes[k])
	}
}
