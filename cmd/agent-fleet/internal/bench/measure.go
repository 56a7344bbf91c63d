package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"
)

// benchLoad is a running load whose completed messages can be counted.
// run connects, reports setup on ready, drives the load until ctx ends and
// returns once all it started has stopped.
type benchLoad interface {
	run(ctx context.Context, ready chan<- error)
	delivered() int
	latencies(from, to int) []int64
	firstErr() error
	failureCounts() map[string]int
}

// MeasurePlan says how long to measure.
type MeasurePlan struct {
	Warmup   time.Duration // run before measuring
	Duration time.Duration // measure this long, unless Messages is set
	Messages int           // measure until this many more messages completed
	Segment  int           // report every Segment messages (0: no segments)
}

// cpuFigures is a process's CPU time over a Measurement.
type cpuFigures struct {
	TotalMs float64 `json:"totalMs"`
	// PerMessageUs is CPU time per completed message, in µs.
	PerMessageUs float64 `json:"perMessageUs"`
	// CoreShare is the CPU time over the wall time: 1 = one core busy.
	CoreShare float64 `json:"coreShare"`
}

// memFigures is a process's resident memory at the end of a Measurement.
type memFigures struct {
	RSSMiB float64 `json:"rssMiB"`
	// PeakRSSMiB is the most the process had resident since it started
	// (VmHWM).
	PeakRSSMiB float64 `json:"peakRssMiB"`
}

// segment is one stretch of Segment messages of a long Measurement.
type segment struct {
	Index     int     `json:"index"`
	From      int     `json:"fromMessage"` // messages completed before it
	Messages  int     `json:"messages"`
	PerSecond float64 `json:"perSecond"`
	// Latency is send → delivered of the segment's messages.
	Latency latencyDist `json:"latency"`
	// BrokerCPUPerMessageUs and RSSMiB: see Measurement.
	BrokerCPUPerMessageUs float64 `json:"brokerCpuPerMessageUs,omitempty"`
	RSSMiB                float64 `json:"rssMiB,omitempty"`
}

// Measurement is what one measured run found.
type Measurement struct {
	DurationMs float64        `json:"durationMs"`
	Delivered  int            `json:"delivered"`
	Failed     map[string]int `json:"failed,omitempty"` // delivery_failed by code
	PerSecond  float64        `json:"perSecond"`
	// Latency is send → delivered: from just before the send frame is
	// written until its delivered frame is read.
	Latency      latencyDist `json:"latency"`
	BrokerCPU    *cpuFigures `json:"brokerCpu,omitempty"`
	BrokerMemory *memFigures `json:"brokerMemory,omitempty"`
	// BenchCPU is this process's own CPU time (the clients).
	BenchCPU *cpuFigures `json:"benchCpu,omitempty"`
	Segments []segment   `json:"segments,omitempty"`
}

type usageSample struct {
	at        time.Time
	delivered int
	broker    procUsage
	self      procUsage
}

// takeSample reads the load's progress and its brokers' usage: the sum
// over pids, unknown (not ok) when any is unknown.
func takeSample(l benchLoad, pids []int) usageSample {
	s := usageSample{at: time.Now(), delivered: l.delivered()}
	for i, pid := range pids {
		if pid <= 0 {
			s.broker = procUsage{}
			break
		}
		u, _ := readProcUsage(pid)
		if !u.ok {
			s.broker = procUsage{}
			break
		}
		if i == 0 {
			s.broker = u
			continue
		}
		s.broker.CPU += u.CPU
		s.broker.Exec += u.Exec
		s.broker.threads = append(s.broker.threads, u.threads...)
		s.broker.exact = s.broker.exact && u.exact
		s.broker.RSSKiB += u.RSSKiB
		s.broker.PeakKiB += u.PeakKiB
	}
	s.self, _ = readProcUsage(os.Getpid())
	return s
}

func cpuBetween(a, b procUsage, messages int, wall time.Duration) *cpuFigures {
	if !a.ok || !b.ok || messages <= 0 {
		return nil
	}
	d := cpuDelta(a, b)
	return &cpuFigures{TotalMs: round(float64(d)/float64(time.Millisecond), 1),
		PerMessageUs: round(float64(d)/float64(time.Microsecond)/float64(messages), 2),
		CoreShare:    round(float64(d)/float64(wall), 4)}
}

