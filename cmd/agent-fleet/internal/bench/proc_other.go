//go:build !linux

package bench

import "errors"

// readProcUsage needs Linux's /proc; elsewhere the benchmarks report no
// broker CPU or memory.
func readProcUsage(int) (procUsage, error) {
	return procUsage{}, errors.New("process CPU and memory are read from /proc, which this platform lacks")
}

func processName(int) string { return "" }

func privateMemory(int) (kib, threads int64, ok bool) { return 0, 0, false }
