package main

import (
	"context"
	"os"
	"runtime"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
)

type brokerOptions struct {
	Factory      *factory.Factory
	noIdleExit   bool
	idleExit     time.Duration
	maxSessions  int
	rateCapacity float64
	rateRefill   float64
	logLevel     string
	logToFile    bool
	detach       bool
	args         []string // the flags given, for --detach's broker
}

func newBrokerCmd(f *factory.Factory, runF func(*brokerOptions) error) *cobra.Command {
	opts := &brokerOptions{Factory: f}
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run the intercom broker in the foreground",
		Long: `Run the Agent Intercom protocol v4 broker in the foreground on
$PI_CODING_AGENT_DIR/intercom/broker.sock (default ~/.pi/agent/intercom), with
the agent-fleet local API beside it on agent-fleet.sock.

Clients start a broker on demand, so running one by hand is for debugging and
for service managers. It exits 5 s after the last session leaves unless
--no-idle-exit is given, and cleanly on SIGTERM or SIGINT. A second broker on
the same directory exits with status 4 and leaves the first untouched.

Started by systemd socket activation (agent-fleet-broker.socket, see
"agent-fleet install"), it serves the socket systemd passes it, never unlinks
or replaces it, and exits 5 s after its last session leaves (or after the
connection that woke it, if no session registers); systemd keeps listening.`,
		Example: `  agent-fleet broker
  PI_CODING_AGENT_DIR=$(mktemp -d) agent-fleet broker --no-idle-exit --log-level debug`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.Flags().Visit(func(fl *pflag.Flag) {
				if fl.Name != "detach" {
					opts.args = append(opts.args, "--"+fl.Name+"="+fl.Value.String())
				}
			})
			if runF != nil {
				return runF(opts)
			}
			return brokerRun(cmd.Context(), opts)
		},
	}
	fs := cmd.Flags()
	fs.BoolVar(&opts.noIdleExit, "no-idle-exit", false, "keep running when no session is connected")
	fs.DurationVar(&opts.idleExit, "idle-exit", broker.DefaultIdleExit, "exit this long after the last session leaves")
	fs.IntVar(&opts.maxSessions, "max-sessions", broker.DefaultMaxSessions, "most sessions registered at once")
	fs.Float64Var(&opts.rateCapacity, "rate-capacity", broker.DefaultRateCapacity, "per-connection token bucket size (1 token per started 8 KiB frame)")
	fs.Float64Var(&opts.rateRefill, "rate-refill", broker.DefaultRateRefill, "per-connection token refill, tokens per second")
	fs.StringVar(&opts.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.BoolVar(&opts.logToFile, "log-to-file", false, "log to broker.log in the intercom directory (trimmed past 1 MiB at start) instead of stderr")
	fs.BoolVar(&opts.detach, "detach", false, "start the broker in the background, detached from this process, and return")
	return cmd
}

func brokerRun(ctx context.Context, opts *brokerOptions) error {
	f := opts.Factory
	paths, err := f.Paths()
	if err != nil {
		return err
	}
	if opts.detach {
		return f.LaunchDetachedBroker(paths, opts.args)
	}
	logw := f.IO.Err
	if opts.logToFile {
		if err := intercom.EnsureDir(paths.Dir); err != nil {
			return err
		}
		f, err := intercom.PrepareBrokerLog(paths)
		if err != nil {
			return err
		}
		defer f.Close()
		logw = f
	}
	cfg := broker.Config{
		Paths:        paths,
		Logger:       factory.NewLogger(logw, opts.logLevel),
		MaxSessions:  opts.maxSessions,
		IdleExit:     opts.idleExit,
		RateCapacity: opts.rateCapacity,
		RateRefill:   opts.rateRefill,
		TrustedLocal: runtime.GOOS != "windows",
		CheckPeerUID: runtime.GOOS != "windows",
	}
	if opts.noIdleExit {
		cfg.IdleExit = -1
	}
	if cfg.AskTTL, err = f.BrokerAskTTL(); err != nil {
		return err
	}
	if opts.maxSessions < 1 || opts.rateCapacity < 1 || opts.rateRefill <= 0 {
		return factory.Usagef("--max-sessions, --rate-capacity and --rate-refill must be positive")
	}
	if os.Getenv("GOMAXPROCS") == "" {
		// The broker handles every frame on one event loop under one lock:
		// a second processor adds only thread hand-offs, which cost more
		// CPU than the frames at the rates agents send. GOMAXPROCS wins.
		runtime.GOMAXPROCS(1)
	}
	// A broker runs for hours on a small part of the binary.
	if _, err := factory.ReleaseStartupPages(); err != nil {
		cfg.Logger.Debug("could not release start-up pages", "err", err)
	}
	err = broker.ListenAndServe(ctx, cfg)
	if err != nil && opts.logToFile {
		cfg.Logger.Error("broker failed", "err", err) // for the log tail a client quotes
	}
	return err
}
