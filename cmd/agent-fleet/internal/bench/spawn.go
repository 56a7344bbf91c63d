package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
)

// SpawnTarget is the spawn target, a ratio: a full spawn within 1.3× of a bare unit
// plus the command's own start-up.
const SpawnTarget = 1.3

// StopTarget is the stop target, a ratio: a worker's stop, until its cgroup
// is proven empty, within 2.5× of a bare unit's stop.
const StopTarget = 2.5

// benchMaxRuntime makes systemd stop the benchmark's units even if the
// benchmark itself is killed before it can; the command they run,
// benchSleep, outlasts every run (500 workers take minutes).
const (
	benchMaxRuntime = time.Hour
	benchSleep      = "86400"
)

// SpawnOptions are bench spawn's.
type SpawnOptions struct {
	Workers int
	JSON    bool
	// NoBoot forbids booting a private user manager.
	NoBoot bool
}

// Latency summarises one measured operation, in milliseconds.
type Latency struct {
	P50Ms  float64 `json:"p50Ms"`
	P99Ms  float64 `json:"p99Ms"`
	MinMs  float64 `json:"minMs"`
	MaxMs  float64 `json:"maxMs"`
	MeanMs float64 `json:"meanMs"`
	N      int     `json:"n"`
}

// Ratio compares two latencies at p50 and at p99.
type Ratio struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
}

// SpawnResult is what `bench spawn --json` prints.
type SpawnResult struct {
	Workers        int      `json:"workers"`
	Command        []string `json:"command"`
	Manager        string   `json:"manager"` // "user" or "private"
	SystemdVersion string   `json:"systemdVersion"`
	// Spawn is fleet.Spawn until READY; Stop is fleet.Stop until the
	// cgroup is proven empty.
	Spawn Latency `json:"spawn"`
	Stop  Latency `json:"stop"`
	// BareStart and BareStop are a Type=exec transient unit's start and
	// stop calls until their jobs are done.
	BareStart Latency `json:"bareStart"`
	BareStop  Latency `json:"bareStop"`
	// ShimStartup is the worker shim run outside systemd, from its exec
	// until READY.
	ShimStartup Latency `json:"shimStartup"`
	// ShimUnitStart and ShimUnitStop are the worker shim as a bare
	// Type=notify unit (no registry, no environment read): the start call
	// until READY, the stop call until its job is done.
	ShimUnitStart Latency `json:"shimUnitStart"`
	ShimUnitStop  Latency `json:"shimUnitStop"`
	// RecordUnitStop is the bare unit with a worker's exit record: its
	// ExecStopPost, a process systemd starts in the unit's cgroup as the
	// unit stops, is systemd's part of every worker stop.
	RecordUnitStop Latency `json:"recordUnitStop"`
	// StopSteps split the worker stops (fleet.StopTimings).
	StopSteps struct {
		Fence  Latency `json:"fence"`
		End    Latency `json:"end"`
		Proof  Latency `json:"proof"`
		Record Latency `json:"record"`
		Notice Latency `json:"notice"`
	} `json:"stopSteps"`
	Ratios struct {
		SpawnToBare            Ratio `json:"spawnToBare"`
		SpawnToBarePlusStartup Ratio `json:"spawnToBarePlusStartup"`
		SpawnToShimUnit        Ratio `json:"spawnToShimUnit"`
		StopToBare             Ratio `json:"stopToBare"`
		StopToRecordUnit       Ratio `json:"stopToRecordUnit"`
		StopToShimUnit         Ratio `json:"stopToShimUnit"`
		// ShimUnitStopToBare is the shim unit's stop over the bare unit's:
		// what any stop that waits for a worker's shim to exit starts from.
		ShimUnitStopToBare Ratio `json:"shimUnitStopToBare"`
	} `json:"ratios"`
	Target struct {
		SpawnToBarePlusStartup float64 `json:"spawnToBarePlusStartup"`
		MetAtP50               bool    `json:"metAtP50"`
		MetAtP99               bool    `json:"metAtP99"`
		StopToBare             float64 `json:"stopToBare"`
		StopMetAtP50           bool    `json:"stopMetAtP50"`
	} `json:"target"`
	// SpawnsPerSecond is the spawns' throughput one at a time (1000 / the
	// mean spawn in ms); bench fleet measures them concurrent too.
	SpawnsPerSecond float64 `json:"spawnsPerSecond"`
	// Growth is the p50 of the first and of the last tenth of the rounds
	// (ms): starts meet from none to Workers-1 of each kind already
	// running, stops from all of them to none.
	Growth struct {
		Spawn     [2]float64 `json:"spawnP50Ms"`
		BareStart [2]float64 `json:"bareStartP50Ms"`
		Stop      [2]float64 `json:"stopP50Ms"`
		BareStop  [2]float64 `json:"bareStopP50Ms"`
	} `json:"growth"`
	// Includes says what each Measurement covers.
	Includes map[string]string `json:"includes"`
	// UnitPatterns match every unit the run created (all gone at the end).
	UnitPatterns []string `json:"unitPatterns"`
}

