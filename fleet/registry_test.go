package fleet

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/units"
)

// ---- helpers ----

// testClock is an injected clock that tests move by hand.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock {
	return &testClock{t: time.Date(2026, 3, 1, 12, 0, 0, 123_456_789, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// registryPath is where a test's registry lives, below a fresh agentDir.
func registryPath(t testing.TB) string {
	return filepath.Join(t.TempDir(), "intercom", "orchestrator", "fleet.db")
}

func openTestRegistry(t testing.TB, path string, clock *testClock) *Registry {
	t.Helper()
	opts := RegistryOptions{}
	if clock != nil {
		opts.Now = clock.Now
	}
	r, err := OpenRegistryWithOptions(context.Background(), path, opts)
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	return r
}

// ms is t as the registry stores it.
func ms(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return time.UnixMilli(t.UnixMilli()).UTC()
}

// finish moves a worker to a terminal state.
func finish(t testing.TB, r *Registry, w *Worker, s State) *Worker {
	t.Helper()
	out, err := r.Update(context.Background(), w.ID, w.RunID, func(x *Worker) error {
		x.State = s
		return nil
	})
	require.NoError(t, err)
	return out
}

// fileSnapshot is a file's bytes and mtime, and the names in its directory.
type fileSnapshot struct {
	data    []byte
	mtime   time.Time
	mode    os.FileMode
	dirList []string
}

func snapshot(t *testing.T, path string) fileSnapshot {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	st, err := os.Stat(path)
	require.NoError(t, err)
	ents, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return fileSnapshot{data: data, mtime: st.ModTime(), mode: st.Mode(), dirList: names}
}

// assertOnlyEmptyCompanions checks that a refused open left at most the empty
// -wal and -shm files SQLite creates to read a WAL database.
func assertOnlyEmptyCompanions(t *testing.T, path string, dirList []string) {
	t.Helper()
	base := filepath.Base(path)
	for _, name := range dirList {
		switch name {
		case base, base + "-shm":
		case base + "-wal":
			st, err := os.Stat(path + "-wal")
			require.NoError(t, err)
			assert.Zero(t, st.Size(), "the WAL gained content")
		default:
			t.Errorf("unexpected file %s", name)
		}
	}
}

// ---- round trip ----

func fullWorker() *Worker {
	at := func(s int) time.Time {
		// Non-UTC location and nanoseconds: the registry keeps milliseconds in UTC.
		return time.Date(2026, 2, 3, 4, 5, s, 987_654_321, time.FixedZone("CET", 3600))
	}
	return &Worker{
		ID: "wörker-ids-are-ascii", RunID: "0123456789ab", Generation: 7,
		Kind: "claude", Role: "reviewer — 審査", Task: "Fix the bug 🐛\nline two \"quoted\" \\ back\x01slash",
		Cwd:     "/home/ü/src/project with spaces",
		Command: []string{"/usr/bin/env", "--flag=値", "", "a\"b", "tab\there", "nl\nx"},
		EnvKeys: []string{"API_TOKEN", "ÜNICODE_KEY"},
		Model:   "claude-opus-4", Effort: "high", Permission: "acceptEdits",
		Unit:    "agent-fleet-worker-x-0123456789ab.service",
		MainPID: 4242, ControlGroup: "/user.slice/user-1000.slice/user@1000.service/app.slice/x.service",
		InvocationID: "e3b0c44298fc1c149afbf4c8996fb924", LogPath: "/tmp/logs/x-0123456789ab.log",
		State: StateExited, StateReason: "exited on its own",
		Manager: "mgr-2", FirstManager: "operator-root",
		LeaseDuration: 90*time.Minute + 1500*time.Microsecond, LeaseDeadline: at(1), LastActivity: at(2),
		CheckpointSentAt: at(3), CheckpointAttempts: 3, GraceDeadline: at(4),
		CreatedAt: at(5), UpdatedAt: at(6), ReadyAt: at(7), StopRequestedAt: at(8), EndedAt: at(9),
		HasExit: true, ExitCode: "killed", ExitStatus: 9,
		LastError: "stop: cgroup not empty: 17 (sleep)", StopReason: "idle-grace-expired",
		Budget: Budget{USD: 12.5, Tokens: 3_000_000},
		Usage: harness.UsageTotals{Turns: 4, InputTokens: 1200, OutputTokens: 3400, CacheReadTokens: 56000, CacheWriteTokens: 7800,
			CostUSD: 0.734521, UnpricedTurns: 1, Model: "claude-sonnet-4-5-20250929"},
		PausedUntil: at(10),
		Limits:      units.Limits{MemoryMax: 64 << 20, CPUQuotaPercent: 150, TasksMax: 256},
		FrozenAt:    at(11),
		Profile:     ProfileWorkspace, ProfileDegraded: "not enforced here: InaccessiblePaths (x)",
		PermissionWait: 90*time.Second + 400*time.Microsecond,
		NeedsInput:     "permission to run `npm install` — 許可",
		StopTimeout:    12*time.Second + 300*time.Microsecond,
	}
}

func TestRoundTripEveryField(t *testing.T) {
	ctx := context.Background()
	r := openTestRegistry(t, registryPath(t), nil)

	in := fullWorker()
	in.ID = "full-1"
	// Every field is set, so a field added later without storage fails here.
	// Worktree is stored in a table of its own (TestWorktreeRecordRoundTrip).
	v := reflect.ValueOf(*in)
	for i := range v.NumField() {
		if v.Type().Field(i).Name == "Worktree" {
			continue
		}
		assert.False(t, v.Field(i).IsZero(), "fullWorker leaves %s zero", v.Type().Field(i).Name)
	}
	require.NoError(t, r.Insert(ctx, in.Clone()))

	want := in.Clone()
	want.LeaseDuration = 90*time.Minute + time.Millisecond
	want.PermissionWait = 90 * time.Second
	want.StopTimeout = 12 * time.Second
	for _, p := range []*time.Time{&want.LeaseDeadline, &want.LastActivity, &want.CheckpointSentAt,
		&want.GraceDeadline, &want.CreatedAt, &want.UpdatedAt, &want.ReadyAt, &want.StopRequestedAt, &want.EndedAt, &want.PausedUntil, &want.FrozenAt} {
		*p = ms(*p)
	}
	got, err := r.GetRun(ctx, in.ID, in.RunID)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	got, err = r.Get(ctx, in.ID)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	// The survives-a-reopen part: another handle reads the same.
	r2 := openTestRegistry(t, r.Path(), nil)
	got, err = r2.GetRun(ctx, in.ID, in.RunID)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	// And Update writes every field back unchanged when fn changes nothing
	// (only UpdatedAt moves).
	got, err = r.Update(ctx, in.ID, in.RunID, func(*Worker) error { return nil })
	require.NoError(t, err)
	want.UpdatedAt = got.UpdatedAt
	assert.Equal(t, want, got)
}

func TestRoundTripZeroValues(t *testing.T) {
	ctx := context.Background()
	clock := newTestClock()
	r := openTestRegistry(t, registryPath(t), clock)

	w := &Worker{ID: "z", RunID: "00000000000a", Generation: 1, State: StateLost,
		Command: []string{}, EnvKeys: []string{}}
	require.NoError(t, r.Insert(ctx, w))
	got, err := r.GetRun(ctx, "z", "00000000000a")
	require.NoError(t, err)
	want := &Worker{ID: "z", RunID: "00000000000a", Generation: 1, State: StateLost,
		Unit: "agent-fleet-worker-z-00000000000a.service", CreatedAt: ms(clock.Now()), UpdatedAt: ms(clock.Now())}
	assert.Equal(t, want, got)
	assert.Equal(t, want, w, "Insert leaves w as stored")
	assert.Nil(t, got.Command)
	assert.True(t, got.LeaseDeadline.IsZero())
	assert.Zero(t, got.LeaseDuration)

	// Reserve fills the identity and hands back the stored form.
	res := &Worker{ID: "r", Kind: "exec", Command: []string{"/bin/true"}, Manager: "m", State: StateFailed}
	require.NoError(t, r.Reserve(ctx, res))
	assert.Equal(t, StateProvisioning, res.State)
	assert.Equal(t, 1, res.Generation)
	assert.Regexp(t, RunIDPattern, res.RunID)
	assert.Equal(t, "agent-fleet-worker-r-"+res.RunID+".service", res.Unit)
	assert.Equal(t, ms(clock.Now()), res.CreatedAt)
	got, err = r.Get(ctx, "r")
	require.NoError(t, err)
	assert.Equal(t, res, got)
}

// ---- concurrency: goroutines ----

func TestReserveConcurrentGoroutines(t *testing.T) {
	ctx := context.Background()
	path := registryPath(t)
	// Two handles on one file: two connection pools, as two processes have,
	// so SQLite's lock (not only the in-process semaphore) decides.
	regs := []*Registry{openTestRegistry(t, path, nil), openTestRegistry(t, path, nil)}

	const n = 20
	var wins, conflicts atomic.Int32
	var winner atomic.Pointer[Worker]
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			w := &Worker{ID: "dup", Kind: "exec", Manager: fmt.Sprintf("m%d", i)}
			err := regs[i%2].Reserve(ctx, w)
			switch {
			case err == nil:
				wins.Add(1)
				winner.Store(w)
			case errors.Is(err, ErrConflict):
				conflicts.Add(1)
			default:
				t.Errorf("reserve %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	require.EqualValues(t, 1, wins.Load())
	require.EqualValues(t, n-1, conflicts.Load())

	first := winner.Load()
	all, err := regs[0].List(ctx, Filter{})
	require.NoError(t, err)
	require.Len(t, all, 1, "losers wrote nothing")
	assert.Equal(t, first.RunID, all[0].RunID)

	// While it is live, still a conflict.
	err = regs[1].Reserve(ctx, &Worker{ID: "dup"})
	require.ErrorIs(t, err, ErrConflict)
	assert.Contains(t, err.Error(), first.RunID)

	finish(t, regs[0], first, StateExited)
	second := &Worker{ID: "dup"}
	require.NoError(t, regs[1].Reserve(ctx, second))
	assert.Equal(t, 2, second.Generation)
	assert.NotEqual(t, first.RunID, second.RunID)
	assert.NotEqual(t, first.Unit, second.Unit)
}

func TestConcurrentUpdatesNeverLoseWrites(t *testing.T) {
	ctx := context.Background()
	path := registryPath(t)
	regs := []*Registry{openTestRegistry(t, path, nil), openTestRegistry(t, path, nil)}
	w := &Worker{ID: "counter"}
	require.NoError(t, regs[0].Reserve(ctx, w))

	// Each goroutine increments its own field read-modify-write style; a lost
	// write shows up as a short count.
	const perField = 25
	fields := []func(*Worker){
		func(x *Worker) { x.CheckpointAttempts++ },
		func(x *Worker) { x.ExitStatus++ },
		func(x *Worker) { x.MainPID++ },
		func(x *Worker) { x.EnvKeys = append(x.EnvKeys, "K"+strconv.Itoa(len(x.EnvKeys))) },
		func(x *Worker) { x.Task += "t" },
		func(x *Worker) { x.LeaseDuration += time.Second },
		func(x *Worker) { x.LastActivity = x.LastActivity.Add(time.Second) },
		func(x *Worker) { x.Command = append(x.Command, "a") },
	}
	var wg sync.WaitGroup
	for i, f := range fields {
		for j := range 2 { // two goroutines per field, on different handles
			wg.Go(func() {
				for range perField {
					_, err := regs[(i+j)%2].Update(ctx, w.ID, w.RunID, func(x *Worker) error { f(x); return nil })
					if err != nil {
						t.Errorf("update: %v", err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	got, err := regs[1].GetRun(ctx, w.ID, w.RunID)
	require.NoError(t, err)
	const n = 2 * perField
	assert.Equal(t, n, got.CheckpointAttempts)
	assert.Equal(t, n, got.ExitStatus)
	assert.Equal(t, n, got.MainPID)
	assert.Len(t, got.EnvKeys, n)
	assert.Equal(t, strings.Repeat("t", n), got.Task)
	assert.Equal(t, n*time.Second, got.LeaseDuration)
	assert.Equal(t, ms(time.Time{}.Add(n*time.Second)), got.LastActivity, "year 1 is stored too")
	assert.Len(t, got.Command, n)
}

// ---- concurrency: processes ----

const (
	helperEnv      = "FLEET_REGISTRY_TEST_HELPER"
	helperPathEnv  = "FLEET_REGISTRY_TEST_PATH"
	helperAtEnv    = "FLEET_REGISTRY_TEST_AT" // unix ms: open and act then
	helperIDEnv    = "FLEET_REGISTRY_TEST_ID"
	helperRunEnv   = "FLEET_REGISTRY_TEST_RUN"
	helperCountEnv = "FLEET_REGISTRY_TEST_COUNT"
)

// TestRegistryHelperProcess is not a test: the multi-process tests run the
// test binary again with helperEnv set, and this is what those processes do.
// It prints one line per result: "won RUNID GEN", "conflict", "updated N"
// or "error MSG".
func TestRegistryHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("helper process for the multi-process tests")
	}
	ctx := context.Background()
	at, _ := strconv.ParseInt(os.Getenv(helperAtEnv), 10, 64)
	if time.Now().After(time.UnixMilli(at)) {
		fmt.Println("late") // started after the others began: less overlap
	}
	time.Sleep(time.Until(time.UnixMilli(at)))
	r, err := OpenRegistry(ctx, os.Getenv(helperPathEnv))
	if err != nil {
		fmt.Printf("error open: %v\n", err)
		os.Exit(0)
	}
	defer r.Close()
	id := os.Getenv(helperIDEnv)
	count, _ := strconv.Atoi(os.Getenv(helperCountEnv))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range count {
		wg.Go(func() {
			var line string
			switch mode {
			case "reserve":
				w := &Worker{ID: id, Manager: fmt.Sprintf("p%d-%d", os.Getpid(), i)}
				err := r.Reserve(ctx, w)
				switch {
				case err == nil:
					line = fmt.Sprintf("won %s %d", w.RunID, w.Generation)
				case errors.Is(err, ErrConflict):
					line = "conflict"
				default:
					line = "error " + err.Error()
				}
			case "increment":
				_, err := r.Update(ctx, id, os.Getenv(helperRunEnv), func(x *Worker) error {
					x.CheckpointAttempts++
					return nil
				})
				if err != nil {
					line = "error " + err.Error()
				} else {
					line = "updated 1"
				}
			}
			mu.Lock()
			fmt.Println(line)
			mu.Unlock()
		})
	}
	wg.Wait()
	os.Exit(0)
}

// runHelpers starts procs helper processes doing mode count times each (in
// count goroutines), all starting at the same instant, and returns their
// output lines.
func runHelpers(t *testing.T, procs int, mode, path, id, runID string, count int, also func()) []string {
	t.Helper()
	at := time.Now().Add(1500 * time.Millisecond)
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRegistryHelperProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(),
			helperEnv+"="+mode, helperPathEnv+"="+path, helperIDEnv+"="+id, helperRunEnv+"="+runID,
			helperAtEnv+"="+strconv.FormatInt(at.UnixMilli(), 10), helperCountEnv+"="+strconv.Itoa(count))
		out := &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		require.NoError(t, cmd.Start())
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	if also != nil {
		time.Sleep(time.Until(at))
		also()
	}
	var lines []string
	late := 0
	for i, cmd := range cmds {
		require.NoError(t, cmd.Wait(), "helper output:\n%s", outs[i])
		sc := bufio.NewScanner(outs[i])
		for sc.Scan() {
			l := sc.Text()
			if l == "late" {
				late++
			}
			if strings.HasPrefix(l, "won ") || l == "conflict" || strings.HasPrefix(l, "updated ") || strings.HasPrefix(l, "error ") {
				lines = append(lines, l)
			}
		}
	}
	if late > 0 {
		t.Logf("%d of %d helper processes started late (a slow machine): the race had less overlap", late, procs)
	}
	return lines
}

func TestReserveConcurrentProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	ctx := context.Background()
	// The file does not exist yet: the processes also race to create and
	// migrate it, and the parent's goroutines join the reserve race.
	path := registryPath(t)
	const procs, perProc, local = 5, 4, 4
	var localWins, localConflicts atomic.Int32
	lines := runHelpers(t, procs, "reserve", path, "shared", "", perProc, func() {
		r := openTestRegistry(t, path, nil)
		var wg sync.WaitGroup
		for range local {
			wg.Go(func() {
				err := r.Reserve(ctx, &Worker{ID: "shared", Manager: "parent"})
				switch {
				case err == nil:
					localWins.Add(1)
				case errors.Is(err, ErrConflict):
					localConflicts.Add(1)
				default:
					t.Errorf("parent reserve: %v", err)
				}
			})
		}
		wg.Wait()
	})
	var wins, conflicts int
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "won "):
			wins++
		case l == "conflict":
			conflicts++
		default:
			t.Errorf("helper: %s", l)
		}
	}
	require.Equal(t, procs*perProc, wins+conflicts, "every helper reserve answered: %q", lines)
	require.Equal(t, 1, wins+int(localWins.Load()), "exactly one winner across processes: %q", lines)
	require.Equal(t, procs*perProc+local-1, conflicts+int(localConflicts.Load()))

	r := openTestRegistry(t, path, nil)
	all, err := r.List(ctx, Filter{})
	require.NoError(t, err)
	require.Len(t, all, 1)
	first := all[0]
	assert.Equal(t, 1, first.Generation)
	finish(t, r, first, StateFailed)

	// Second round on the existing file: again exactly one, generation 2.
	lines = runHelpers(t, procs, "reserve", path, "shared", "", perProc, nil)
	wins = 0
	for _, l := range lines {
		if strings.HasPrefix(l, "won ") {
			wins++
			f := strings.Fields(l)
			assert.NotEqual(t, first.RunID, f[1])
			assert.Equal(t, "2", f[2])
		} else if l != "conflict" {
			t.Errorf("helper: %s", l)
		}
	}
	assert.Equal(t, 1, wins, "%q", lines)
	assert.Len(t, lines, procs*perProc)
}

func TestConcurrentUpdatesAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	ctx := context.Background()
	path := registryPath(t)
	r := openTestRegistry(t, path, nil)
	w := &Worker{ID: "counter"}
	require.NoError(t, r.Reserve(ctx, w))
	const procs, perProc, local = 4, 10, 10
	lines := runHelpers(t, procs, "increment", path, w.ID, w.RunID, perProc, func() {
		var wg sync.WaitGroup
		for range local {
			wg.Go(func() {
				_, err := r.Update(ctx, w.ID, w.RunID, func(x *Worker) error { x.CheckpointAttempts++; return nil })
				assert.NoError(t, err)
			})
		}
		wg.Wait()
	})
	for _, l := range lines {
		assert.Equal(t, "updated 1", l)
	}
	require.Len(t, lines, procs*perProc)
	got, err := r.GetRun(ctx, w.ID, w.RunID)
	require.NoError(t, err)
	assert.Equal(t, procs*perProc+local, got.CheckpointAttempts)
}

// ---- forget, prune, ledger ----

func TestForgetKeepsLedger(t *testing.T) {
	ctx := context.Background()
	r := openTestRegistry(t, registryPath(t), nil)

	_, err := r.Forget(ctx, "nobody", "")
	require.ErrorIs(t, err, ErrNotFound)

	seen := map[string]bool{}
	for gen := 1; gen <= 30; gen++ {
		w := &Worker{ID: "again"}
		require.NoError(t, r.Reserve(ctx, w))
		assert.Equal(t, gen, w.Generation)
		assert.False(t, seen[w.RunID], "run id %s reused", w.RunID)
		seen[w.RunID] = true

		_, err := r.Forget(ctx, "again", "")
		require.ErrorIs(t, err, ErrConflict, "a live incarnation is never forgotten")
		_, err = r.Get(ctx, "again")
		require.NoError(t, err)

		finish(t, r, w, StateStopped)
		n, err := r.Forget(ctx, "again", "")
		require.NoError(t, err)
		assert.Equal(t, 1, n)
		_, err = r.Get(ctx, "again")
		require.ErrorIs(t, err, ErrNotFound)
	}
	// The run ledger holds every run id ever used.
	var runs int
	require.NoError(t, r.db.QueryRow(`SELECT count(*) FROM runs WHERE id = 'again'`).Scan(&runs))
	assert.Equal(t, 30, runs)

	// A forgotten run id cannot come back through Reserve: force the draw by
	// filling the ledger is impractical, so check the ledger is consulted.
	var one int
	for id := range seen {
		require.NoError(t, r.db.QueryRow(`SELECT 1 FROM runs WHERE id = 'again' AND run_id = ?`, id).Scan(&one))
	}
}

func TestForgetRefusesLiveKeepsTerminal(t *testing.T) {
	ctx := context.Background()
	r := openTestRegistry(t, registryPath(t), nil)
	a := &Worker{ID: "f"}
	require.NoError(t, r.Reserve(ctx, a))
	finish(t, r, a, StateExited)
	b := &Worker{ID: "f"}
	require.NoError(t, r.Reserve(ctx, b))
	_, err := r.Forget(ctx, "f", "")
	require.ErrorIs(t, err, ErrConflict)
	all, err := r.List(ctx, Filter{})
	require.NoError(t, err)
	assert.Len(t, all, 2, "nothing deleted while live")
	finish(t, r, b, StateLost)
	n, err := r.Forget(ctx, "f", "")
	require.NoError(t, err)
	assert.Equal(t, 2, n)
}

func TestPruneKeepsLiveAndLedger(t *testing.T) {
	ctx := context.Background()
	clock := newTestClock()
	r := openTestRegistry(t, registryPath(t), clock)

	old := &Worker{ID: "old"}
	require.NoError(t, r.Reserve(ctx, old))
	old = finish(t, r, old, StateExited)
	assert.Equal(t, ms(clock.Now()), old.EndedAt, "a live→terminal Update stamps EndedAt")

	liveOld := &Worker{ID: "live-old"}
	require.NoError(t, r.Reserve(ctx, liveOld))

	clock.Add(48 * time.Hour)
	recent := &Worker{ID: "recent"}
	require.NoError(t, r.Reserve(ctx, recent))
	finish(t, r, recent, StateFailed)

	n, err := r.Prune(ctx, clock.Now().Add(-24*time.Hour))
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	_, err = r.Get(ctx, "old")
	require.ErrorIs(t, err, ErrNotFound)
	_, err = r.Get(ctx, "live-old")
	require.NoError(t, err)
	_, err = r.Get(ctx, "recent")
	require.NoError(t, err)

	n, err = r.Prune(ctx, time.Time{})
	require.NoError(t, err)
	assert.Zero(t, n, "the zero time prunes nothing")

	again := &Worker{ID: "old"}
	require.NoError(t, r.Reserve(ctx, again))
	assert.Equal(t, 2, again.Generation)
	assert.NotEqual(t, old.RunID, again.RunID)
}

// ---- Insert, Get ----

func TestInsert(t *testing.T) {
	ctx := context.Background()
	r := openTestRegistry(t, registryPath(t), nil)

	live := &Worker{ID: "rec", RunID: "aaaaaaaaaaaa", Generation: 7, State: StateRunning, Manager: "m2", FirstManager: "m1"}
	require.NoError(t, r.Insert(ctx, live))
	assert.Equal(t, "agent-fleet-worker-rec-aaaaaaaaaaaa.service", live.Unit)

	err := r.Insert(ctx, &Worker{ID: "rec", RunID: "aaaaaaaaaaaa", Generation: 7, State: StateLost})
	require.ErrorIs(t, err, ErrConflict, "same id+run")
	err = r.Insert(ctx, &Worker{ID: "rec", RunID: "bbbbbbbbbbbb", Generation: 8, State: StateProvisioning})
	require.ErrorIs(t, err, ErrConflict, "a second live incarnation")

	// An older terminal incarnation may be recorded beside the live one, with
	// the next generation when none is given.
	old := &Worker{ID: "rec", RunID: "cccccccccccc", State: StateStopped}
	require.NoError(t, r.Insert(ctx, old))
	assert.Equal(t, 8, old.Generation)

	// Get prefers the live incarnation over a higher generation.
	got, err := r.Get(ctx, "rec")
	require.NoError(t, err)
	assert.Equal(t, "aaaaaaaaaaaa", got.RunID)

	// The ledger learned generation 8: the next Reserve gets 9.
	finish(t, r, live, StateLost)
	got, err = r.Get(ctx, "rec")
	require.NoError(t, err)
	assert.Equal(t, "cccccccccccc", got.RunID, "most recent = highest generation")
	next := &Worker{ID: "rec"}
	require.NoError(t, r.Reserve(ctx, next))
	assert.Equal(t, 9, next.Generation)

	for _, bad := range []*Worker{
		{ID: "rec", RunID: "ABCDEFABCDEF", State: StateLost},
		{ID: "rec", RunID: "abc", State: StateLost},
		{ID: "rec", RunID: "", State: StateLost},
		{ID: "-rec", RunID: "dddddddddddd", State: StateLost},
	} {
		require.ErrorIs(t, r.Insert(ctx, bad), ErrInvalidID, "%+v", bad)
	}
	require.ErrorIs(t, r.Insert(ctx, &Worker{ID: "rec", RunID: "dddddddddddd", State: "zombie"}), ErrInvalidRecord)
	require.ErrorIs(t, r.Insert(ctx, &Worker{ID: "rec", RunID: "dddddddddddd", State: StateLost, Generation: -1}), ErrInvalidRecord)
	require.ErrorIs(t, r.Insert(ctx, nil), ErrInvalidRecord)
}

func TestGetNotFound(t *testing.T) {
	ctx := context.Background()
	r := openTestRegistry(t, registryPath(t), nil)
	_, err := r.Get(ctx, "ghost")
	require.ErrorIs(t, err, ErrNotFound)
	assert.Contains(t, err.Error(), `"ghost"`)
	_, err = r.GetRun(ctx, "ghost", "0123456789ab")
	require.ErrorIs(t, err, ErrNotFound)
	_, err = r.Update(ctx, "ghost", "0123456789ab", func(*Worker) error { return nil })
	require.ErrorIs(t, err, ErrNotFound)
}

// ---- validation ----

func TestInvalidIDsRefused(t *testing.T) {
	ctx := context.Background()
	r := openTestRegistry(t, registryPath(t), nil)
	bad := []string{"", "-lead", "_lead", "has space", "a/b", "a.b", "ünï", "a\n", "semi;colon",
		strings.Repeat("a", 65), "a@b", "../x"}
	for _, id := range bad {
		require.ErrorIs(t, ValidID(id), ErrInvalidID, "%q", id)
		require.ErrorIs(t, r.Reserve(ctx, &Worker{ID: id}), ErrInvalidID, "%q", id)
		_, err := r.Get(ctx, id)
		require.ErrorIs(t, err, ErrInvalidID, "%q", id)
		_, err = r.GetRun(ctx, id, "0123456789ab")
		require.ErrorIs(t, err, ErrInvalidID, "%q", id)
		_, err = r.Update(ctx, id, "0123456789ab", func(*Worker) error { return nil })
		require.ErrorIs(t, err, ErrInvalidID, "%q", id)
		_, err = r.Forget(ctx, id, "")
		require.ErrorIs(t, err, ErrInvalidID, "%q", id)
		require.ErrorIs(t, r.Insert(ctx, &Worker{ID: id, RunID: "0123456789ab", State: StateLost}), ErrInvalidID, "%q", id)
	}
	all, err := r.List(ctx, Filter{})
	require.NoError(t, err)
	assert.Empty(t, all)

	for _, id := range []string{"a", "A", "0", "a-b_c", strings.Repeat("z", 64), "operator-root"} {
		require.NoError(t, ValidID(id))
		require.NoError(t, r.Reserve(ctx, &Worker{ID: id}), "%q", id)
	}
	_, err = r.GetRun(ctx, "a", "nothex!!!!!!")
	require.ErrorIs(t, err, ErrInvalidID)
	require.ErrorIs(t, r.Reserve(ctx, nil), ErrInvalidRecord)
	require.ErrorIs(t, r.Reserve(ctx, &Worker{ID: "utf", Command: []string{"\xff"}}), ErrInvalidRecord)
}

func TestUpdateCannotChangeIdentity(t *testing.T) {
	ctx := context.Background()
	clock := newTestClock()
	r := openTestRegistry(t, registryPath(t), clock)
	w := &Worker{ID: "ident", Task: "before"}
	require.NoError(t, r.Reserve(ctx, w))
	clock.Add(time.Minute)

	for name, fn := range map[string]func(*Worker){
		"ID":         func(x *Worker) { x.ID = "other" },
		"RunID":      func(x *Worker) { x.RunID = "ffffffffffff" },
		"Generation": func(x *Worker) { x.Generation = 99 },
		"State":      func(x *Worker) { x.State = "zombie" },
	} {
		_, err := r.Update(ctx, w.ID, w.RunID, func(x *Worker) error { x.Task = "after"; fn(x); return nil })
		require.ErrorIs(t, err, ErrInvalidRecord, name)
	}
	// fn's own error comes back as it is, and nothing is written.
	mine := errors.New("not today")
	_, err := r.Update(ctx, w.ID, w.RunID, func(x *Worker) error { x.Task = "after"; return mine })
	require.Equal(t, mine, err)

	got, err := r.GetRun(ctx, w.ID, w.RunID)
	require.NoError(t, err)
	assert.Equal(t, w, got, "no refused update wrote anything")
	_, err = r.GetRun(ctx, "other", w.RunID)
	require.ErrorIs(t, err, ErrNotFound)

	// A good update moves UpdatedAt only.
	got, err = r.Update(ctx, w.ID, w.RunID, func(x *Worker) error { x.Task = "after"; return nil })
	require.NoError(t, err)
	assert.Equal(t, "after", got.Task)
	assert.Equal(t, ms(clock.Now()), got.UpdatedAt)
	assert.Equal(t, w.CreatedAt, got.CreatedAt)
}

func TestUpdateCannotMakeSecondLive(t *testing.T) {
	ctx := context.Background()
	r := openTestRegistry(t, registryPath(t), nil)
	a := &Worker{ID: "two"}
	require.NoError(t, r.Reserve(ctx, a))
	finish(t, r, a, StateLost)
	b := &Worker{ID: "two"}
	require.NoError(t, r.Reserve(ctx, b))
	_, err := r.Update(ctx, a.ID, a.RunID, func(x *Worker) error { x.State = StateRunning; return nil })
	require.ErrorIs(t, err, ErrConflict)
	got, err := r.GetRun(ctx, a.ID, a.RunID)
	require.NoError(t, err)
	assert.Equal(t, StateLost, got.State)
	// With b gone, the policy of bringing a back is the caller's; the
	// registry allows it.
	finish(t, r, b, StateFailed)
	_, err = r.Update(ctx, a.ID, a.RunID, func(x *Worker) error { x.State = StateRunning; return nil })
	require.NoError(t, err)
}

// ---- schema version and corruption ----

func TestSchemaNewerRefusedWithoutWriting(t *testing.T) {
	ctx := context.Background()
	path := registryPath(t)
	r, err := OpenRegistry(ctx, path)
	require.NoError(t, err)
	require.NoError(t, r.Reserve(ctx, &Worker{ID: "keep"}))
	require.NoError(t, r.Close())

	// A newer agent-fleet has been here.
	raw, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	_, err = raw.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, RegistrySchemaVersion+1))
	require.NoError(t, err)
	require.NoError(t, raw.Close())

	before := snapshot(t, path)
	time.Sleep(20 * time.Millisecond) // a write would move the mtime visibly
	for range 2 {
		_, err = OpenRegistry(ctx, path)
		require.ErrorIs(t, err, ErrSchemaNewer)
		assert.Contains(t, err.Error(), strconv.Itoa(RegistrySchemaVersion+1))
		assert.Contains(t, err.Error(), path)
	}
	after := snapshot(t, path)
	assert.True(t, bytes.Equal(before.data, after.data), "file bytes changed")
	assert.Equal(t, before.mtime, after.mtime)
	assert.Equal(t, before.mode, after.mode)
	assert.Equal(t, before.dirList, after.dirList, "no -wal/-shm left behind")
}

func TestSchemaNewerSeenThroughTheWAL(t *testing.T) {
	// A newer agent-fleet still has the file open and its upgrade sits in the
	// WAL, not yet in the database file: the header alone would say "current".
	ctx := context.Background()
	path := registryPath(t)
	r, err := OpenRegistry(ctx, path)
	require.NoError(t, err)
	require.NoError(t, r.Close())

	newer, err := sql.Open("sqlite", "file://"+path+"?_pragma=journal_mode(WAL)&_pragma=wal_autocheckpoint(0)")
	require.NoError(t, err)
	defer newer.Close()
	newer.SetMaxOpenConns(1)
	_, err = newer.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, RegistrySchemaVersion+1))
	require.NoError(t, err)

	before := snapshot(t, path)
	var headerVersion uint32
	for _, b := range before.data[60:64] {
		headerVersion = headerVersion<<8 | uint32(b)
	}
	require.EqualValues(t, RegistrySchemaVersion, headerVersion, "the upgrade is only in the WAL")
	wal, err := os.ReadFile(path + "-wal")
	require.NoError(t, err)

	_, err = OpenRegistry(ctx, path)
	require.ErrorIs(t, err, ErrSchemaNewer)
	after := snapshot(t, path)
	assert.True(t, bytes.Equal(before.data, after.data))
	assert.Equal(t, before.mtime, after.mtime)
	wal2, err := os.ReadFile(path + "-wal")
	require.NoError(t, err)
	assert.True(t, bytes.Equal(wal, wal2), "the WAL was not touched either")
}

