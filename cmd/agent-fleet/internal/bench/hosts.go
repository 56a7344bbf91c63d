package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
	"github.com/agent-fleet/agent-fleet/intercom/federation"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// `bench hosts` measures what crossing hosts costs: two agent-fleet nodes
// (`agent-fleet node run`, each in its own temporary agent directory, as
// two hosts would be) joined through a NATS server embedded in the
// benchmark, and the same paced load as `bench broker` run in turns with
// the receivers on the senders' host (same-host) and on the other host
// (cross-host). Both runs go through the same two node processes, so the
// difference is the federation's: bridge, NATS and the second broker.

// HostsLong is bench hosts' help text.
const HostsLong = `Start two agent-fleet nodes ("agent-fleet node run", each in its own
temporary agent directory, as two hosts would be) joined through a NATS
server embedded in this benchmark, and run the bench broker load through raw
v4 frames in turns: receivers on the senders' node (same-host), and
receivers on the other node (cross-host: accepted and delivered come back
over NATS from the other host's broker). Each of --rounds runs both, the
first alternating. It prints every run, the medians of each placement —
p50/p99 send → delivered, messages/s, both nodes' CPU per message — and
cross-host over same-host. Both placements go through the same two node
processes, so the difference is what crossing hosts costs on this machine;
the two hosts share its CPUs, so a real network adds its round trip.

It stops both nodes and the NATS server and removes their directories
afterwards.`

// HostsOptions are the options of bench hosts.
type HostsOptions struct {
	Spec   LoadSpec
	Plan   MeasurePlan
	Rounds int
	JSON   bool
}

// Validate refuses a load that cannot run (usage errors naming the flag).
func (o *HostsOptions) Validate() error {
	lo := LoadOptions{Spec: o.Spec, Plan: o.Plan, Rounds: o.Rounds}
	if err := lo.Validate(); err != nil {
		return err
	}
	o.Spec, o.Rounds = lo.Spec, lo.Rounds
	// A node's broker keeps the v4 rate limit (node run has no flags to
	// raise it, as a real host would not).
	if need := rateTokensPerSecond(o.Spec); need < 0 || need > 0.9*broker.DefaultRateRefill {
		return factory.Usage(fmt.Errorf("--rate and --size need %s tokens/s per sender, above 90%% of the v4 rate limit (%g/s) that a node's broker keeps: lower --rate (0, unpaced, is not offered here)",
			fmtTokens(need), float64(broker.DefaultRateRefill)))
	}
	return nil
}

// HostsRun is one measured run of bench hosts.
type HostsRun struct {
	Round int `json:"round"`
	// Placement is "same-host" (receivers on the senders' node) or
	// "cross-host" (receivers on the other node).
	Placement string       `json:"placement"`
	Result    *Measurement `json:"result"`
}

// HostsResult is what `bench hosts --json` prints.
type HostsResult struct {
	Nodes  []hostNodeView `json:"nodes"`
	NATS   string         `json:"nats"`
	Load   LoadView       `json:"load"`
	Driver string         `json:"driver"`
	Rounds int            `json:"rounds"`
	Runs   []HostsRun     `json:"runs"`
	// Medians are by placement; CPUPerMessageUs is both nodes' CPU.
	Medians map[string]*SideFigures `json:"medians"`
	// CrossOverSame is each cross-host median over the same-host one
	// (above 1: crossing costs that many times as much).
	CrossOverSame ComparisonRatios  `json:"crossOverSame"`
	Includes      map[string]string `json:"includes"`
}

type hostNodeView struct {
	Name string `json:"name"`
	PID  int    `json:"pid"`
}

var benchHostsIncludes = map[string]string{
	"latency":   "send → delivered per message, as bench broker: the sender's broker reports delivered once the receiver acknowledged, across hosts only after the other host's broker reported it over NATS",
	"brokerCpu": "user+system CPU time of both node processes (broker, bridge and NATS link of each host) over the Measurement, divided by the messages delivered; the same-host runs load mostly the senders' node",
	"benchCpu":  "CPU time of this process: the clients and the embedded NATS server",
}

