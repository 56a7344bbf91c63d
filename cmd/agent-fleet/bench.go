package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/bench"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
)

func newBenchCmd(f *factory.Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure agent-fleet on this machine",
		Long: `Measure agent-fleet on this machine:

  bench broker   send → delivered latency, throughput, broker CPU and memory,
                 through raw v4 frames against any v4 broker (--socket)
  bench client   the same through the Go client with its durable outbox and
                 inbox, beside a raw-frame run at the same load
  bench spawn    worker spawn and stop latency beside a bare systemd unit
  bench fleet    a fleet grown to hundreds of workers: spawn throughput, list,
                 status and janitor times, registry, broker and memory growth
  bench hosts    the bench broker load across two hosts joined over NATS,
                 beside the same load on one host, in turns

Figures depend on the machine and on what else runs on it: run a benchmark
several times and compare medians.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newBenchBrokerCmd(f, nil), newBenchClientCmd(f, nil), newBenchSpawnCmd(f, nil), newBenchFleetCmd(f, nil), newBenchHostsCmd(f, nil))
	return cmd
}

// registerLoadFlags adds the load flags bench broker and bench client
// share.
func registerLoadFlags(fs *pflag.FlagSet, o *bench.LoadOptions) {
	registerPaceFlags(fs, &o.Spec, &o.Plan, 20*time.Second)
	fs.IntVar(&o.Plan.Messages, "messages", 0, "measure until this many messages are delivered")
	fs.IntVar(&o.Plan.Segment, "segment", 0, "also report every this many delivered messages: latency, broker CPU per message, memory")
	fs.StringVar(&o.Socket, "socket", "", "measure the broker listening on this Unix socket instead of starting one")
	fs.IntVar(&o.PID, "pid", 0, "the --socket broker's pid, for CPU and memory (default: broker.pid beside the socket, or its local API)")
	fs.BoolVar(&o.JSON, "json", false, "print the result as JSON")
	fs.BoolVar(&o.Awake, "awake", false, "keep every CPU out of idle while measuring (busy loops at the lowest priority, SCHED_IDLE), so that no latency includes waking an idle CPU (Linux)")
}

// registerPaceFlags adds the load's shape (pairs, size, rate, window) and
// how long each run warms up and measures.
func registerPaceFlags(fs *pflag.FlagSet, spec *bench.LoadSpec, plan *bench.MeasurePlan, measure time.Duration) {
	fs.IntVar(&spec.Pairs, "pairs", bench.DefaultPairs, "sender/receiver session pairs")
	fs.IntVar(&spec.TextBytes, "size", bench.DefaultSize, "bytes of message text")
	fs.Float64Var(&spec.Rate, "rate", bench.DefaultRate, "messages/s each sender offers; 0 = as fast as the window allows (unpaced)")
	fs.IntVar(&spec.Window, "window", 16, "sends in flight per sender (1–64, the v4 per-sender limit)")
	fs.DurationVar(&plan.Warmup, "warmup", 2*time.Second, "run this long before measuring, each run")
	fs.DurationVar(&plan.Duration, "duration", measure, "measure each run this long (bench broker: ignored with --messages)")
}

type benchBrokerOptions struct {
	Factory *factory.Factory
	Load    bench.LoadOptions
}

func newBenchBrokerCmd(f *factory.Factory, runF func(*benchBrokerOptions) error) *cobra.Command {
	opts := &benchBrokerOptions{Factory: f}
	cmd := &cobra.Command{
		Use:   "broker [--socket PATH] [--against PATH] [--pairs N] [--size BYTES] [--rate MSGS/S] [--window N] [--json]",
		Short: "Latency, throughput, CPU and memory of an intercom broker, through raw v4 frames",
		Long:  bench.BrokerLong,
		Example: `  agent-fleet bench broker
  agent-fleet bench broker --rate 0 --window 64 --duration 10s
  agent-fleet bench broker --sessions 1000 --scopes 10 --presence-interval 10s
  agent-fleet bench broker --rate 2000 --messages 1000000 --segment 100000
  agent-fleet bench broker --socket /tmp/ref/intercom/broker.sock --json
  agent-fleet bench broker --against /tmp/ref/intercom/broker.sock --rounds 4
  agent-fleet bench broker --against /tmp/ref/intercom/broker.sock --awake`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.Load.Validate(); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return benchBrokerRun(cmd.Context(), opts)
		},
	}
	fs := cmd.Flags()
	registerLoadFlags(fs, &opts.Load)
	fs.IntVar(&opts.Load.Sessions, "sessions", 0, "sessions registered in all, the pairs' among them (0 = just the pairs); the others only read and publish presence")
	fs.IntVar(&opts.Load.Spec.Scopes, "scopes", 1, "scopes the sessions are spread over, round-robin")
	fs.DurationVar(&opts.Load.Spec.PresenceEvery, "presence-interval", 0, "each session sends a presence update this often (0 = never)")
	fs.StringVar(&opts.Load.Against, "against", "", "also measure the v4 broker on this Unix socket, in turns, and print the ratios")
	fs.IntVar(&opts.Load.AgainstPID, "against-pid", 0, "the --against broker's pid, for CPU and memory (default: broker.pid beside the socket, or its local API)")
	fs.IntVar(&opts.Load.Rounds, "rounds", 3, "with --against: runs of each broker")
	return cmd
}

func benchBrokerRun(ctx context.Context, opts *benchBrokerOptions) error {
	return bench.RunBroker(ctx, opts.Factory, &opts.Load)
}

type benchClientOptions struct {
	Factory *factory.Factory
	Client  bench.ClientOptions
}

func newBenchClientCmd(f *factory.Factory, runF func(*benchClientOptions) error) *cobra.Command {
	opts := &benchClientOptions{Factory: f}
	opts.Client.Spec.Scopes = 1
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
			if err := opts.Client.Validate(); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return benchClientRun(cmd.Context(), opts)
		},
	}
	registerLoadFlags(cmd.Flags(), &opts.Client.LoadOptions)
	cmd.Flags().BoolVar(&opts.Client.Raw, "raw", true, "also run the load through raw frames first, for comparison")
	return cmd
}

func benchClientRun(ctx context.Context, opts *benchClientOptions) error {
	return bench.RunClient(ctx, opts.Factory, &opts.Client)
}

type benchSpawnOptions struct {
	Factory *factory.Factory
	Spawn   bench.SpawnOptions
}

func newBenchSpawnCmd(f *factory.Factory, runF func(*benchSpawnOptions) error) *cobra.Command {
	opts := &benchSpawnOptions{Factory: f}
	cmd := &cobra.Command{
		Use:   "spawn [--workers N] [--json]",
		Short: "Spawn-to-ready and stop-to-verified-clean latency, beside a bare transient unit",
		Long: `Spawn N exec workers running "sleep 86400" one after another and stop them again,
timing fleet.Spawn (until the worker shim signalled READY: the command was
executed and the worker's intercom session registered) and fleet.Stop (until
its cgroup is proven empty of the worker's processes). In the same run, on the same
D-Bus connection, it starts and stops a bare transient unit (Type=exec, the
same command) per worker, timed from the start call to its job done, and runs
the worker shim N times outside systemd to measure the command's own start-up
(exec of agent-fleet, intercom registration, session holder, exec of the
command, READY). The four kinds take turns in a random order each round, and
everything started runs until the stop phase, so each start meets the same
units and sessions; the stops take turns too, beside a bare unit with a
worker's exit record (the ExecStopPost a worker's unit runs once its shim
has ended) and the shim as a bare notify unit, and each worker stop is split
into its steps. It reports p50/p99 of each and
the ratios; the targets are a spawn within 1.3× of the bare unit plus that
start-up, and a stop within 2.5× of the bare unit's stop. It also gives the
one-at-a-time spawn rate and the p50 of the first and the last tenth of the
rounds, so that --workers 500 (2,000 units and processes at the end: about
15,000 tasks) shows how each figure grows as the units pile up; bench fleet
measures a fleet of that size as its managers use it.

It runs in a temporary agent directory with its own broker, on your user
manager — or, as root on a machine whose PID 1 is not systemd, on a private
one booted for the run — and removes everything it started.`,
		Example: "  agent-fleet bench spawn --workers 50\n  agent-fleet bench spawn --workers 500\n  agent-fleet bench spawn --workers 10 --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Spawn.Workers < 1 || opts.Spawn.Workers > 500 {
				return factory.Usagef("--workers must be between 1 and 500")
			}
			if runF != nil {
				return runF(opts)
			}
			return benchSpawnRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().IntVar(&opts.Spawn.Workers, "workers", 50, "how many workers (and bare units) to start and stop")
	cmd.Flags().BoolVar(&opts.Spawn.JSON, "json", false, "print the result as JSON")
	cmd.Flags().BoolVar(&opts.Spawn.NoBoot, "no-boot", false, "never boot a private user manager")
	return cmd
}

func benchSpawnRun(ctx context.Context, opts *benchSpawnOptions) error {
	return bench.RunSpawn(ctx, opts.Factory, &opts.Spawn)
}

type benchFleetOptions struct {
	Factory *factory.Factory
	Fleet   bench.FleetOptions
}

func newBenchFleetCmd(f *factory.Factory, runF func(*benchFleetOptions) error) *cobra.Command {
	opts := &benchFleetOptions{Factory: f}
	cmd := &cobra.Command{
		Use:   "fleet [--sizes N,N,…] [--managers M] [--parallel P] [--samples S] [--json]",
		Short: "Spawn throughput, list/status/janitor times and memory as a fleet grows to hundreds of workers",
		Long: `Grow a fleet of exec workers running "sleep 86400", owned round-robin by
--managers managers (each also an intercom session of the benchmark), to each
of --sizes in turn, and measure it at each size:

  spawn       workers/s and p50/p99 until READY, half of each step's new
              workers one at a time (each followed by a bare Type=exec unit's
              start, the reference) and half --parallel at a time
  list        through the CLI's own code path, in-process (open the fleet:
              D-Bus connection, registry, reconcile; list; the text table):
              one manager's workers, and --all; beside the one ListUnits D-Bus
              call it makes, and "agent-fleet list --all --json" as a process
              beside "systemctl --user list-units" of the same units
  status      of a random worker, the same way
  janitor     "cleanup --execute" passes with nothing due
  files       the registry (fleet.db and its WAL) and the workers.json view
  broker      its sessions (workers plus managers), resident memory and CPU
  memory      the user manager's, and each worker's private memory and tasks

