package intercom_test

import (
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// BenchmarkClientSendDelivered measures send → delivered through the Go
// client with its durable outbox (sender) and inbox (receiver, atomic
// write with fsync before the acknowledgement), `window` sends in flight.
// Compare with the raw-frame BenchmarkSendDelivered of intercom/broker to
// see the cost of durability.
func BenchmarkClientSendDelivered(b *testing.B) {
	for _, window := range []int{1, 16} {
		b.Run(fmt.Sprintf("window=%d", window), func(b *testing.B) {
			benchClient(b, window)
		})
	}
}

func benchClient(b *testing.B, window int) {
	dir, err := os.MkdirTemp("", "afbench")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	p := intercom.NewPaths(dir)
	br := startBenchBroker(b, p)
	defer br.Stop()
	open := func(id string) *intercom.Session {
		ident, err := intercom.ResolveIdentity(intercom.IdentityOptions{Kind: intercom.OneShot, Cwd: "/bench",
			Getenv: func(k string) string {
				if k == intercom.SessionIDEnv {
					return id
				}
				return ""
			}})
		if err != nil {
			b.Fatal(err)
		}
		s, err := intercom.OpenSession(ctx, intercom.SessionConfig{Paths: p, Identity: ident})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	sender, receiver := open("sender"), open("receiver")
	defer sender.Close()
	defer receiver.Close()
	// The receiver consumes as it goes, as a listener does.
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			_, _ = receiver.Pending(ctx, intercom.PendingRequest{MarkRead: true})
		}
	}()
	defer close(stop)
	lat := make([]time.Duration, b.N)
	var next int64
	var mu sync.Mutex
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < window; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= int64(b.N) {
					return
				}
				t0 := time.Now()
				res, err := sender.Send(ctx, intercom.SendRequest{To: "receiver", Text: "benchmark message payload of a realistic size"})
				if err != nil || !res.OK {
					b.Errorf("send %d: %v %+v", i, err, res)
					return
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