var benchIncludes = map[string]string{
	"spawn":       "fleet.Spawn: running-unit check and user manager environment read (concurrent D-Bus calls), registry reserve, transient Type=notify unit start until the shim's READY (exec of agent-fleet, intercom registration, session holder, exec of the command), registry update",
	"bareStart":   "units.StartService of a Type=exec transient unit running the same command, on the same D-Bus connection: start call until the start job is done (systemd forked and executed the command)",
	"shimStartup": "the worker shim started by this process outside systemd, from fork/exec until READY=1 on a notify socket: the command's own start-up under agent-fleet (it runs on, holding its session, until the stop phase)",
	"stop":        "fleet.Stop: registry stop fence (a record read and write; the unit's stop timeout is the one spawn recorded), stop job (SIGTERM to the cgroup) until the shim has exited having recorded the end in the registry and the cgroup holds nothing but the exit record's ExecStopPost (else until the unit is inactive), cgroup proof (and SIGKILL of survivors), registry update, the ended notice to the manager's session",
	"stopSteps":   "the worker stops step by step: fence (record read, stop fence), end (first signal until the shim's exit, or the unit's end), proof (registry and cgroup read, the unit's control process; SIGKILL of survivors), record (outcome written; a unit that ended the slow way is reset meanwhile), notice (ended notice delivered)",
	"bareStop":    "units.StopUnit of the bare unit until its stop job is done",
	"recordUnit":  "the bare unit with a worker's exit record (ExecStopPost: /bin/sh in the unit's cgroup), stopped until its job is done: systemd's own part of a worker stop",
	"shimUnit":    "the worker shim (running the same command) as a bare Type=notify transient unit on the same connection: systemd plus the shim's start-up until READY, and its stop, without fleet's registry and environment work",
	"ratios":      "ratios of the percentiles (p50 to p50, p99 to p99); spawnToBarePlusStartup = spawn / (bareStart + shimStartup); stopToBare is the stop target's",
}