func TestSchemaNewerRaceAtMigration(t *testing.T) {
	// A file that turned newer between the read-only check and the migration
	// transaction is refused too.
	ctx := context.Background()
	path := registryPath(t)
	r := openTestRegistry(t, path, nil)
	_, err := r.db.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, RegistrySchemaVersion+5))
	require.NoError(t, err)
	err = migrate(ctx, r.db, 0)
	require.ErrorIs(t, err, ErrSchemaNewer)
	var v int
	require.NoError(t, r.db.QueryRow(`PRAGMA user_version`).Scan(&v))
	assert.Equal(t, RegistrySchemaVersion+5, v)
}

func TestCorruptFilesRefusedAndKept(t *testing.T) {
	ctx := context.Background()

	// A healthy registry with enough records to span many pages.
	healthy := registryPath(t)
	{
		r, err := OpenRegistry(ctx, healthy)
		require.NoError(t, err)
		for i := range 200 {
			require.NoError(t, r.Insert(ctx, &Worker{ID: fmt.Sprintf("w%03d", i), RunID: fmt.Sprintf("%012x", i),
				State: StateExited, Task: strings.Repeat("task text ", 40)}))
		}
		require.NoError(t, r.Close())
	}
	good, err := os.ReadFile(healthy)
	require.NoError(t, err)
	require.Greater(t, len(good), 8*4096)

	cases := map[string][]byte{
		"garbage":        bytes.Repeat([]byte("this is not a database\x00\xff"), 500),
		"short":          []byte("SQLite"),
		"header only":    append([]byte("SQLite format 3\x00"), bytes.Repeat([]byte{0xAB}, 4000)...),
		"clobbered page": func() []byte { b := bytes.Clone(good); copy(b[4096*3:], bytes.Repeat([]byte{0x5A}, 4096)); return b }(),
		"truncated":      good[:len(good)/2+100],
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fleet.db")
			require.NoError(t, os.WriteFile(path, data, 0o600))
			before := snapshot(t, path)
			_, err := OpenRegistry(ctx, path)
			require.ErrorIs(t, err, ErrCorrupt)
			after := snapshot(t, path)
			assert.True(t, bytes.Equal(before.data, after.data), "file bytes changed")
			assert.Equal(t, before.mtime, after.mtime)
			assertOnlyEmptyCompanions(t, path, after.dirList)
		})
	}

	t.Run("directory", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "fleet.db")
		require.NoError(t, os.Mkdir(path, 0o700))
		_, err := OpenRegistry(ctx, path)
		require.ErrorIs(t, err, ErrCorrupt)
	})

	t.Run("empty file is a new registry", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "fleet.db")
		require.NoError(t, os.WriteFile(path, nil, 0o600))
		r := openTestRegistry(t, path, nil)
		require.NoError(t, r.Check(ctx))
	})
}

