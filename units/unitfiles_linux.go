package units

import (
	"context"
	"fmt"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
)

// Unit files: installed units (not transient ones) that `agent-fleet
// install` writes below UserUnitDir and enables here. These are not part of
// Manager: the fleet never needs them.

// Reload makes the user manager re-read unit files (daemon-reload).
func (s *Systemd) Reload(ctx context.Context) error {
	ctx, cancel := withDefaultDeadline(ctx, s.opts.timeout())
	defer cancel()
	_, err := s.call(ctx, "reload the user manager", func(c *conn) error {
		return c.sd.ReloadContext(ctx)
	})
	return err
}

// EnableUnitFiles enables installed unit files by name (the symlinks their
// [Install] sections ask for), replacing conflicting links.
func (s *Systemd) EnableUnitFiles(ctx context.Context, names ...string) error {
	ctx, cancel := withDefaultDeadline(ctx, s.opts.timeout())
	defer cancel()
	_, err := s.call(ctx, fmt.Sprintf("enable %v", names), func(c *conn) error {
		_, _, err := c.sd.EnableUnitFilesContext(ctx, names, false, true)
		return err
	})
	return err
}

// DisableUnitFiles removes the links EnableUnitFiles made.
func (s *Systemd) DisableUnitFiles(ctx context.Context, names ...string) error {
	ctx, cancel := withDefaultDeadline(ctx, s.opts.timeout())
	defer cancel()
	_, err := s.call(ctx, fmt.Sprintf("disable %v", names), func(c *conn) error {
		_, err := c.sd.DisableUnitFilesContext(ctx, names, false)
		return err
	})
	return err
}

// StartUnit starts a loaded unit and waits for its start job.
func (s *Systemd) StartUnit(ctx context.Context, name string) error {
	ctx, cancel := withDefaultDeadline(ctx, s.opts.timeout())
	defer cancel()
	what := "start unit " + name
	ch := make(chan string, 1)
	var used *conn
	if _, err := s.call(ctx, what, func(c *conn) error {
		used = c
		_, err := c.sd.StartUnitContext(ctx, name, "replace", ch)
		return err
	}); err != nil {
		return err
	}
	result, err := s.waitJob(ctx, what, used, ch)
	if err != nil {
		return err
	}
	if result != "done" {
		st, _ := s.Unit(ctx, name)
		return &JobError{Unit: name, Job: "start", Result: result, State: st}
	}
	return nil
}

// SocketListen returns the addresses a socket unit listens on (its Listen
// property: paths for Unix sockets), or ErrUnitNotFound when no such unit
// is loaded.
func (s *Systemd) SocketListen(ctx context.Context, name string) ([]string, error) {
	ctx, cancel := withDefaultDeadline(ctx, s.opts.timeout())
	defer cancel()
	st, err := s.Unit(ctx, name)
	if err != nil {
		return nil, err
	}
	if st.Gone() {
		return nil, fmt.Errorf("read the addresses of %s: %w", name, ErrUnitNotFound)
	}
	var prop *sdbus.Property
	if _, err := s.call(ctx, "read the addresses of "+name, func(c *conn) error {
		var err error
		prop, err = c.sd.GetUnitTypePropertyContext(ctx, name, "Socket", "Listen")
		return err
	}); err != nil {
		return nil, err
	}
	var out []string
	switch v := prop.Value.Value().(type) {
	case [][]any: // a(ss): (type, address)
		for _, pair := range v {
			if len(pair) == 2 {
				if addr, ok := pair[1].(string); ok {
					out = append(out, addr)
				}
			}
		}
	default:
		return nil, fmt.Errorf("read the addresses of %s: unexpected Listen value %T", name, v)
	}
	return out, nil
}

// UnitPath returns the directories the user manager loads unit files from,
// in its order of precedence (its UnitPath property). A unit file written
// anywhere else is invisible to it.
func (s *Systemd) UnitPath(ctx context.Context) ([]string, error) {
	v, err := s.managerProperty(ctx, "UnitPath")
	if err != nil {
		return nil, err
	}
	dirs, ok := v.Value().([]string)
	if !ok {
		return nil, fmt.Errorf("read manager property UnitPath: unexpected type %s", v.Signature())
	}
	return dirs, nil
}
