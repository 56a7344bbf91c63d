package wire

import "encoding/binary"

// The broker's per-connection rate limit (spec §6.6): a token bucket that
// starts full with RateCapacity tokens and refills at RateRefill tokens a
// second; every frame a client writes draws FrameCost from it, and a frame
// the bucket cannot pay for ends the connection (RATE_LIMITED).
const (
	RateCapacity      = 240
	RateRefill        = 120 // tokens per second
	RateBytesPerToken = 8 << 10
)

// FrameCost is the tokens a frame of n payload bytes draws: one for each
// 8 KiB begun, at least one.
func FrameCost(n int) int { return max(1, (n+RateBytesPerToken-1)/RateBytesPerToken) }

// FramesCost is what the frames in buf (whole frames, length prefixes
// included, as written in one go) draw together.
func FramesCost(buf []byte) int {
	cost := 0
	for len(buf) >= HeaderBytes {
		n := int(binary.BigEndian.Uint32(buf))
		cost += FrameCost(n)
		buf = buf[min(len(buf), HeaderBytes+n):]
	}
	return cost
}
