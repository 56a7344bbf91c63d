// Package units drives the systemd user manager over D-Bus and reads the
// cgroups of the units it runs.
//
// Everything that speaks D-Bus lives in _linux.go files; on every other
// operating system Connect and Probe return ErrUnsupported and no D-Bus code
// is linked. The cgroup and /proc readers are plain file readers with
// injectable roots, so their layouts are tested with fixture trees.
//
// Where no user manager runs, BootPrivateManager boots a private
// `systemd --user` (root only, on machines whose PID 1 is not systemd:
// containers, CI VMs) for the demo, the benchmark and the tests
// (units/unitstest wraps it).
//
// References: docs/architecture.md "Workers" and "Decisions", docs/systemd.md
// "Transient units" and "Cgroups", docs/systemd.md "A private user manager".
package units