func TestCheckReportsCorruptionInOpenRegistry(t *testing.T) {
	ctx := context.Background()
	path := registryPath(t)
	r := openTestRegistry(t, path, nil)
	require.NoError(t, r.Check(ctx))
	// Break the ledger link behind the registry's back: foreign_key_check
	// (run by Check) reports it.
	conn, err := r.db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, `PRAGMA foreign_keys = 0`)
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, `INSERT INTO workers (id, run_id, generation, unit, state, created_at_ms, updated_at_ms)
		VALUES ('orphan', '000000000001', 1, 'u', 'lost', 1, 1)`)
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, `PRAGMA foreign_keys = 1`)
	require.NoError(t, err)
	err = r.Check(ctx)
	require.ErrorIs(t, err, ErrCorrupt)
	assert.Contains(t, err.Error(), "workers")
}

// ---- connection settings ----

func TestPragmasAndPermissions(t *testing.T) {
	ctx := context.Background()
	path := registryPath(t)
	r := openTestRegistry(t, path, nil)

	// Every connection of the pool, not just the first.
	var conns []*sql.Conn
	for range 4 {
		c, err := r.db.Conn(ctx)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	for _, c := range conns {
		var mode string
		var busy, fk, sync int
		require.NoError(t, c.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode))
		require.NoError(t, c.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&busy))
		require.NoError(t, c.QueryRowContext(ctx, `PRAGMA foreign_keys`).Scan(&fk))
		require.NoError(t, c.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&sync))
		assert.Equal(t, "wal", mode)
		assert.Equal(t, 5000, busy)
		assert.Equal(t, 1, fk)
		assert.Equal(t, 1, sync, "synchronous=NORMAL")
		c.Close()
	}
	var v int
	require.NoError(t, r.db.QueryRow(`PRAGMA user_version`).Scan(&v))
	assert.Equal(t, RegistrySchemaVersion, v)
	assert.NotEmpty(t, r.ID())
	assert.False(t, r.CreatedAt().IsZero())
	assert.True(t, filepath.IsAbs(r.Path()))

	if runtime.GOOS != "windows" {
		st, err := os.Stat(path)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
		st, err = os.Stat(filepath.Dir(path))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())
		st, err = os.Stat(path + "-wal")
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the WAL inherits the file's mode")
	}

	// The registry id survives a reopen; a new file gets a new one.
	id := r.ID()
	r2 := openTestRegistry(t, path, nil)
	assert.Equal(t, id, r2.ID())
	r3 := openTestRegistry(t, registryPath(t), nil)
	assert.NotEqual(t, id, r3.ID())

	// Custom busy timeout.
	r4, err := OpenRegistryWithOptions(ctx, path, RegistryOptions{BusyTimeout: 1500 * time.Millisecond})
	require.NoError(t, err)
	defer r4.Close()
	var busy int
	require.NoError(t, r4.db.QueryRow(`PRAGMA busy_timeout`).Scan(&busy))
	assert.Equal(t, 1500, busy)
}