// measure runs l, lets it warm up, measures it as plan says, then stops
// it. pid is the broker process (0: unknown). Progress goes to log.
func measure(ctx context.Context, l benchLoad, pid int, plan MeasurePlan, log io.Writer) (*Measurement, error) {
	return measureBrokers(ctx, l, []int{pid}, plan, log)
}

// measureBrokers is measure of a load that several broker processes carry
// (pids): their CPU and memory figures are the sums.
func measureBrokers(ctx context.Context, l benchLoad, pids []int, plan MeasurePlan, log io.Writer) (*Measurement, error) {
	ctx, cancel := context.WithCancel(ctx)
	ready := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.run(ctx, ready)
	}()
	stop := func() {
		cancel()
		<-done
	}
	if err := <-ready; err != nil {
		stop()
		return nil, err
	}
	wait := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			if err := l.firstErr(); err != nil {
				return err
			}
			return ctx.Err()
		case <-time.After(d):
			return l.firstErr()
		}
	}
	if plan.Warmup > 0 {
		fmt.Fprintf(log, "bench: warming up for %s\n", plan.Warmup)
		if err := wait(plan.Warmup); err != nil {
			stop()
			return nil, err
		}
	}
	first := takeSample(l, pids)
	if plan.Messages > 0 {
		fmt.Fprintf(log, "bench: measuring %d messages\n", plan.Messages)
	} else {
		fmt.Fprintf(log, "bench: measuring for %s\n", plan.Duration)
	}
	m := &Measurement{}
	last := first
	lastProgress := time.Now()
	poll := 50 * time.Millisecond
	if plan.Segment > 0 || plan.Messages > 0 {
		poll = 2 * time.Millisecond
	}
	for {
		if err := wait(poll); err != nil {
			stop()
			return nil, err
		}
		n := l.delivered() - first.delivered
		finished := (plan.Messages > 0 && n >= plan.Messages) || (plan.Messages == 0 && time.Since(first.at) >= plan.Duration)
		if plan.Segment > 0 && (n-(last.delivered-first.delivered) >= plan.Segment || finished) {
			s := takeSample(l, pids)
			seg := segment{Index: len(m.Segments) + 1, From: last.delivered - first.delivered, Messages: s.delivered - last.delivered}
			seg.PerSecond = round(float64(seg.Messages)/s.at.Sub(last.at).Seconds(), 1)
			seg.Latency = distribution(l.latencies(last.delivered, s.delivered))
			if c := cpuBetween(last.broker, s.broker, seg.Messages, s.at.Sub(last.at)); c != nil {
				seg.BrokerCPUPerMessageUs = c.PerMessageUs
			}
			if s.broker.ok {
				seg.RSSMiB = mib(s.broker.RSSKiB)
			}
			if seg.Messages > 0 {
				m.Segments = append(m.Segments, seg)
				fmt.Fprintf(log, "bench: segment %d: %d messages, %.0f/s, p50 %s p99 %s, broker %.1f µs/msg, RSS %.1f MiB\n",
					seg.Index, seg.Messages, seg.PerSecond, fmtMs(seg.Latency.P50Ms), fmtMs(seg.Latency.P99Ms), seg.BrokerCPUPerMessageUs, seg.RSSMiB)
			}
			last = s
		} else if time.Since(lastProgress) >= 5*time.Second && plan.Segment == 0 {
			fmt.Fprintf(log, "bench: %d messages so far\n", n)
			lastProgress = time.Now()
		}
		if finished {
			break
		}
	}
	end := last // the last segment ends the Measurement
	if plan.Segment == 0 {
		end = takeSample(l, pids)
	}
	stop()
	if err := l.firstErr(); err != nil {
		return nil, err
	}
	wall := end.at.Sub(first.at)
	m.DurationMs = round(float64(wall)/float64(time.Millisecond), 1)
	m.Delivered = end.delivered - first.delivered
	m.PerSecond = round(float64(m.Delivered)/wall.Seconds(), 1)
	m.Latency = distribution(l.latencies(first.delivered, end.delivered))
	if f := l.failureCounts(); len(f) > 0 {
		m.Failed = f
	}
	m.BrokerCPU = cpuBetween(first.broker, end.broker, m.Delivered, wall)
	if end.broker.ok {
		m.BrokerMemory = &memFigures{RSSMiB: mib(end.broker.RSSKiB), PeakRSSMiB: mib(end.broker.PeakKiB)}
	}
	m.BenchCPU = cpuBetween(first.self, end.self, m.Delivered, wall)
	return m, nil
}