It then prints how each figure grew from the smallest size to the largest:
for times the exponent k of time ∝ workers^k (1 is linear), for memory what
each added worker cost between sizes. The aim for list --all is under 50 ms
at p50 with 500 workers. Every exec worker waits out the readiness grace
(250 ms, AGENT_FLEET_READY_GRACE) before READY, so one-at-a-time spawns run
at about 3 a second and concurrent ones overlap their graces.

It runs in a temporary agent directory with its own broker, on your user
manager — or, as root on a machine whose PID 1 is not systemd, on a private
one booted for the run — and at the end stops every worker (--parallel at a
time, each until its cgroup is proven empty), its bare units, its broker and
its manager, and checks by name that no unit of the run is left. Workers
carry a 1 h RuntimeMaxSec, so systemd ends them even if the benchmark is
killed. 500 workers need about 2 GiB of memory and 5,000 tasks.`,
		Example: "  agent-fleet bench fleet\n  agent-fleet bench fleet --sizes 20,50 --managers 5 --samples 10 --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.Fleet.Validate(); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return benchFleetRun(cmd.Context(), opts)
		},
	}
	fs := cmd.Flags()
	fs.IntSliceVar(&opts.Fleet.Sizes, "sizes", []int{50, 200, 500}, "fleet sizes to measure at, ascending")
	fs.IntVar(&opts.Fleet.Managers, "managers", 50, "managers owning the workers, round-robin")
	fs.IntVar(&opts.Fleet.Parallel, "parallel", 8, "spawns in flight in the concurrent half of each step (and stops in the teardown)")
	fs.IntVar(&opts.Fleet.Samples, "samples", 30, "measurements of each list and status kind per size")
	fs.BoolVar(&opts.Fleet.JSON, "json", false, "print the result as JSON")
	fs.BoolVar(&opts.Fleet.NoBoot, "no-boot", false, "never boot a private user manager")
	return cmd
}

func benchFleetRun(ctx context.Context, opts *benchFleetOptions) error {
	return bench.RunFleet(ctx, opts.Factory, &opts.Fleet)
}

type benchHostsOptions struct {
	Factory *factory.Factory
	Hosts   bench.HostsOptions
}

func newBenchHostsCmd(f *factory.Factory, runF func(*benchHostsOptions) error) *cobra.Command {
	opts := &benchHostsOptions{Factory: f}
	cmd := &cobra.Command{
		Use:     "hosts [--pairs N] [--size BYTES] [--rate MSGS/S] [--window N] [--rounds N] [--json]",
		Short:   "Send → delivered latency and CPU across two hosts joined over NATS, beside one host",
		Long:    bench.HostsLong,
		Example: "  agent-fleet bench hosts\n  agent-fleet bench hosts --pairs 8 --rate 50 --duration 5s --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.Hosts.Validate(); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return bench.RunHosts(cmd.Context(), opts.Factory, &opts.Hosts)
		},
	}
	opts.Hosts.Spec.Scopes = 1
	registerPaceFlags(cmd.Flags(), &opts.Hosts.Spec, &opts.Hosts.Plan, 10*time.Second)
	cmd.Flags().IntVar(&opts.Hosts.Rounds, "rounds", 3, "runs of each placement")
	cmd.Flags().BoolVar(&opts.Hosts.JSON, "json", false, "print the result as JSON")
	return cmd
}