// RunHosts is `bench hosts`.
func RunHosts(ctx context.Context, f *factory.Factory, o *HostsOptions) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGHUP)
	defer stop()
	log := progressLog(f, o.JSON)
	hs, err := startHosts(ctx, f, log)
	if err != nil {
		return fmt.Errorf("bench hosts: %w", err)
	}
	defer hs.close(log)
	a, b := hs.nodes[0], hs.nodes[1]
	fmt.Fprintf(log, "bench: nodes %s (pid %d) and %s (pid %d) joined through NATS at %s\n", a.name, a.pid(), b.name, b.pid(), hs.nats.ClientURL())
	res := &HostsResult{NATS: "embedded in this process", Load: viewOfLoad(&LoadOptions{Spec: o.Spec, Plan: o.Plan}),
		Driver: "raw v4 frames", Rounds: o.Rounds, Includes: benchHostsIncludes}
	for _, n := range hs.nodes {
		res.Nodes = append(res.Nodes, hostNodeView{Name: n.name, PID: n.pid()})
	}
	pids := []int{a.pid(), b.pid()}
	for round := 1; round <= o.Rounds; round++ {
		order := []string{"same-host", "cross-host"}
		if round%2 == 0 {
			slices.Reverse(order)
		}
		for _, placement := range order {
			fmt.Fprintf(log, "bench: round %d/%d: %s\n", round, o.Rounds, placement)
			load := newRawLoad(o.Spec, a.dial)
			if placement == "cross-host" {
				load.dialReceiver = b.dial
				load.ready = func(ctx context.Context, receivers []string) error {
					return awaitListed(ctx, a.dial, load, receivers)
				}
			}
			m, err := measureBrokers(ctx, load, pids, o.Plan, log)
			if err != nil {
				return fmt.Errorf("bench hosts: %s run of round %d: %w", placement, round, err)
			}
			res.Runs = append(res.Runs, HostsRun{Round: round, Placement: placement, Result: m})
		}
	}
	res.Medians = map[string]*SideFigures{}
	var byPlacement []ComparisonRun
	for _, r := range res.Runs {
		byPlacement = append(byPlacement, ComparisonRun{Round: r.Round, Broker: r.Placement, Result: r.Result})
	}
	for _, placement := range []string{"same-host", "cross-host"} {
		res.Medians[placement] = medians(byPlacement, placement)
	}
	same, cross := res.Medians["same-host"], res.Medians["cross-host"]
	res.CrossOverSame = ComparisonRatios{P50: ratio(cross.P50Ms, same.P50Ms), P99: ratio(cross.P99Ms, same.P99Ms),
		PerSecond: ratio(cross.PerSecond, same.PerSecond)}
	if cross.CPUPerMessageUs != nil && same.CPUPerMessageUs != nil {
		res.CrossOverSame.CPUPerMessage = ratio(*cross.CPUPerMessageUs, *same.CPUPerMessageUs)
	}
	hs.close(log)
	if o.JSON {
		return output.PrintJSON(f.IO.Out, res)
	}
	printBenchHosts(f.IO.Out, res)
	return nil
}

// ratio is x/y rounded, nil when either is not positive.
func ratio(x, y float64) *float64 {
	if x <= 0 || y <= 0 {
		return nil
	}
	r := round(x/y, 2)
	return &r
}

func printBenchHosts(out io.Writer, r *HostsResult) {
	fmt.Fprintf(out, "Hosts benchmark: nodes %s and %s joined through a NATS server %s, through %s.\n",
		r.Nodes[0].Name, r.Nodes[1].Name, r.NATS, r.Driver)
	printLoad(out, r.Load)
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 2, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tplacement\tmsg/s\tp50\tp99\tnodes µs/msg\tbench µs/msg\t")
	for _, run := range r.Runs {
		m := run.Result
		nodes, self := "-", "-"
		if m.BrokerCPU != nil {
			nodes = fmt.Sprintf("%.1f", m.BrokerCPU.PerMessageUs)
		}
		if m.BenchCPU != nil {
			self = fmt.Sprintf("%.1f", m.BenchCPU.PerMessageUs)
		}
		fails := ""
		if len(m.Failed) > 0 {
			fails = fmt.Sprintf(" (%v failed)", m.Failed)
		}
		fmt.Fprintf(tw, "%d\t%s\t%.0f\t%s\t%s\t%s\t%s\t%s\n", run.Round, run.Placement, m.PerSecond,
			fmtMs(m.Latency.P50Ms), fmtMs(m.Latency.P99Ms), nodes, self, fails)
	}
	tw.Flush()
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 2, 2, ' ', 0)
	for _, placement := range []string{"same-host", "cross-host"} {
		s := r.Medians[placement]
		cpu := "unknown"
		if s.CPUPerMessageUs != nil {
			cpu = fmt.Sprintf("%.1f µs/msg", *s.CPUPerMessageUs)
		}
		fmt.Fprintf(tw, "  median %s\tp50 %s  p99 %s  %.0f msg/s  nodes CPU %s\n", placement, fmtMs(s.P50Ms), fmtMs(s.P99Ms), s.PerSecond, cpu)
	}
	tw.Flush()
	x := r.CrossOverSame
	fmt.Fprintf(out, "Cross-host over same-host: p50 %s, p99 %s, nodes CPU per message %s.\n", fmtRatio(x.P50), fmtRatio(x.P99), fmtRatio(x.CPUPerMessage))
}

