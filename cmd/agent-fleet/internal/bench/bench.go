// Package bench measures agent-fleet on the machine it runs on: an
// intercom broker through raw v4 frames (RunBroker), the Go client with its
// durable outbox and inbox (RunClient), worker spawn and stop beside a
// bare systemd unit (RunSpawn), and a fleet grown to hundreds of workers
// (RunFleet). Results are JSON-ready structs; the CLI
// (`agent-fleet bench`) prints them. Figures are machine-specific: compare
// medians of several runs, and ratios measured in one run.
package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
)

// latencyDist summarises a latency distribution in milliseconds (three
// decimals: microsecond resolution). Percentiles are nearest-rank.
type latencyDist struct {
	N      int     `json:"n"`
	P50Ms  float64 `json:"p50Ms"`
	P90Ms  float64 `json:"p90Ms"`
	P99Ms  float64 `json:"p99Ms"`
	P999Ms float64 `json:"p999Ms"`
	MaxMs  float64 `json:"maxMs"`
	MeanMs float64 `json:"meanMs"`
}

// distribution summarises ns, latencies in nanoseconds; ns is sorted in
// place.
func distribution(ns []int64) latencyDist {
	if len(ns) == 0 {
		return latencyDist{}
	}
	slices.Sort(ns)
	toMs := func(v int64) float64 { return math.Round(float64(v)/float64(time.Microsecond)) / 1000 }
	// Nearest rank, p·n/100 rounded up; the epsilon keeps 99.9·1000/100
	// at 999 despite floating point.
	rank := func(p float64) int64 { return ns[max(0, int(math.Ceil(p*float64(len(ns))/100-1e-9))-1)] }
	var sum float64
	for _, v := range ns {
		sum += float64(v)
	}
	return latencyDist{N: len(ns), P50Ms: toMs(rank(50)), P90Ms: toMs(rank(90)), P99Ms: toMs(rank(99)),
		P999Ms: toMs(rank(99.9)), MaxMs: toMs(ns[len(ns)-1]), MeanMs: toMs(int64(sum / float64(len(ns))))}
}

// procUsage is what the benchmarks read of a process: CPU time (user and
// system) and resident memory. ok is false where the platform or the
// permissions do not tell.
type procUsage struct {
	CPU     time.Duration // utime+stime: 10 ms resolution, exited threads included
	RSSKiB  int64
	PeakKiB int64 // VmHWM: the most the process ever had resident
	ok      bool

	// Exec is the time the live threads (threads) have run, to the
	// nanosecond (schedstat); exact is false when a thread could not be
	// read. See cpuDelta.
	Exec    time.Duration
	threads []int
	exact   bool
}

// cpuDelta is the CPU time a process (or the processes of a sample) used
// between a and b: from schedstat where every thread of a is still there
// in b, since the CPU time of a thread that exited meanwhile is gone from
// it; else from utime+stime. At 400 messages/s a broker uses about 50 ms
// of CPU in 8 s, which 10 ms ticks would measure to 20 %.
func cpuDelta(a, b procUsage) time.Duration {
	if a.exact && b.exact {
		live := make(map[int]bool, len(b.threads))
		for _, tid := range b.threads {
			live[tid] = true
		}
		all := true
		for _, tid := range a.threads {
			all = all && live[tid]
		}
		if all {
			return b.Exec - a.Exec
		}
	}
	return b.CPU - a.CPU
}

// progressLog is where a run reports its progress: standard error, and
// nowhere with --json (the result is the only output then).
func progressLog(f *factory.Factory, json bool) io.Writer {
	if json {
		return io.Discard
	}
	return f.IO.Err
}

func mib(kib int64) float64 { return math.Round(float64(kib)/1024*10) / 10 }

func round(v float64, decimals int) float64 {
	p := math.Pow10(decimals)
	return math.Round(v*p) / p
}

func fmtMs(v float64) string {
	switch {
	case v < 1:
		return fmt.Sprintf("%.3f ms", v)
	case v < 10:
		return fmt.Sprintf("%.2f ms", v)
	default:
		return fmt.Sprintf("%.1f ms", v)
	}
}
