package units

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// BusSource says where a bus address came from (for doctor).
type BusSource string

const (
	// SourceBusEnv: the DBUS_SESSION_BUS_ADDRESS variable.
	SourceBusEnv BusSource = "DBUS_SESSION_BUS_ADDRESS"
	// SourceRuntimeDir: the socket $XDG_RUNTIME_DIR/bus.
	SourceRuntimeDir BusSource = "XDG_RUNTIME_DIR/bus"
	// SourceOptions: given by the caller in Options.Bus.
	SourceOptions BusSource = "options"
)

// BusAddress is a D-Bus address of the user bus and its origin.
type BusAddress struct {
	// Address in D-Bus syntax, e.g. "unix:path=/run/user/1000/bus".
	Address string
	// Source says where Address came from.
	Source BusSource
}

// UnixPathAddress is the D-Bus address of a unix socket path.
func UnixPathAddress(path string) string { return "unix:path=" + path }

// ResolveBus finds the user bus the way docs/systemd.md "The user bus" describes:
// DBUS_SESSION_BUS_ADDRESS if set, else $XDG_RUNTIME_DIR/bus if that socket
// exists. Otherwise it returns a *NoUserBusError (ErrNoUserBus) that says
// what is missing and how to fix it. It never falls back to dbus-launch or
// to a path the environment does not name. getenv nil means os.Getenv.
func ResolveBus(getenv func(string) string) (BusAddress, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	busEnv, runtimeDir := getenv("DBUS_SESSION_BUS_ADDRESS"), getenv("XDG_RUNTIME_DIR")
	if busEnv != "" {
		// A unix:path= address naming a missing socket is the usual stale
		// environment; say so now rather than as a dial error.
		if path, ok := unixPath(busEnv); ok && !isSocket(path) {
			return BusAddress{}, &NoUserBusError{BusEnv: busEnv, RuntimeDir: runtimeDir, Missing: path, Hint: uidBusHint(runtimeDir), NoSystemdInit: NoSystemdInit()}
		}
		return BusAddress{Address: busEnv, Source: SourceBusEnv}, nil
	}
	if runtimeDir != "" {
		path := filepath.Join(runtimeDir, "bus")
		if isSocket(path) {
			return BusAddress{Address: UnixPathAddress(path), Source: SourceRuntimeDir}, nil
		}
		return BusAddress{}, &NoUserBusError{RuntimeDir: runtimeDir, Missing: path, Hint: uidBusHint(runtimeDir), NoSystemdInit: NoSystemdInit()}
	}
	return BusAddress{}, &NoUserBusError{Hint: uidBusHint(""), NoSystemdInit: NoSystemdInit()}
}

// unixPath extracts the path of the first "unix:path=" entry of a D-Bus
// address list.
func unixPath(address string) (string, bool) {
	for entry := range strings.SplitSeq(address, ";") {
		rest, ok := strings.CutPrefix(entry, "unix:")
		if !ok {
			continue
		}
		for kv := range strings.SplitSeq(rest, ",") {
			if path, ok := strings.CutPrefix(kv, "path="); ok {
				return unescapeAddress(path), true
			}
		}
	}
	return "", false
}

// unescapeAddress undoes D-Bus address %XX escaping.
func unescapeAddress(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(n))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isSocket(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

// uidBusHint returns /run/user/<uid>/bus when that socket exists and is not
// the one the environment already names, for the error message.
func uidBusHint(runtimeDir string) string {
	uid := os.Getuid()
	if uid < 0 { // Windows
		return ""
	}
	path := filepath.Join("/run/user", strconv.Itoa(uid), "bus")
	if runtimeDir != "" && filepath.Join(runtimeDir, "bus") == path {
		return ""
	}
	if isSocket(path) {
		return path
	}
	return ""
}

// UserUnitDir is where a user's own unit files live:
// $XDG_CONFIG_HOME/systemd/user, else ~/.config/systemd/user. A user
// manager reads it only if it started with the same XDG_CONFIG_HOME.
func UserUnitDir(getenv func(string) string) (string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if dir := getenv("XDG_CONFIG_HOME"); filepath.IsAbs(dir) {
		return filepath.Join(dir, "systemd", "user"), nil
	}
	home := getenv("HOME")
	if !filepath.IsAbs(home) {
		return "", errors.New("cannot locate user unit files: neither XDG_CONFIG_HOME nor HOME is an absolute path")
	}
	return filepath.Join(home, ".config", "systemd", "user"), nil
}

// NoSystemdInit reports whether this is Linux and PID 1 is not systemd (a
// container, a CI VM): then no user manager comes with a login, and
// lingering does not apply.
func NoSystemdInit() bool {
	comm, err := os.ReadFile("/proc/1/comm")
	return err == nil && strings.TrimSpace(string(comm)) != "systemd"
}