// RunSpawn is `bench spawn`: spawn and stop opts.Workers workers beside bare
// units and shim probes in a sandbox, and print the latencies and ratios to
// f's stdout.
func RunSpawn(ctx context.Context, f *factory.Factory, opts *SpawnOptions) (err error) {
	ctx, stop := factory.UntilHangup(ctx)
	defer stop()
	log := progressLog(f, opts.JSON)
	sb, err := f.NewSandbox("agent-fleet-bench-")
	if err != nil {
		return fmt.Errorf("bench spawn: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout(len(sb.Workers)))
		defer cancel()
		for _, line := range sb.Close(cctx) {
			fmt.Fprintln(log, "bench spawn:", line)
		}
		err = errors.Join(err, sb.CloseErr)
	}()
	if err := sb.FindManager(ctx, !opts.NoBoot, "bench"); err != nil {
		return err
	}
	if err := sb.Unavailable(); err != nil {
		return err
	}
	res := &SpawnResult{Workers: opts.Workers, Manager: "user", SystemdVersion: sb.Probe.Version.Raw, Includes: benchIncludes}
	if sb.Private != nil {
		res.Manager = "private"
		fmt.Fprintf(log, "bench spawn: no user manager is reachable; booted a private one (pid %d)\n", sb.Private.PID)
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return fmt.Errorf("bench spawn: %w", err)
	}
	if sleep, err = filepath.Abs(sleep); err != nil {
		return err
	}
	res.Command = []string{sleep, benchSleep}
	// Every round registers three sessions (probe, shim unit, worker),
	// all there until the stop phase.
	sb.BrokerArgs = []string{"--max-sessions", strconv.Itoa(max(broker.DefaultMaxSessions, 3*opts.Workers+16))}
	if err := sb.EnsureBroker(ctx); err != nil {
		return fmt.Errorf("bench spawn: start the intercom broker: %w", err)
	}
	if _, err := sb.OpenFleet(ctx); err != nil {
		return err
	}
	exe, err := f.Exe()
	if err != nil {
		return err
	}
	probe, err := newShimProbe(sb.Paths, exe, res.Command, f.ChildEnv)
	if err != nil {
		return err
	}
	defer probe.close()

	tag := randomTag()
	res.UnitPatterns = []string{fleet.WorkerUnitName("bench-"+tag+"-*", "*"), "agent-fleet-bench-" + tag + "-*.service"}
	// The bare unit's output goes where the workers' goes: to the journal
	// where journald runs, else to a file (systemd's fallback when the
	// journal socket is missing costs milliseconds per start).
	bareLog := ""
	if !f.Journald() {
		bareLog = filepath.Join(sb.Paths.AgentDir, "bare.log")
	}
	bareSpec := func(name string) factory.BareUnit {
		return factory.BareUnit{Name: name, Description: "agent-fleet bench spawn: bare unit", Argv: res.Command,
			MaxRuntime: benchMaxRuntime, LogFile: bareLog}
	}
	// A record unit is the bare unit with a worker's exit record.
	recordSpec := func(name string) factory.BareUnit {
		u := bareSpec(name)
		u.Description, u.ExitRecord = "agent-fleet bench spawn: bare unit with an exit record", filepath.Join(sb.Paths.AgentDir, name+".exit")
		return u
	}
	// A shim unit is the worker shim as a bare Type=notify unit: systemd
	// and the shim's start-up to READY, without fleet's bookkeeping.
	shimSpec := func(name, id string) factory.BareUnit {
		return factory.BareUnit{Name: name, Description: "agent-fleet bench spawn: shim unit",
			Argv:   append([]string{exe, "worker-shim", "--id", id, "--run", randomTag() + randomTag(), "--"}, res.Command...),
			Env:    append([]string{intercom.AgentDirEnv + "=" + sb.Paths.AgentDir}, f.ChildEnv...),
			Notify: true, MaxRuntime: benchMaxRuntime, LogFile: bareLog, Dir: sb.Paths.AgentDir}
	}
	spawnReq := func(id string) fleet.SpawnRequest {
		return fleet.SpawnRequest{ID: id, Role: "bench", Cwd: sb.Paths.AgentDir, Command: res.Command, MaxRuntime: benchMaxRuntime}
	}

	// One untimed round first, so that the binaries, the registry and the
	// manager are warm for every timed one.
	fmt.Fprintf(log, "bench spawn: warming up\n")
	warm := "agent-fleet-bench-" + tag + "-warmup.service"
	if err := sb.StartBareUnit(ctx, bareSpec(warm)); err != nil {
		return fmt.Errorf("bench spawn: bare unit: %w", err)
	}
	if err := sb.StopBareUnit(ctx, warm); err != nil {
		return fmt.Errorf("bench spawn: bare unit: %w", err)
	}
	warmRecord := "agent-fleet-bench-" + tag + "-record-warmup.service"
	if err := sb.StartBareUnit(ctx, recordSpec(warmRecord)); err != nil {
		return fmt.Errorf("bench spawn: record unit: %w", err)
	}
	if err := sb.StopBareUnit(ctx, warmRecord); err != nil {
		return fmt.Errorf("bench spawn: record unit: %w", err)
	}
	warmShim := "agent-fleet-bench-" + tag + "-shim-warmup.service"
	if err := sb.StartBareUnit(ctx, shimSpec(warmShim, "bench-"+tag+"-shim-warmup")); err != nil {
		return fmt.Errorf("bench spawn: shim unit: %w", err)
	}
	if err := sb.StopBareUnit(ctx, warmShim); err != nil {
		return fmt.Errorf("bench spawn: shim unit: %w", err)
	}
	if err := spawnAndTrack(ctx, sb, spawnReq("bench-"+tag+"-warmup")); err != nil {
		return err
	}
	if _, err := sb.Stop(ctx, "bench-"+tag+"-warmup"); err != nil {
		return fmt.Errorf("bench spawn: %w", err)
	}
	if _, err := probe.run(ctx, "bench-"+tag+"-probe"); err != nil {
		return err
	}
	probe.stop("bench-" + tag + "-probe")

	// The four kinds alternate, so that each sees the same load of running
	// units and sessions; operations run back to back (pausing between them
	// lets the CPUs idle, and waking them costs more than the operation).
	var spawnT, stopT, bareStartT, bareStopT, shimT, shimUnitStartT, shimUnitStopT, recordStopT []time.Duration
	var fenceT, endT, proofT, recordT, noticeT []time.Duration
	timed := func(into *[]time.Duration, op func() error) error {
		began := time.Now()
		if err := op(); err != nil {
			return err
		}
		*into = append(*into, time.Since(began))
		return nil
	}
	bareName := func(i int) string { return fmt.Sprintf("agent-fleet-bench-%s-%d.service", tag, i) }
	shimName := func(i int) string { return fmt.Sprintf("agent-fleet-bench-%s-shim-%d.service", tag, i) }
	recordName := func(i int) string { return fmt.Sprintf("agent-fleet-bench-%s-record-%d.service", tag, i) }
	workerID := func(i int) string { return fmt.Sprintf("bench-%s-%d", tag, i) }
	probeID := func(i int) string { return fmt.Sprintf("bench-%s-probe-%d", tag, i) }

	fmt.Fprintf(log, "bench spawn: starting %d workers, %d bare units and %d shim units\n", opts.Workers, opts.Workers, opts.Workers)
	for i := range opts.Workers {
		// Each start leaves work behind (a session's join wakes every
		// session of its scope); in a fresh order per round each kind
		// follows each other kind alike.
		starts := []struct {
			into *[]time.Duration
			what string // for errors not already saying what failed
			op   func() error
		}{
			{&shimT, "", func() error { _, err := probe.run(ctx, probeID(i)); return err }},
			{&bareStartT, "bare unit: ", func() error {
				return sb.StartBareUnit(ctx, bareSpec(bareName(i)))
			}},
			{&shimUnitStartT, "shim unit: ", func() error {
				return sb.StartBareUnit(ctx, shimSpec(shimName(i), fmt.Sprintf("bench-%s-shim-%d", tag, i)))
			}},
			{&spawnT, "", func() error { return spawnAndTrack(ctx, sb, spawnReq(workerID(i))) }},
		}
		mrand.Shuffle(len(starts), func(a, b int) { starts[a], starts[b] = starts[b], starts[a] })
		for _, st := range starts {
			if err := timed(st.into, st.op); err != nil {
				if st.what != "" {
					return fmt.Errorf("bench spawn: %s%w", st.what, err)
				}
				return err
			}
		}
	}
	// The record units only stop in the timed phase: their starts are
	// the bare units', untimed here.
	for i := range opts.Workers {
		if err := sb.StartBareUnit(ctx, recordSpec(recordName(i))); err != nil {
			return fmt.Errorf("bench spawn: record unit: %w", err)
		}
	}
	fmt.Fprintf(log, "bench spawn: stopping them\n")
	for i := range opts.Workers {
		probe.stop(probeID(i))
		stops := []struct {
			into *[]time.Duration
			what string
			op   func() error
		}{
			{&bareStopT, "bare unit: ", func() error { return sb.StopBareUnit(ctx, bareName(i)) }},
			{&recordStopT, "record unit: ", func() error { return sb.StopBareUnit(ctx, recordName(i)) }},
			{&shimUnitStopT, "shim unit: ", func() error { return sb.StopBareUnit(ctx, shimName(i)) }},
			{&stopT, "", func() error {
				r, err := sb.Stop(ctx, workerID(i))
				if err == nil {
					fenceT, endT = append(fenceT, r.Took.Fence), append(endT, r.Took.End)
					proofT, recordT = append(proofT, r.Took.Proof), append(recordT, r.Took.Record)
					noticeT = append(noticeT, r.Took.Notice)
				}
				return err
			}},
		}
		mrand.Shuffle(len(stops), func(a, b int) { stops[a], stops[b] = stops[b], stops[a] })
		for _, st := range stops {
			if err := timed(st.into, st.op); err != nil {
				return fmt.Errorf("bench spawn: %s%w", st.what, err)
			}
		}
	}

	res.Spawn, res.Stop = summarize(spawnT), summarize(stopT)
	res.BareStart, res.BareStop, res.ShimStartup = summarize(bareStartT), summarize(bareStopT), summarize(shimT)
	res.ShimUnitStart, res.ShimUnitStop = summarize(shimUnitStartT), summarize(shimUnitStopT)
	res.Ratios.SpawnToBare = Ratio{res.Spawn.P50Ms / res.BareStart.P50Ms, res.Spawn.P99Ms / res.BareStart.P99Ms}
	res.Ratios.SpawnToBarePlusStartup = Ratio{res.Spawn.P50Ms / (res.BareStart.P50Ms + res.ShimStartup.P50Ms),
		res.Spawn.P99Ms / (res.BareStart.P99Ms + res.ShimStartup.P99Ms)}
	res.Ratios.SpawnToShimUnit = Ratio{res.Spawn.P50Ms / res.ShimUnitStart.P50Ms, res.Spawn.P99Ms / res.ShimUnitStart.P99Ms}
	res.RecordUnitStop = summarize(recordStopT)
	res.StopSteps.Fence, res.StopSteps.End = summarize(fenceT), summarize(endT)
	res.StopSteps.Proof, res.StopSteps.Record = summarize(proofT), summarize(recordT)
	res.StopSteps.Notice = summarize(noticeT)
	res.Ratios.StopToBare = Ratio{res.Stop.P50Ms / res.BareStop.P50Ms, res.Stop.P99Ms / res.BareStop.P99Ms}
	res.Ratios.StopToRecordUnit = Ratio{res.Stop.P50Ms / res.RecordUnitStop.P50Ms, res.Stop.P99Ms / res.RecordUnitStop.P99Ms}
	res.Ratios.StopToShimUnit = Ratio{res.Stop.P50Ms / res.ShimUnitStop.P50Ms, res.Stop.P99Ms / res.ShimUnitStop.P99Ms}
	res.Ratios.ShimUnitStopToBare = Ratio{res.ShimUnitStop.P50Ms / res.BareStop.P50Ms, res.ShimUnitStop.P99Ms / res.BareStop.P99Ms}
	res.Target.StopToBare = StopTarget
	res.Target.StopMetAtP50 = res.Ratios.StopToBare.P50 <= StopTarget
	if res.Spawn.MeanMs > 0 {
		res.SpawnsPerSecond = round(1000/res.Spawn.MeanMs, 2)
	}
	res.Growth.Spawn, res.Growth.BareStart = tenths(spawnT), tenths(bareStartT)
	res.Growth.Stop, res.Growth.BareStop = tenths(stopT), tenths(bareStopT)
	res.Target.SpawnToBarePlusStartup = SpawnTarget
	res.Target.MetAtP50 = res.Ratios.SpawnToBarePlusStartup.P50 <= SpawnTarget
	res.Target.MetAtP99 = res.Ratios.SpawnToBarePlusStartup.P99 <= SpawnTarget
	if opts.JSON {
		return output.PrintJSON(f.IO.Out, res)
	}
	printBenchSpawn(f.IO.Out, res)
	return nil
}

// cleanupTimeout bounds a benchmark's cleanup after success, failure or
// Ctrl-C, with workers left to stop one by one.
func cleanupTimeout(workers int) time.Duration {
	return factory.CleanupTimeout + time.Duration(workers)*200*time.Millisecond
}

// tenths is the p50 (ms) of the first and of the last tenth of ds (at
// least one each).
func tenths(ds []time.Duration) [2]float64 {
	if len(ds) == 0 {
		return [2]float64{}
	}
	n := max(1, len(ds)/10)
	return [2]float64{summarize(ds[:n]).P50Ms, summarize(ds[len(ds)-n:]).P50Ms}
}

// spawnAndTrack spawns a worker of the run.
func spawnAndTrack(ctx context.Context, sb *factory.Sandbox, req fleet.SpawnRequest) error {
	if _, err := sb.Spawn(ctx, req); err != nil {
		return fmt.Errorf("bench spawn: %w", err)
	}
	return nil
}

func printBenchSpawn(out io.Writer, r *SpawnResult) {
	where := "your user manager"
	if r.Manager == "private" {
		where = "a private user manager booted for the run"
	}
	fmt.Fprintf(out, "Spawn benchmark: %d exec workers running %q, systemd %s (%s).\n\n", r.Workers, strings.Join(r.Command, " "), r.SystemdVersion, where)
	tw := tabwriter.NewWriter(out, 0, 2, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tp50\tp99\t")
	row := func(name string, l Latency) { fmt.Fprintf(tw, "%s\t%s\t%s\t\n", name, ms(l.P50Ms), ms(l.P99Ms)) }
	times := func(name string, q Ratio) { fmt.Fprintf(tw, "%s\t%.2f×\t%.2f×\t\n", name, q.P50, q.P99) }
	row("bare unit start (Type=exec)", r.BareStart)
	row("worker shim start-up, outside systemd", r.ShimStartup)
	row("shim as a bare Type=notify unit", r.ShimUnitStart)
	row("worker spawn until READY", r.Spawn)
	times("spawn / bare", r.Ratios.SpawnToBare)
	times("spawn / (bare + shim start-up)", r.Ratios.SpawnToBarePlusStartup)
	times("spawn / shim unit", r.Ratios.SpawnToShimUnit)
	fmt.Fprintln(tw, "\t\t\t")
	row("bare unit stop", r.BareStop)
	row("bare unit with an exit record, stop", r.RecordUnitStop)
	row("shim as a bare notify unit, stop", r.ShimUnitStop)
	row("worker stop until cgroup proven empty", r.Stop)
	row("  fence", r.StopSteps.Fence)
	row("  signal until the shim's end", r.StopSteps.End)
	row("  cgroup proof", r.StopSteps.Proof)
	row("  outcome recorded", r.StopSteps.Record)
	row("  ended notice delivered", r.StopSteps.Notice)
	times("stop / bare", r.Ratios.StopToBare)
	times("stop / bare with an exit record", r.Ratios.StopToRecordUnit)
	times("stop / shim unit", r.Ratios.StopToShimUnit)
	tw.Flush()
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "missed"
	}
	fmt.Fprintf(out, "\nOne at a time: %.1f spawns/s. As the running units grow to %d of each kind, p50 of the first tenth → the last tenth:\n", r.SpawnsPerSecond, r.Workers)
	fmt.Fprintf(out, "  spawn %s → %s, bare unit start %s → %s; stop %s → %s, bare unit stop %s → %s (stops from %d running down to 1).\n",
		ms(r.Growth.Spawn[0]), ms(r.Growth.Spawn[1]), ms(r.Growth.BareStart[0]), ms(r.Growth.BareStart[1]),
		ms(r.Growth.Stop[0]), ms(r.Growth.Stop[1]), ms(r.Growth.BareStop[0]), ms(r.Growth.BareStop[1]), r.Workers)
	fmt.Fprintf(out, "\nTarget: spawn within %.1f× of the bare unit plus the command's own start-up — %s at p50, %s at p99.\n",
		r.Target.SpawnToBarePlusStartup, verdict(r.Target.MetAtP50), verdict(r.Target.MetAtP99))
	fmt.Fprintf(out, "Target: stop within %.1f× of the bare unit's stop — %s at p50 (%.2f×); the shim unit alone, with no fleet, stops in %.2f× the bare unit's time.\n",
		r.Target.StopToBare, verdict(r.Target.StopMetAtP50), r.Ratios.StopToBare.P50, r.Ratios.ShimUnitStopToBare.P50)
	fmt.Fprintln(out, "\nWhat the figures include:")
	for _, k := range []string{"bareStart", "shimStartup", "shimUnit", "spawn", "bareStop", "recordUnit", "stop", "stopSteps", "ratios"} {
		fmt.Fprintf(out, "  %-11s %s\n", k+":", r.Includes[k])
	}
}

func ms(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.2f ms", v)
	}
	return fmt.Sprintf("%.1f ms", v)
}

