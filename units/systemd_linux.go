//go:build linux

package units

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// Systemd is the real Manager: a connection to the systemd user manager over
// the user bus. It owns its connection (one owner per connection), re-dials
// when the bus drops and then retries the failed call once (runc's rule).
// Safe for concurrent use.
type Systemd struct {
	bus  BusAddress
	opts Options
	log  *slog.Logger

	// sem serialises (re)connecting and guards cur and closed; a channel
	// so that waiting for it honours a ctx.
	sem    chan struct{}
	cur    *conn
	closed bool
}

var _ Manager = (*Systemd)(nil)

// Connect resolves the user bus (Options.Bus, else ResolveBus) and connects
// to the user manager on it. Errors match ErrNoUserBus, ErrManagerUnreachable
// or ErrTimeout.
func Connect(ctx context.Context, opts Options) (*Systemd, error) {
	bus := opts.Bus
	if bus.Address == "" {
		var err error
		if bus, err = ResolveBus(opts.Getenv); err != nil {
			return nil, err
		}
	} else if bus.Source == "" {
		bus.Source = SourceOptions
	}
	s := &Systemd{bus: bus, opts: opts, log: opts.logger(), sem: make(chan struct{}, 1)}
	ctx, cancel := withDefaultDeadline(ctx, opts.timeout())
	defer cancel()
	if _, err := s.connection(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Probe connects, pings the manager and reads its version: the quick "is a
// user manager reachable?" question, and what doctor reports.
func Probe(ctx context.Context, opts Options) (ProbeResult, error) {
	s, err := Connect(ctx, opts)
	if err != nil {
		return ProbeResult{}, err
	}
	defer s.Close()
	res := ProbeResult{Bus: s.bus}
	start := time.Now()
	if err := s.Ping(ctx); err != nil {
		return res, err
	}
	res.RoundTrip = time.Since(start)
	res.Version, err = s.Version(ctx)
	return res, err
}

// Bus is the address this manager connects to and where it came from.
func (s *Systemd) Bus() BusAddress { return s.bus }

// connection returns the live connection, dialling a new one if there is
// none or the last one dropped.
func (s *Systemd) connection(ctx context.Context) (*conn, error) {
	began := time.Now()
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, timeoutError(ctx, "wait for the connection to the user manager", began)
	}
	defer func() { <-s.sem }()
	if s.closed {
		return nil, fmt.Errorf("%w: connection closed by Close", ErrManagerUnreachable)
	}
	if s.cur != nil && s.cur.alive() {
		return s.cur, nil
	}
	if s.cur != nil {
		s.cur.close()
		s.cur = nil
		s.log.Info("user bus connection dropped; reconnecting", "bus", s.bus.Address)
	}
	c, err := dial(ctx, s.bus)
	if err != nil {
		return nil, err
	}
	s.cur = c
	return c, nil
}

// Close closes the connection. Safe to call twice.
func (s *Systemd) Close() error {
	s.sem <- struct{}{}
	defer func() { <-s.sem }()
	s.closed = true
	if s.cur != nil {
		s.cur.close()
		s.cur = nil
	}
	return nil
}

// call runs op on a live connection. If op fails and the connection turns
// out to have dropped, it reconnects and runs op once more. The returned
// bool says whether a retry happened.
func (s *Systemd) call(ctx context.Context, what string, op func(*conn) error) (bool, error) {
	started := time.Now()
	for attempt := 0; ; attempt++ {
		c, err := s.connection(ctx)
		if err != nil {
			return attempt > 0, fmt.Errorf("%s: %w", what, err)
		}
		err = op(c)
		switch {
		case err == nil:
			return attempt > 0, nil
		case ctx.Err() != nil:
			return attempt > 0, timeoutError(ctx, what, started)
		case attempt == 0 && !c.alive():
			s.log.Debug("retrying after the user bus connection dropped", "op", what, "err", err)
			continue
		}
		return attempt > 0, fmt.Errorf("%s: %w", what, classify(err))
	}
}

// StartService implements Manager.
func (s *Systemd) StartService(ctx context.Context, spec ServiceSpec) (UnitState, error) {
	spec, err := spec.WithDefaults()
	if err != nil {
		return UnitState{}, err
	}
	ctx, cancel := withDefaultDeadline(ctx, s.opts.timeout())
	defer cancel()
	props := serviceProperties(spec)
	state, retried, err := s.startOnce(ctx, spec.Name, props)
	if !errors.Is(err, ErrUnitExists) {
		return state, err
	}
	cur, rerr := s.Unit(ctx, spec.Name)
	switch {
	case rerr != nil:
		return state, err
	case retried && cur.Running():
		// Our first attempt got through before the connection dropped.
		return s.settleStart(ctx, spec.Name)
	case cur.ActiveState != "failed":
		return cur, err
	}
	if rerr := s.ResetFailed(ctx, spec.Name); rerr != nil {
		return cur, rerr
	}
	state, _, err = s.startOnce(ctx, spec.Name, props)
	return state, err
}

func (s *Systemd) startOnce(ctx context.Context, name string, props []sdbus.Property) (UnitState, bool, error) {
	what := fmt.Sprintf("start unit %s", name)
	ch := make(chan string, 1) // buffered: go-systemd sends while holding its job lock
	var used *conn
	retried, err := s.call(ctx, what, func(c *conn) error {
		used = c
		_, err := c.sd.StartTransientUnitContext(ctx, name, "fail", props, ch)
		return err
	})
	if err != nil {
		return UnitState{}, retried, err
	}
	result, err := s.waitJob(ctx, what, used, ch)
	if errors.Is(err, errDropped) {
		st, err := s.settleStart(ctx, name)
		return st, true, err
	}
	if err != nil {
		return UnitState{}, retried, err
	}
	st, serr := s.Unit(ctx, name)
	if result != "done" {
		return st, retried, &JobError{Unit: name, Job: "start", Result: result, State: st}
	}
	return st, retried, serr
}

// errDropped: the connection dropped while a job was awaited; its
// JobRemoved signal is lost.
var errDropped = errors.New("connection dropped while waiting for the job")

// waitJob waits for a job's result on ch, the connection c dropping, or ctx.
func (s *Systemd) waitJob(ctx context.Context, what string, c *conn, ch <-chan string) (string, error) {
	started := time.Now()
	select {
	case r := <-ch:
		return r, nil
	case <-c.done:
		s.log.Info("user bus connection dropped while waiting for a job; reading the unit state instead", "op", what)
		return "", errDropped
	case <-ctx.Done():
		return "", timeoutError(ctx, "wait for the job to "+what, started)
	}
}

// settleStart infers a start job's outcome from the unit state (level-
// triggered) after its completion signal was lost: it polls until the unit
// is no longer activating.
func (s *Systemd) settleStart(ctx context.Context, name string) (UnitState, error) {
	for {
		st, err := s.Unit(ctx, name)
		if err != nil {
			return st, err
		}
		switch {
		case st.ActiveState == "failed":
			return st, &JobError{Unit: name, Job: "start", Result: "failed", State: st}
		case st.ActiveState != "activating":
			return st, nil
		}
		if err := sleepFor(ctx, 50*time.Millisecond); err != nil {
			return st, timeoutError(ctx, "wait for unit "+name+" to finish starting", time.Now())
		}
	}
}

// StopUnit implements Manager.
func (s *Systemd) StopUnit(ctx context.Context, name string) error {
	ctx, cancel := withDefaultDeadline(ctx, s.opts.timeout())
	defer cancel()
	what := fmt.Sprintf("stop unit %s", name)
	ch := make(chan string, 1)
	var used *conn
	_, err := s.call(ctx, what, func(c *conn) error {
		used = c
		_, err := c.sd.StopUnitContext(ctx, name, "replace", ch)
		return err
	})
	if err != nil {
		return err
	}
	JobQueued(ctx)
	result, err := s.waitJob(ctx, what, used, ch)
	if errors.Is(err, errDropped) {
		for {
			st, err := s.Unit(ctx, name)
			if err != nil {
				return err
			}
			if !st.Running() && st.ActiveState != "deactivating" {
				return nil
			}
			if err := sleepFor(ctx, 50*time.Millisecond); err != nil {
				return timeoutError(ctx, "wait for unit "+name+" to stop", time.Now())
			}
		}
	}
	if err != nil {
		return err
	}
	if result != "done" {
		st, _ := s.Unit(ctx, name)
		return &JobError{Unit: name, Job: "stop", Result: result, State: st}
	}
	return nil
}

// StopTimeout implements Manager: one property read.
func (s *Systemd) StopTimeout(ctx context.Context, name string) (time.Duration, error) {
	us, err := serviceProperty[uint64](ctx, s, name, "TimeoutStopUSec", "read the stop timeout of "+name)
	if err != nil {
		return 0, err
	}
	if us > uint64(NoTimeout/time.Microsecond) {
		return NoTimeout, nil
	}
	return time.Duration(us) * time.Microsecond, nil
}

// ControlPID implements Manager: one property read.
func (s *Systemd) ControlPID(ctx context.Context, name string) (int, error) {
	pid, err := serviceProperty[uint32](ctx, s, name, "ControlPID", "read the control process of "+name)
	return int(pid), err
}

// serviceProperty reads one org.freedesktop.systemd1.Service property of
// unit name, of D-Bus type T; what names the read in its errors.
func serviceProperty[T any](ctx context.Context, s *Systemd, name, prop, what string) (T, error) {
	ctx, cancel := withDefaultDeadline(ctx, s.opts.timeout())
	defer cancel()
	var v dbus.Variant
	var zero T
	_, err := s.call(ctx, what, func(c *conn) error {
		obj := c.sys.Object("org.freedesktop.systemd1", dbus.ObjectPath("/org/freedesktop/systemd1/unit/"+sdbus.PathBusEscape(name)))
		return obj.CallWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0,
			"org.freedesktop.systemd1.Service", prop).Store(&v)
	})
	if err != nil {
		return zero, err
	}
	got, ok := v.Value().(T)
	if !ok {
		return zero, fmt.Errorf("%s: %s is %T", what, prop, v.Value())
	}
	return got, nil
}

