//go:build !linux

package broker

// LoopState: there is no event loop off Linux.
func LoopState(*Broker) (running bool, conns int) { return false, 0 }