// summarize computes nearest-rank percentiles of ds.
func summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	toMs := func(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Microsecond)) / 1000 }
	rank := func(p float64) time.Duration { return s[max(0, int(math.Ceil(p/100*float64(len(s))))-1)] }
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return Latency{P50Ms: toMs(rank(50)), P99Ms: toMs(rank(99)), MinMs: toMs(s[0]), MaxMs: toMs(s[len(s)-1]),
		MeanMs: toMs(sum / time.Duration(len(s))), N: len(s)}
}

func randomTag() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// shimProbe runs the worker shim outside systemd, with a notify socket of
// its own, to time the command's own start-up until READY. Probes keep
// running (holding their sessions, like the workers they are compared with)
// until stopped.
type shimProbe struct {
	exe     string
	env     []string // added to the probes' environment
	command []string
	paths   intercom.Paths
	sock    *net.UnixConn
	path    string
	running map[string]*probeProc
}

// probeProc is one running probe shim.
type probeProc struct {
	cmd    *exec.Cmd
	exited chan error
}

func newShimProbe(p intercom.Paths, exe string, command, env []string) (*shimProbe, error) {
	path := filepath.Join(p.AgentDir, "notify.sock")
	sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("bench spawn: notify socket: %w", err)
	}
	return &shimProbe{exe: exe, env: env, command: command, paths: p, sock: sock, path: path, running: map[string]*probeProc{}}, nil
}