// ResetFailed implements Manager.
func (s *Systemd) ResetFailed(ctx context.Context, name string) error {
	ctx, cancel := withDefaultDeadline(ctx, s.opts.timeout())
	defer cancel()
	_, err := s.call(ctx, "reset failed unit "+name, func(c *conn) error {
		return c.sd.ResetFailedUnitContext(ctx, name)
	})
	if errors.Is(err, ErrUnitNotFound) {
		return nil
	}
	return err
}

// KillUnit implements Manager.
func (s *Systemd) KillUnit(ctx context.Context, name string, sig syscall.Signal) error {
	ctx, cancel := withDefaultDeadline(ctx, s.opts.timeout())
	defer cancel()
	_, err := s.call(ctx, fmt.Sprintf("kill unit %s with signal %d", name, int(sig)), func(c *conn) error {
		err := c.sd.KillUnitWithTarget(ctx, name, sdbus.All, int32(sig))
		if dbusErrorName(err) == "org.freedesktop.systemd1.NoSuchProcess" {
			return nil // loaded but no process left to signal
		}
		return err
	})
	return err
}

// FreezeUnit implements Manager.
func (s *Systemd) FreezeUnit(ctx context.Context, name string) error {
	return s.freezer(ctx, "freeze", name, func(c *conn) error { return c.sd.FreezeUnit(ctx, name) })
}