func fmtTokens(need float64) string {
	if need < 0 {
		return "unbounded"
	}
	return fmt.Sprintf("%g", need)
}

func fmtRatio(r *float64) string {
	if r == nil {
		return "unknown"
	}
	return fmt.Sprintf("%.2f×", *r)
}

// benchHosts is the two nodes of a bench hosts run and their NATS server.
type benchHosts struct {
	dir    string
	nats   *federation.Embedded
	nodes  []*benchNode
	closed bool
}

// benchNode is one host's `agent-fleet node run`.
type benchNode struct {
	name   string
	paths  intercom.Paths
	cmd    *exec.Cmd
	exited chan error
	log    string
}

func (n *benchNode) pid() int { return n.cmd.Process.Pid }

func (n *benchNode) dial(ctx context.Context) (net.Conn, error) {
	return intercom.DialBroker(ctx, n.paths)
}

// startHosts starts the NATS server and both nodes, each sharing the
// benchmark's sessions, and waits until each node's broker answers.
func startHosts(ctx context.Context, f *factory.Factory, log io.Writer) (_ *benchHosts, err error) {
	dir, err := os.MkdirTemp("", "afbh")
	if err != nil {
		return nil, err
	}
	hs := &benchHosts{dir: dir}
	defer func() {
		if err != nil {
			hs.close(log)
		}
	}()
	names := []string{"bench-a", "bench-b"}
	type identity struct{ seed, public string }
	ids := make([]identity, len(names))
	for i := range names {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return nil, err
		}
		seed, _ := kp.Seed()
		pub, _ := kp.PublicKey()
		ids[i] = identity{string(seed), pub}
	}
	serverPaths := intercom.NewPaths(filepath.Join(dir, "nats"))
	scfg := federation.NewConfig(serverPaths)
	scfg.Name = "bench-nats"
	scfg.Embedded = &federation.EmbeddedConfig{Listen: "127.0.0.1:0", Nkeys: []string{ids[0].public, ids[1].public}}
	if err := os.MkdirAll(serverPaths.Dir, intercom.DirMode); err != nil {
		return nil, err
	}
	if hs.nats, err = federation.StartEmbedded(scfg, nil); err != nil {
		return nil, err
	}
	keyFile := filepath.Join(dir, "cluster.key")
	if _, err := federation.GenerateClusterKey(keyFile); err != nil {
		return nil, err
	}
	exe, err := f.Exe()
	if err != nil {
		return nil, err
	}
	for i, name := range names {
		p := intercom.NewPaths(filepath.Join(dir, name))
		if err := intercom.CheckSocketPath(p.LocalAPISocket()); err != nil {
			return nil, err
		}
		if err := intercom.EnsureDir(p.Dir); err != nil {
			return nil, err
		}
		seedFile := filepath.Join(p.Dir, "nkey.seed")
		if err := os.WriteFile(seedFile, []byte(ids[i].seed+"\n"), intercom.FileMode); err != nil {
			return nil, err
		}
		cfg := &federation.Config{Name: name, Cluster: "bench", Prefix: "agent-fleet-bench", URLs: []string{hs.nats.ClientURL()},
			Nkey: seedFile, ClusterKeyFile: keyFile, Share: federation.Share{Sessions: []string{"bench-*"}}}
		if err := federation.WriteConfig(p, cfg); err != nil {
			return nil, err
		}
		n := &benchNode{name: name, paths: p, log: filepath.Join(p.Dir, "node.log")}
		hs.nodes = append(hs.nodes, n)
		if err := n.start(ctx, exe, f.ChildEnv); err != nil {
			return nil, fmt.Errorf("node %s: %w", name, err)
		}
	}
	return hs, nil
}

