//go:build linux

package units

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// conn is one live go-systemd connection: the method-call and signal
// connections go-systemd dials, and a channel closed when either drops.
type conn struct {
	sd   *sdbus.Conn
	sys  *dbus.Conn    // the method-call connection (go-systemd dials it first)
	done chan struct{} // closed once either underlying connection is gone
}

func (c *conn) alive() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

func (c *conn) close() { c.sd.Close() }

// manager is the systemd1 manager object on the method-call connection.
func (c *conn) manager() dbus.BusObject {
	return c.sys.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1")
}

// dial opens a go-systemd connection to the bus at addr, authenticating
// with EXTERNAL and the numeric uid like go-systemd does. Unlike
// sdbus.NewUserConnectionContext it never consults godbus's address
// discovery (which would run dbus-launch), and the whole handshake —
// including the calls go-systemd makes without a context — is abandoned
// when ctx ends: the half-open connections are closed, which unblocks them.
func dial(ctx context.Context, bus BusAddress) (*conn, error) {
	var (
		mu        sync.Mutex
		raws      []*dbus.Conn
		abandoned bool
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		abandoned = true
		for _, r := range raws {
			r.Close()
		}
	})
	sd, err := sdbus.NewConnection(func() (*dbus.Conn, error) {
		r, err := dbus.Dial(bus.Address)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		if abandoned {
			mu.Unlock()
			r.Close()
			return nil, ctx.Err()
		}
		raws = append(raws, r)
		mu.Unlock()
		if err := r.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
			r.Close()
			return nil, fmt.Errorf("authenticate: %w", err)
		}
		if err := r.Hello(); err != nil {
			r.Close()
			return nil, fmt.Errorf("hello: %w", err)
		}
		return r, nil
	})
	if !stop() {
		if sd != nil {
			sd.Close()
		}
		return nil, fmt.Errorf("connect to the user bus at %s: %w (%w)", bus.Address, ErrTimeout, ctx.Err())
	}
	if err != nil {
		return nil, fmt.Errorf("connect to the user bus at %s (from %s): %w: %w", bus.Address, bus.Source, ErrManagerUnreachable, err)
	}
	c := &conn{sd: sd, sys: raws[0], done: make(chan struct{})}
	go func() {
		select {
		case <-raws[0].Context().Done():
		case <-raws[1].Context().Done():
		}
		close(c.done)
	}()
	return c, nil
}

// classify maps a D-Bus or transport error to this package's vocabulary,
// keeping the original error in the chain.
func classify(err error) error {
	if name := dbusErrorName(err); name != "" {
		switch name {
		case "org.freedesktop.systemd1.NoSuchUnit", "org.freedesktop.DBus.Error.UnknownObject":
			return fmt.Errorf("%w: %w", ErrUnitNotFound, err)
		case "org.freedesktop.systemd1.UnitExists":
			return fmt.Errorf("%w: %w", ErrUnitExists, err)
		case "org.freedesktop.DBus.Error.NoReply", "org.freedesktop.DBus.Error.Timeout", "org.freedesktop.DBus.Error.TimedOut":
			return fmt.Errorf("%w: %w", ErrTimeout, err)
		case "org.freedesktop.DBus.Error.ServiceUnknown", "org.freedesktop.DBus.Error.NameHasNoOwner",
			"org.freedesktop.DBus.Error.Disconnected", "org.freedesktop.DBus.Error.NoServer":
			return fmt.Errorf("%w: %w", ErrManagerUnreachable, err)
		case "org.freedesktop.DBus.Error.LimitsExceeded":
			return fmt.Errorf("the user bus refused the call: one of its limits per connection or per user is reached "+
				"(pending replies, match rules, connections; docs/systemd.md \"At scale\"): %w", err)
		}
		return err
	}
	var ne net.Error
	if errors.Is(err, dbus.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &ne) {
		return fmt.Errorf("%w: %w", ErrManagerUnreachable, err)
	}
	return err
}

// dbusErrorName is the D-Bus error name carried by err, or "".
func dbusErrorName(err error) string {
	var de dbus.Error
	if errors.As(err, &de) {
		return de.Name
	}
	var pe *dbus.Error
	if errors.As(err, &pe) && pe != nil {
		return pe.Name
	}
	return ""
}