// ThawUnit implements Manager.
func (s *Systemd) ThawUnit(ctx context.Context, name string) error {
	return s.freezer(ctx, "thaw", name, func(c *conn) error { return c.sd.ThawUnit(ctx, name) })
}

// freezer runs FreezeUnit or ThawUnit: the manager answers once the
// cgroup is frozen or thawed. NotSupported (every manager on a hybrid or
// legacy host) is ErrFreezeUnsupported.
func (s *Systemd) freezer(ctx context.Context, what, name string, op func(*conn) error) error {
	ctx, cancel := withDefaultDeadline(ctx, s.opts.timeout())
	defer cancel()
	_, err := s.call(ctx, what+" unit "+name, func(c *conn) error {
		err := op(c)
		if dbusErrorName(err) == "org.freedesktop.DBus.Error.NotSupported" {
			return fmt.Errorf("%w: %w", ErrFreezeUnsupported, err)
		}
		return err
	})
	return err
}

// Unit implements Manager. It reads all properties in one call.
func (s *Systemd) Unit(ctx context.Context, name string) (UnitState, error) {
	ctx, cancel := withDefaultDeadline(ctx, s.opts.timeout())
	defer cancel()
	var props map[string]any
	_, err := s.call(ctx, "read unit "+name, func(c *conn) error {
		var err error
		props, err = readUnitProperties(ctx, c, name)
		return err
	})
	if err != nil {
		return UnitState{Name: name}, err
	}
	return stateFromProperties(name, props), nil
}

