//go:build linux

package units

import (
	"strings"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// execCommand is one entry of an Exec*= property, D-Bus signature (sasb).
type execCommand struct {
	Path          string
	Argv          []string
	IgnoreFailure bool
}

// escapeArgv makes systemd pass argv verbatim: it expands $VAR and ${VAR}
// in Exec*= arguments at execution time (and splits a bare $VAR word), but
// turns "$$" into "$".
func escapeArgv(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = strings.ReplaceAll(a, "$", "$$")
	}
	return out
}

func prop(name string, v any) sdbus.Property {
	return sdbus.Property{Name: name, Value: dbus.MakeVariant(v)}
}

// usec converts to systemd's microsecond properties (signature t).
func usec[D ~int64](d D) uint64 { return uint64(d) / 1000 }

// outputProperty maps a StandardOutput=/StandardError= value the way
// systemd-run does: file paths go in their own properties.
func outputProperty(stream string, out Output) sdbus.Property {
	s := string(out)
	for _, kind := range []struct{ prefix, suffix string }{
		{"append:", "FileToAppend"}, {"truncate:", "FileToTruncate"}, {"file:", "File"},
	} {
		if path, ok := strings.CutPrefix(s, kind.prefix); ok {
			return prop(stream+kind.suffix, path)
		}
	}
	return prop(stream, s)
}

// serviceProperties renders a defaulted, validated spec as the properties of
// StartTransientUnit.
func serviceProperties(spec ServiceSpec) []sdbus.Property {
	argv := escapeArgv(spec.Argv)
	props := []sdbus.Property{
		prop("Description", spec.Description),
		prop("Type", string(spec.Type)),
		prop("ExecStart", []execCommand{{Path: argv[0], Argv: argv}}),
		sdbus.PropSlice(spec.Slice),
		prop("KillMode", "control-group"),
		prop("CollectMode", string(spec.Collect)),
	}
	if spec.NotifyAccess != "" {
		props = append(props, prop("NotifyAccess", spec.NotifyAccess))
	}
	if spec.WorkingDirectory != "" {
		props = append(props, prop("WorkingDirectory", spec.WorkingDirectory))
	}
	if len(spec.Env) > 0 {
		props = append(props, prop("Environment", spec.Env))
	}
	if len(spec.UnsetEnv) > 0 {
		props = append(props, prop("UnsetEnvironment", spec.UnsetEnv))
	}
	if spec.StartTimeout > 0 {
		props = append(props, prop("TimeoutStartUSec", usec(spec.StartTimeout)))
	}
	if spec.StopTimeout > 0 {
		props = append(props, prop("TimeoutStopUSec", usec(spec.StopTimeout)))
	}
	if spec.MaxRuntime > 0 {
		props = append(props, prop("RuntimeMaxUSec", usec(spec.MaxRuntime)))
	}
	if spec.Stdout != "" {
		props = append(props, outputProperty("StandardOutput", spec.Stdout))
	}
	if spec.Stderr != "" {
		props = append(props, outputProperty("StandardError", spec.Stderr))
	}
	props = append(props, sandboxProperties(spec.Sandbox)...)
	var post []execCommand
	if len(spec.StopPost) > 0 {
		a := escapeArgv(spec.StopPost)
		post = append(post, execCommand{Path: a[0], Argv: a, IgnoreFailure: true})
	}
	if spec.ExitRecord != "" {
		a := escapeArgv(exitRecordArgv(spec.ExitRecord))
		post = append(post, execCommand{Path: a[0], Argv: a, IgnoreFailure: true})
	}
	if len(post) > 0 {
		props = append(props, prop("ExecStopPost", post))
	}
	return append(props, limitProperties(spec.Limits)...)
}

// limitProperties are the properties of l, each with the accounting it
// needs (systemd-run's names: CPUQuota= is CPUQuotaPerSecUSec, µs of CPU
// time per second).
func limitProperties(l Limits) []sdbus.Property {
	var props []sdbus.Property
	if l.MemoryMax > 0 {
		props = append(props, prop("MemoryAccounting", true), prop("MemoryMax", l.MemoryMax))
	}
	if l.CPUQuotaPercent > 0 {
		props = append(props, prop("CPUAccounting", true), prop("CPUQuotaPerSecUSec", uint64(l.CPUQuotaPercent)*10000))
	}
	if l.TasksMax > 0 {
		props = append(props, prop("TasksAccounting", true), prop("TasksMax", l.TasksMax))
	}
	return props
}

// bindMount is one entry of BindPaths=/BindReadOnlyPaths=, D-Bus signature
// (ssbt): source, destination, ignore a missing source, mount flags.
type bindMount struct {
	Source, Destination string
	IgnoreMissing       bool
	Flags               uint64
}

// msRec is MS_REC: bind mounts are recursive, as systemd-run makes them.
const msRec = 16384

func bindMounts(paths []string) []bindMount {
	out := make([]bindMount, 0, len(paths))
	for _, p := range paths {
		path, optional := strings.CutPrefix(p, "-")
		out = append(out, bindMount{Source: path, Destination: path, IgnoreMissing: optional, Flags: msRec})
	}
	return out
}

// sandboxProperties renders a validated Sandbox.
func sandboxProperties(s Sandbox) []sdbus.Property {
	var props []sdbus.Property
	if s.ProtectSystem != "" {
		props = append(props, prop("ProtectSystem", s.ProtectSystem))
	}
	if s.ProtectHome != "" {
		props = append(props, prop("ProtectHome", s.ProtectHome))
	}
	if s.PrivateTmp {
		props = append(props, prop("PrivateTmp", true))
	}
	if s.NoNewPrivileges {
		props = append(props, prop("NoNewPrivileges", true))
	}
	for _, l := range []struct {
		name  string
		paths []string
	}{{"ReadWritePaths", s.ReadWritePaths}, {"ReadOnlyPaths", s.ReadOnlyPaths}, {"InaccessiblePaths", s.InaccessiblePaths}} {
		if len(l.paths) > 0 {
			props = append(props, prop(l.name, l.paths))
		}
	}
	if len(s.BindPaths) > 0 {
		props = append(props, prop("BindPaths", bindMounts(s.BindPaths)))
	}
	if len(s.BindReadOnlyPaths) > 0 {
		props = append(props, prop("BindReadOnlyPaths", bindMounts(s.BindReadOnlyPaths)))
	}
	return props
}
