//go:build !linux

package broker

// loopState: there is no event loop off Linux.
func loopState(*Broker) (running bool, conns int) { return false, 0 }