func TestConcurrentOpensOfAFreshFile(t *testing.T) {
	// Switching a new file to WAL needs its exclusive lock, and two switches
	// at once deadlock (SQLITE_BUSY without the busy handler): openers must
	// wait their turn, never fail.
	for round := range 10 {
		path := registryPath(t)
		var wg sync.WaitGroup
		start := make(chan struct{})
		ids := make(chan string, 12)
		for range 12 {
			wg.Go(func() {
				<-start
				r, err := OpenRegistry(context.Background(), path)
				if err != nil {
					t.Errorf("round %d: %v", round, err)
					return
				}
				ids <- r.ID()
				r.Close()
			})
		}
		close(start)
		wg.Wait()
		close(ids)
		var first string
		for id := range ids {
			if first == "" {
				first = id
			}
			assert.Equal(t, first, id, "one file, one registry id")
		}
	}
}

func TestWriteTransactionsTakeTheLockAtBegin(t *testing.T) {
	// BEGIN IMMEDIATE: the write lock is held from the start of a mutation,
	// before its first read, so a read-modify-write cannot interleave.
	ctx := context.Background()
	path := registryPath(t)
	r := openTestRegistry(t, path, nil)
	tx, err := r.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck

	other, err := sql.Open("sqlite", "file://"+path+"?_pragma=busy_timeout(0)")
	require.NoError(t, err)
	defer other.Close()
	_, err = other.Exec(`BEGIN IMMEDIATE`)
	require.Error(t, err, "the registry's transaction holds the write lock")
	require.ErrorIs(t, classify(err), ErrBusy)

	// A registry writer with a short busy timeout gives up with ErrBusy.
	short, err := OpenRegistryWithOptions(ctx, path, RegistryOptions{BusyTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	defer short.Close()
	t0 := time.Now()
	err = short.Reserve(ctx, &Worker{ID: "blocked"})
	require.ErrorIs(t, err, ErrBusy)
	assert.Less(t, time.Since(t0), 3*time.Second)
	require.NoError(t, tx.Rollback())
	require.NoError(t, short.Reserve(ctx, &Worker{ID: "blocked"}))
}

func TestContextCancelledWhileQueued(t *testing.T) {
	r := openTestRegistry(t, registryPath(t), nil)
	r.writeSem <- struct{}{} // another writer of this process holds the queue
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := r.Reserve(ctx, &Worker{ID: "late"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	<-r.writeSem
	require.NoError(t, r.Reserve(context.Background(), &Worker{ID: "late"}))
}

// ---- List ----

func TestListFiltersAndOrder(t *testing.T) {
	ctx := context.Background()
	r := openTestRegistry(t, registryPath(t), nil)

	empty, err := r.List(ctx, Filter{})
	require.NoError(t, err)
	assert.Nil(t, empty)

	// id, manager, then the states of its incarnations oldest first.
	setup := []struct {
		id, manager string
		states      []State
	}{
		{"zeta", "m1", []State{StateExited, StateFailed, StateRunning}},
		{"alpha", "m2", []State{StateStopped}},
		{"Mid", "m1", []State{StateLost, StateStopping}},
		{"beta", "m2", []State{StateProvisioning}},
		{"beta-2", "m1", []State{StateExited}},
	}
	for _, s := range setup {
		for _, st := range s.states {
			w := &Worker{ID: s.id, Manager: s.manager}
			require.NoError(t, r.Reserve(ctx, w))
			if st != StateProvisioning {
				_, err := r.Update(ctx, w.ID, w.RunID, func(x *Worker) error { x.State = st; return nil })
				require.NoError(t, err)
			}
		}
	}
	type key struct {
		ID  string
		Gen int
	}
	keys := func(ws []*Worker) []key {
		var out []key
		for _, w := range ws {
			out = append(out, key{w.ID, w.Generation})
		}
		return out
	}

	all, err := r.List(ctx, Filter{})
	require.NoError(t, err)
	assert.Equal(t, []key{{"Mid", 2}, {"Mid", 1}, {"alpha", 1}, {"beta", 1}, {"beta-2", 1},
		{"zeta", 3}, {"zeta", 2}, {"zeta", 1}}, keys(all))
	assert.True(t, sort.SliceIsSorted(all, func(i, j int) bool { return all[i].ID < all[j].ID }))

	m1, err := r.List(ctx, Filter{Manager: "m1"})
	require.NoError(t, err)
	assert.Equal(t, []key{{"Mid", 2}, {"Mid", 1}, {"beta-2", 1}, {"zeta", 3}, {"zeta", 2}, {"zeta", 1}}, keys(m1))

	live, err := r.List(ctx, Filter{LiveOnly: true})
	require.NoError(t, err)
	assert.Equal(t, []key{{"Mid", 2}, {"beta", 1}, {"zeta", 3}}, keys(live))

	m1Live, err := r.List(ctx, Filter{Manager: "m1", LiveOnly: true})
	require.NoError(t, err)
	assert.Equal(t, []key{{"Mid", 2}, {"zeta", 3}}, keys(m1Live))

	ended, err := r.List(ctx, Filter{States: []State{StateExited, StateLost}})
	require.NoError(t, err)
	assert.Equal(t, []key{{"Mid", 1}, {"beta-2", 1}, {"zeta", 1}}, keys(ended))

	// States and LiveOnly combine with AND.
	none, err := r.List(ctx, Filter{States: []State{StateExited}, LiveOnly: true})
	require.NoError(t, err)
	assert.Empty(t, none)

	nobody, err := r.List(ctx, Filter{Manager: "m9"})
	require.NoError(t, err)
	assert.Nil(t, nobody)

	_, err = r.List(ctx, Filter{States: []State{"zombie"}})
	require.ErrorIs(t, err, ErrInvalidRecord)
}

func TestStates(t *testing.T) {
	live, terminal := 0, 0
	for _, s := range States {
		assert.True(t, s.Valid())
		assert.NotEqual(t, s.Live(), s.Terminal(), s)
		if s.Live() {
			live++
		} else {
			terminal++
		}
	}
	assert.Equal(t, 3, live)
	assert.Equal(t, 4, terminal)
	assert.False(t, State("").Valid())
	assert.False(t, State("zombie").Live())
	assert.False(t, State("zombie").Terminal())
	// The SQL forms agree with the Go ones.
	for _, s := range States {
		assert.Equal(t, s.Live(), strings.Contains(liveStatesSQL, "'"+string(s)+"'"), s)
		assert.Equal(t, s.Terminal(), strings.Contains(terminalStatesSQL, "'"+string(s)+"'"), s)
	}
}

// Unreserve takes back a provisioning reservation only; its run and
// generation are never given again.
func TestUnreserve(t *testing.T) {
	ctx := context.Background()
	r := openTestRegistry(t, registryPath(t), nil)
	w := &Worker{ID: "u", Kind: "exec", Manager: "m"}
	require.NoError(t, r.Reserve(ctx, w))
	require.NoError(t, r.Unreserve(ctx, w.ID, w.RunID))
	_, err := r.Get(ctx, "u")
	require.ErrorIs(t, err, ErrNotFound)
	require.ErrorIs(t, r.Unreserve(ctx, w.ID, w.RunID), ErrNotFound)

	again := &Worker{ID: "u", Kind: "exec", Manager: "m"}
	require.NoError(t, r.Reserve(ctx, again))
	require.Equal(t, 2, again.Generation)
	require.NotEqual(t, w.RunID, again.RunID)
	_, err = r.Update(ctx, again.ID, again.RunID, func(x *Worker) error { x.State = StateRunning; return nil })
	require.NoError(t, err)
	require.ErrorIs(t, r.Unreserve(ctx, again.ID, again.RunID), ErrNotFound, "a worker that started is not a reservation")
	require.ErrorIs(t, r.Unreserve(ctx, "bad id!", again.RunID), ErrInvalidID)
}

// PrepareUpdate leaves an end's Update nothing to parse: the worker shim
// records its workload's end on a stop's path.
func TestPrepareUpdateCoversAnEnd(t *testing.T) {
	ctx := context.Background()
	r := openTestRegistry(t, registryPath(t), nil)
	w := &Worker{ID: "w1", Kind: "exec", Manager: "boss", FirstManager: "boss", Command: []string{"true"}}
	require.NoError(t, r.Reserve(ctx, w))
	_, err := r.Update(ctx, w.ID, w.RunID, func(x *Worker) error { x.State = StateRunning; return nil })
	require.NoError(t, err)
	require.NoError(t, r.stmts.close(), "what Reserve and the first Update prepared")

	require.NoError(t, r.PrepareUpdate(ctx))
	prepared := func() []string {
		r.stmts.mu.Lock()
		defer r.stmts.mu.Unlock()
		return slices.Sorted(maps.Keys(r.stmts.m))
	}
	before := prepared()
	require.Len(t, before, 3)
	out, err := r.Update(ctx, w.ID, w.RunID, func(x *Worker) error {
		x.HasExit, x.ExitCode, x.State = true, "exited", StateExited
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, StateExited, out.State)
	owed, err := r.OwedNotices(ctx, NoticeFilter{ID: w.ID})
	require.NoError(t, err)
	require.Len(t, owed, 1, "the end owes its manager a notice")
	require.Equal(t, before, prepared(), "the end parsed no statement")

	require.NoError(t, r.Close())
	require.ErrorContains(t, r.PrepareUpdate(ctx), "prepare the registry's update")
}
