//go:build !windows

package fleet

import "golang.org/x/sys/unix"

// signalNumber maps a signal name as systemd writes it ("TERM") to its number.
func signalNumber(name string) int { return int(unix.SignalNum("SIG" + name)) }
