package wire

import (
	"encoding/binary"
	"math"
)

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
	_, cost := FramesPrefix(buf, math.MaxInt)
	return cost
}

// FramesPrefix is the length n of the longest run of whole frames at the
// start of buf that costs at most maxCost together, and at least the first
// frame: what can be written in one go without overdrawing a bucket; and
// what that run costs.
func FramesPrefix(buf []byte, maxCost int) (n, cost int) {
	for n+HeaderBytes <= len(buf) {
		size := HeaderBytes + int(binary.BigEndian.Uint32(buf[n:]))
		c := FrameCost(size - HeaderBytes)
		if n > 0 && cost+c > maxCost {
			break
		}
		n, cost = min(len(buf), n+size), cost+c
	}
	if n == 0 {
		return len(buf), 0
	}
	return n, cost
}
