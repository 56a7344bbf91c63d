package intercom

import (
	"net"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// A client paces the frames it writes to stay inside the broker's rate
// limit (spec §6.6) rather than lose its connection: a burst of sends, or
// the acknowledgements of a burst of inbound mail, waits a moment instead
// of ending in RATE_LIMITED, a reconnect, and sends whose outcome is
// unknown. The bucket is the broker's with a margin, because the broker
// starts its bucket when it reads the registration, a moment after the
// client wrote it, and may read a backlog of frames at once.
const (
	paceCapacity = wire.RateCapacity * 3 / 4
	paceRefill   = wire.RateRefill * 4 / 5 // tokens per second
	// paceChunk bounds what one write costs (a frame alone may cost more,
	// up to 128 tokens): a batch is written in pieces the broker's bucket
	// can pay for, which it cannot go below zero for.
	paceChunk = 60
)

// pacer is the token bucket of one connection, as the client sees it.
type pacer struct {
	nc     net.Conn // the connection whose bucket this is
	tokens float64  // may go below zero: the wait pays it back
	at     time.Time
}

// delay takes cost tokens (what the frames to write draw) from nc's bucket
// at now and returns how long to wait before writing them.
func (p *pacer) delay(nc net.Conn, cost int, now time.Time) time.Duration {
	if p.nc != nc {
		p.nc, p.tokens, p.at = nc, paceCapacity-1, now // the registration drew one
	}
	p.tokens = min(paceCapacity, p.tokens+now.Sub(p.at).Seconds()*paceRefill)
	p.at = now
	p.tokens -= float64(cost)
	if p.tokens >= 0 {
		return 0
	}
	return time.Duration(-p.tokens / paceRefill * float64(time.Second))
}