// start runs `agent-fleet node run` for n and waits (at most 30 s) until
// its broker answers.
func (n *benchNode) start(ctx context.Context, exe string, childEnv []string) error {
	logf, err := os.OpenFile(n.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, intercom.FileMode)
	if err != nil {
		return err
	}
	defer logf.Close()
	n.cmd = exec.Command(exe, "node", "run", "--log-level", "warn")
	n.cmd.Env = append(append(os.Environ(), childEnv...), intercom.AgentDirEnv+"="+filepath.Dir(n.paths.Dir))
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	n.cmd.Dir = n.paths.Dir
	if err := n.cmd.Start(); err != nil {
		return err
	}
	n.exited = make(chan error, 1)
	go func() { n.exited <- n.cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if h, _ := intercom.ProbeBroker(ctx, n.paths); h == intercom.Compatible {
			return nil
		}
		select {
		case err := <-n.exited:
			n.exited <- err
			out, _ := os.ReadFile(n.log)
			return fmt.Errorf("node run exited before its broker answered (%v): %s", err, strings.TrimSpace(string(out)))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("its broker did not answer within 30 s")
		}
	}
}

// close stops both nodes (SIGTERM, SIGKILL after 5 s, by pid), the NATS
// server, and removes the directories. Safe to call twice.
func (hs *benchHosts) close(log io.Writer) {
	if hs.closed {
		return
	}
	hs.closed = true
	for _, n := range hs.nodes {
		if n.cmd == nil || n.cmd.Process == nil || n.exited == nil {
			continue
		}
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.exited:
		case <-time.After(5 * time.Second):
			fmt.Fprintf(log, "bench: node %s (pid %d) did not stop in 5 s; killing it\n", n.name, n.pid())
			_ = n.cmd.Process.Kill()
			<-n.exited
		}
	}
	if hs.nats != nil {
		hs.nats.Shutdown()
	}
	os.RemoveAll(hs.dir)
}

// awaitListed waits (at most 60 s) until the broker dial reaches lists
// every receiver: announced by the other host and known here as proxy
// sessions. It lists through a probe session in each scope of the load.
func awaitListed(ctx context.Context, dial dialer, l *rawLoad, receivers []string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	want := map[string]bool{}
	for _, r := range receivers {
		want[r] = true
	}
	for s := 0; s < max(1, l.spec.Scopes) && s < max(1, len(receivers)); s++ {
		nc, br, err := l.registerConn(ctx, dial, fmt.Sprintf("bench-%s-probe-%d", l.tag, s), l.scope(s))
		if err != nil {
			return err
		}
		err = func() error {
			defer nc.Close()
			fr := wire.NewFrameReader(br)
			for n := 0; ; n++ {
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("the receivers on the other host are not listed on the senders' host: %w", err)
				}
				_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
				rid := fmt.Sprintf("probe-%d", n)
				if _, err := nc.Write(wire.AppendListRequest(nil, rid)); err != nil {
					return err
				}
				for {
					p, err := fr.Next()
					if err != nil {
						return err
					}
					f, err := wire.DecodeBrokerFrame(p)
					if err != nil {
						return err
					}
					if f.Type != wire.TypeSessions || f.RequestID != rid {
						continue
					}
					for _, si := range f.Sessions {
						delete(want, si.ID)
					}
					break
				}
				if !anyInScope(want, l, s) {
					return nil
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		if err != nil {
			return err
		}
	}
	return nil
}

// anyInScope says whether a receiver still wanted is in scope s (pair i's
// receiver is in scope i mod Scopes).
func anyInScope(want map[string]bool, l *rawLoad, s int) bool {
	for p := 0; p < l.spec.Pairs; p++ {
		if p%max(1, l.spec.Scopes) == s && want[fmt.Sprintf("bench-%s-recv-%d", l.tag, p)] {
			return true
		}
	}
	return false
}