// close stops every probe still running and removes the notify socket.
func (sp *shimProbe) close() {
	for id := range sp.running {
		sp.stop(id)
	}
	sp.sock.Close()
	os.Remove(sp.path)
}

// stop ends the probe of worker id (SIGTERM, which it forwards to the
// command; SIGKILL after 10 s) and reaps it.
func (sp *shimProbe) stop(id string) {
	p := sp.running[id]
	if p == nil {
		return
	}
	delete(sp.running, id)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// run starts `agent-fleet worker-shim` as worker id and times it until
// READY=1; the probe then runs on until stop(id).
func (sp *shimProbe) run(ctx context.Context, id string) (time.Duration, error) {
	argv := append([]string{"worker-shim", "--id", id, "--run", randomTag() + randomTag(), "--"}, sp.command...)
	cmd := exec.Command(sp.exe, argv...)
	cmd.Env = append(append(os.Environ(), sp.env...), "NOTIFY_SOCKET="+sp.path)
	cmd.Dir = sp.paths.AgentDir
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("bench spawn: start the shim probe: %w", err)
	}
	p := &probeProc{cmd: cmd, exited: make(chan error, 1)}
	go func() { p.exited <- cmd.Wait() }()
	sp.running[id] = p
	ready := make(chan error, 1)
	go func() {
		buf := make([]byte, 4096)
		_ = sp.sock.SetReadDeadline(time.Now().Add(fleet.DefaultStartTimeout))
		for {
			n, _, err := sp.sock.ReadFromUnix(buf)
			if err != nil {
				ready <- err
				return
			}
			if strings.Contains(string(buf[:n]), "READY=1") {
				ready <- nil
				return
			}
		}
	}()
	var err error
	select {
	case err = <-ready:
		if err == nil {
			return time.Since(began), nil
		}
	case werr := <-p.exited:
		delete(sp.running, id)
		_ = sp.sock.SetReadDeadline(time.Now()) // ends the reader
		<-ready
		return 0, fmt.Errorf("bench spawn: the shim probe exited before READY (%v): %s", werr, strings.TrimSpace(stderr.String()))
	case <-ctx.Done():
		err = ctx.Err()
	}
	_ = sp.sock.SetReadDeadline(time.Now())
	<-ready
	sp.stop(id)
	return 0, fmt.Errorf("bench spawn: the shim probe: %w", err)
}
