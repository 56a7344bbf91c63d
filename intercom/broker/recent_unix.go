//go:build unix

package broker

import "syscall"

// allocRecentMemory maps n zeroed bytes outside the Go heap: the dedup
// cache's fixed tables neither count toward the collector's heap goal nor
// take resident memory before they are used.
func allocRecentMemory(n int) ([]byte, func()) {
	mem, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return heapRecentMemory(n)
	}
	return mem, func() { _ = syscall.Munmap(mem) }
}
