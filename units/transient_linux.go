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
