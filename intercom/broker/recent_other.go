//go:build !unix

package broker

func allocRecentMemory(n int) ([]byte, func()) { return heapRecentMemory(n) }
