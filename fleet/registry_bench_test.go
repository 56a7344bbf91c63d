package fleet

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Registry benchmarks, on a real file (synchronous=NORMAL: WAL checkpoints fsync, commits do not).
// Run: go test -run '^$' -bench Registry -benchtime 2s ./fleet/
//
// Each runs against a registry already holding n workers (half live, four
// managers), so a regression that makes an operation scale with the fleet
// shows as the n=1000 figure drifting from the n=1 one.

var benchSizes = []int{1, 100, 1000}

// populate records n workers in one transaction: ids w0000…, every even one
// running, managers m0…m3.
func populate(b *testing.B, r *Registry, n int) {
	b.Helper()
	now := time.Now()
	err := r.write(context.Background(), func(tx querier) error {
		for i := range n {
			w := &Worker{
				ID: fmt.Sprintf("w%04d", i), RunID: fmt.Sprintf("%012x", i), Generation: 1,
				Kind: "exec", Role: "builder", Task: strings.Repeat("do the thing ", 8), Cwd: "/home/u/src/p",
				Command: []string{"/usr/bin/make", "-j4", "test"}, EnvKeys: []string{"TOKEN"},
				Manager: fmt.Sprintf("m%d", i%4), FirstManager: "m0",
				State: StateExited, CreatedAt: now, UpdatedAt: now, EndedAt: now,
				LeaseDuration: time.Hour, LeaseDeadline: now.Add(time.Hour), LastActivity: now,
			}
			w.Unit = WorkerUnitName(w.ID, w.RunID)
			if i%2 == 0 {
				w.State, w.EndedAt = StateRunning, time.Time{}
			}
			if err := recordLedger(context.Background(), tx, w, now.UnixMilli()); err != nil {
				return err
			}
			if err := insertWorker(context.Background(), tx, w); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

func benchRegistry(b *testing.B, n int) *Registry {
	b.Helper()
	r := openTestRegistry(b, registryPath(b), nil)
	populate(b, r, n)
	return r
}

// BenchmarkRegistryReserveUpdateGet is one spawn's registry work: Reserve,
// an Update to running, an Update to exited, a Get. Iteration i works on the
// odd (terminal) id i mod n, or on a spare id when n = 1, so every Reserve
// succeeds and the table grows by one incarnation per iteration.
func BenchmarkRegistryReserveUpdateGet(b *testing.B) {
	ctx := context.Background()
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			r := benchRegistry(b, n)
			var ids []string
			for i := 1; i < n; i += 2 {
				ids = append(ids, fmt.Sprintf("w%04d", i))
			}
			if len(ids) == 0 {
				ids = []string{"spare"}
			}
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				w := &Worker{ID: ids[i%len(ids)], Kind: "exec", Manager: "m1", Command: []string{"/bin/true"}}
				if err := r.Reserve(ctx, w); err != nil {
					b.Fatal(err)
				}
				if _, err := r.Update(ctx, w.ID, w.RunID, func(x *Worker) error {
					x.State, x.MainPID = StateRunning, 1234
					return nil
				}); err != nil {
					b.Fatal(err)
				}
				if _, err := r.Update(ctx, w.ID, w.RunID, func(x *Worker) error {
					x.State, x.HasExit, x.ExitCode = StateExited, true, "exited"
					return nil
				}); err != nil {
					b.Fatal(err)
				}
				if _, err := r.Get(ctx, w.ID); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRegistryGet is a status lookup of a live worker.
func BenchmarkRegistryGet(b *testing.B) {
	ctx := context.Background()
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			r := benchRegistry(b, n)
			id := fmt.Sprintf("w%04d", (n/2)&^1)
			for b.Loop() {
				if _, err := r.Get(ctx, id); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRegistryUpdate is a lease-activity write (one field, one fsync).
func BenchmarkRegistryUpdate(b *testing.B) {
	ctx := context.Background()
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			r := benchRegistry(b, n)
			id := fmt.Sprintf("w%04d", (n/2)&^1)
			run := fmt.Sprintf("%012x", (n/2)&^1)
			for b.Loop() {
				if _, err := r.Update(ctx, id, run, func(x *Worker) error {
					x.LastActivity = time.Now()
					return nil
				}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRegistryList is `list --all` (every record) and the default
// `list` (one manager's live workers).
func BenchmarkRegistryList(b *testing.B) {
	ctx := context.Background()
	for _, n := range benchSizes {
		r := benchRegistry(b, n)
		for _, c := range []struct {
			name string
			f    Filter
		}{
			{"all", Filter{}},
			{"manager-live", Filter{Manager: "m0", LiveOnly: true}},
		} {
			b.Run(fmt.Sprintf("%s/workers=%d", c.name, n), func(b *testing.B) {
				for b.Loop() {
					ws, err := r.List(ctx, c.f)
					if err != nil {
						b.Fatal(err)
					}
					if n > 1 && len(ws) == 0 {
						b.Fatal("empty list")
					}
				}
			})
		}
	}
}

// BenchmarkRegistryOpen is what every CLI invocation pays: open, quick_check,
// schema check, close.
func BenchmarkRegistryOpen(b *testing.B) {
	ctx := context.Background()
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			path := registryPath(b)
			r := openTestRegistry(b, path, nil)
			populate(b, r, n)
			r.Close()
			for b.Loop() {
				r, err := OpenRegistry(ctx, path)
				if err != nil {
					b.Fatal(err)
				}
				r.Close()
			}
		})
	}
}