// absentProperty reports a D-Bus error saying the object has no such
// interface or property.
func absentProperty(err error) bool {
	var name string
	var de dbus.Error
	var dep *dbus.Error
	switch {
	case errors.As(err, &de):
		name = de.Name
	case errors.As(err, &dep):
		name = dep.Name
	}
	return name == "org.freedesktop.DBus.Error.UnknownInterface" || name == "org.freedesktop.DBus.Error.UnknownProperty"
}

// typeStateProperties are the properties UnitState holds that live on a
// unit type's own interface (Service, Socket, Scope…); the rest are the
// Unit interface's. A type without one of them leaves it absent.
var typeStateProperties = []string{"Result", "MainPID", "ControlGroup", "ExecMainCode", "ExecMainStatus"}

// readUnitProperties reads what UnitState holds with all its calls in
// flight at once: the Unit interface's properties (GetAll, ~100) and the
// five of the unit's type interface (Get each). GetAll over every
// interface returns ~400 properties and takes about three times as long,
// after every start and in every stop's polling. The calls are not one
// snapshot: a main process that ends between them may show as an active
// unit with MainPID 0 (callers that need the process treat that as ended).
func readUnitProperties(ctx context.Context, c *conn, name string) (map[string]any, error) {
	obj := c.sys.Object("org.freedesktop.systemd1", dbus.ObjectPath("/org/freedesktop/systemd1/unit/"+sdbus.PathBusEscape(name)))
	typ := name[strings.LastIndexByte(name, '.')+1:] // "service" → org.freedesktop.systemd1.Service
	iface := "org.freedesktop.systemd1." + strings.ToUpper(typ[:min(1, len(typ))]) + typ[min(1, len(typ)):]
	done := make(chan *dbus.Call, 1+len(typeStateProperties))
	all := obj.GoWithContext(ctx, "org.freedesktop.DBus.Properties.GetAll", 0, done, "org.freedesktop.systemd1.Unit")
	gets := make([]*dbus.Call, len(typeStateProperties))
	for i, p := range typeStateProperties {
		gets[i] = obj.GoWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0, done, iface, p)
	}
	for range cap(done) {
		select {
		case <-done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var unit map[string]dbus.Variant
	if err := all.Store(&unit); err != nil {
		return nil, err
	}
	props := make(map[string]any, len(unit)+len(gets))
	for k, v := range unit {
		props[k] = v.Value()
	}
	for i, call := range gets {
		var v dbus.Variant
		if err := call.Store(&v); err != nil {
			if absentProperty(err) {
				continue
			}
			return nil, err
		}
		props[typeStateProperties[i]] = v.Value()
	}
	return props, nil
}

// ServiceEnvironment implements Manager.
func (s *Systemd) ServiceEnvironment(ctx context.Context, name string) ([]string, error) {
	ctx, cancel := withDefaultDeadline(ctx, s.opts.timeout())
	defer cancel()
	st, err := s.Unit(ctx, name)
	if err != nil {
		return nil, err
	}
	if st.Gone() {
		return nil, fmt.Errorf("read the environment of %s: %w", name, ErrUnitNotFound)
	}
	var prop *sdbus.Property
	_, err = s.call(ctx, "read the environment of "+name, func(c *conn) error {
		var err error
		prop, err = c.sd.GetUnitTypePropertyContext(ctx, name, "Service", "Environment")
		return err
	})
	if err != nil {
		return nil, err
	}
	env, _ := prop.Value.Value().([]string)
	return env, nil
}

// ServiceCommand implements Manager.
func (s *Systemd) ServiceCommand(ctx context.Context, name string) (ServiceCommand, error) {
	ctx, cancel := withDefaultDeadline(ctx, s.opts.timeout())
	defer cancel()
	st, err := s.Unit(ctx, name)
	if err != nil {
		return ServiceCommand{}, err
	}
	if st.Gone() {
		return ServiceCommand{}, fmt.Errorf("read the command of %s: %w", name, ErrUnitNotFound)
	}
	var ex ServiceCommand
	_, err = s.call(ctx, "read the command of "+name, func(c *conn) error {
		props := map[string]any{}
		for _, p := range []string{"ExecStart", "WorkingDirectory", "ExecMainStartTimestamp"} {
			prop, err := c.sd.GetUnitTypePropertyContext(ctx, name, "Service", p)
			if err != nil {
				return err
			}
			props[p] = prop.Value.Value()
		}
		ex = serviceCommandFromProperties(props)
		return nil
	})
	return ex, err
}

// serviceCommandFromProperties decodes ExecStart (a(sasbttttuii): path,
// argv, ignore-failure, timestamps, pid, code, status), WorkingDirectory
// and ExecMainStartTimestamp (µs since the epoch, 0 for never).
func serviceCommandFromProperties(p map[string]any) ServiceCommand {
	var ex ServiceCommand
	if cmds, ok := p["ExecStart"].([][]any); ok && len(cmds) > 0 && len(cmds[0]) > 1 {
		ex.Argv, _ = cmds[0][1].([]string)
	}
	ex.WorkingDirectory, _ = p["WorkingDirectory"].(string)
	if us, ok := p["ExecMainStartTimestamp"].(uint64); ok && us > 0 {
		ex.StartedAt = time.UnixMicro(int64(us))
	}
	return ex
}

// stateFromProperties picks UnitState out of GetAll's result; absent
// properties (non-service units) stay zero.
func stateFromProperties(name string, p map[string]any) UnitState {
	str := func(k string) string { v, _ := p[k].(string); return v }
	num := func(k string) int {
		switch v := p[k].(type) {
		case uint32:
			return int(v)
		case int32:
			return int(v)
		}
		return 0
	}
	st := UnitState{
		Name:           name,
		LoadState:      str("LoadState"),
		ActiveState:    str("ActiveState"),
		SubState:       str("SubState"),
		Result:         str("Result"),
		MainPID:        num("MainPID"),
		ControlGroup:   str("ControlGroup"),
		ExecMainCode:   num("ExecMainCode"),
		ExecMainStatus: num("ExecMainStatus"),
		Description:    str("Description"),
		UnitFileState:  str("UnitFileState"),
		FreezerState:   str("FreezerState"),
	}
	if id, ok := p["InvocationID"].([]byte); ok && len(id) > 0 {
		st.InvocationID = hex.EncodeToString(id)
	}
	return st
}

// ListUnits implements Manager.
func (s *Systemd) ListUnits(ctx context.Context, patterns ...string) ([]UnitSummary, error) {
	ctx, cancel := withDefaultDeadline(ctx, s.opts.timeout())
	defer cancel()
	var list []sdbus.UnitStatus
	_, err := s.call(ctx, "list units", func(c *conn) error {
		var err error
		list, err = c.sd.ListUnitsByPatternsContext(ctx, nil, patterns)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]UnitSummary, 0, len(list))
	for _, u := range list {
		out = append(out, UnitSummary{Name: u.Name, Description: u.Description,
			LoadState: u.LoadState, ActiveState: u.ActiveState, SubState: u.SubState})
	}
	slices.SortFunc(out, func(a, b UnitSummary) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// managerProperty reads one property of the systemd1 Manager object.
func (s *Systemd) managerProperty(ctx context.Context, prop string) (dbus.Variant, error) {
	ctx, cancel := withDefaultDeadline(ctx, s.opts.timeout())
	defer cancel()
	var v dbus.Variant
	_, err := s.call(ctx, "read manager property "+prop, func(c *conn) error {
		return c.manager().CallWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0,
			"org.freedesktop.systemd1.Manager", prop).Store(&v)
	})
	return v, err
}

// Version implements Manager.
func (s *Systemd) Version(ctx context.Context) (Version, error) {
	v, err := s.managerProperty(ctx, "Version")
	if err != nil {
		return Version{}, err
	}
	raw, _ := v.Value().(string)
	return ParseVersion(raw), nil
}

// Ping implements Manager: org.freedesktop.DBus.Peer.Ping answered by the
// manager's own event loop, so a stopped manager fails it even though the
// bus still answers.
func (s *Systemd) Ping(ctx context.Context) error {
	ctx, cancel := withDefaultDeadline(ctx, s.opts.timeout())
	defer cancel()
	_, err := s.call(ctx, "ping the user manager", func(c *conn) error {
		return c.manager().CallWithContext(ctx, "org.freedesktop.DBus.Peer.Ping", 0).Store()
	})
	return err
}

// ManagerPID is the user manager's pid, as the bus reports the owner of
// org.freedesktop.systemd1.
func (s *Systemd) ManagerPID(ctx context.Context) (int, error) {
	ctx, cancel := withDefaultDeadline(ctx, s.opts.timeout())
	defer cancel()
	var pid uint32
	_, err := s.call(ctx, "read the user manager's pid", func(c *conn) error {
		return c.sys.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetConnectionUnixProcessID", 0,
			"org.freedesktop.systemd1").Store(&pid)
	})
	return int(pid), err
}

// Controllers says which of memory, cpu and pids the user manager can
// apply to its units (Cgroups.ManagerControllers over its own cgroup, the
// parent of its init.scope): where one is missing, systemd accepts a
// unit's MemoryMax=, CPUQuota= or TasksMax= and enforces nothing.
func (s *Systemd) Controllers(ctx context.Context) (ControllerSupport, error) {
	pid, err := s.ManagerPID(ctx)
	if err != nil {
		return ControllerSupport{}, err
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ControllerSupport{}, fmt.Errorf("controllers of the user manager: %w", err)
	}
	m, err := ParseProcCgroup(data)
	if err != nil {
		return ControllerSupport{}, fmt.Errorf("controllers of the user manager: %w", err)
	}
	cg, err := OpenCgroups("")
	if err != nil {
		return ControllerSupport{}, err
	}
	return cg.ManagerControllers(strings.TrimSuffix(m.Path, "/init.scope"))
}

// TaskLimit is the tightest task limit over the user manager's cgroup,
// its ancestors and the kernel (TasksOf): how many more tasks its units
// may start.
func (s *Systemd) TaskLimit(ctx context.Context) (TaskLimit, error) {
	pid, err := s.ManagerPID(ctx)
	if err != nil {
		return TaskLimit{}, err
	}
	return TasksOf("", pid)
}
