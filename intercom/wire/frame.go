// Package wire is Agent Intercom protocol v4 on the wire: length-prefixed
// JSON framing, the client and broker frames of spec §2 with their exact key
// sets, the validation rules and limits of §2–§6, and the error codes of §3.
//
// It does no networking and keeps no state: callers feed it bytes and get
// frames back, or hand it values and get bytes to write. Every limit is
// checked before memory is committed to the input it guards.
package wire

import (
	"encoding/binary"
	"io"
	"strconv"
)

// Protocol identity (spec §1.3). Both are checked exactly at registration.
const (
	ProtocolName    = "pi-intercom"
	ProtocolVersion = 4
)

// ProtocolLabel is how agent-fleet names the protocol to people and in
// version and capabilities reports: "pi-intercom v4".
func ProtocolLabel() string { return ProtocolName + " v" + strconv.Itoa(ProtocolVersion) }

// MaxFrameBytes is the largest payload a frame may declare (spec §1.2):
// 1 MiB, inclusive. Larger declarations are refused as soon as the 4 header
// bytes are read, before any payload is buffered.
const MaxFrameBytes = 1 << 20

// HeaderBytes is the size of the big-endian length prefix.
const HeaderBytes = 4

// FrameReader reads frames from a byte stream. It tolerates any
// fragmentation of the stream: a header or payload split across reads, or
// several frames in one read.
//
// The slice returned by Next is valid until the next call to Next.
type FrameReader struct {
	r   io.Reader
	hdr [HeaderBytes]byte
	buf []byte
	max int
}

// NewFrameReader reads frames from r with the spec limit of MaxFrameBytes.
// Wrap r in a bufio.Reader to batch small reads.
func NewFrameReader(r io.Reader) *FrameReader {
	return &FrameReader{r: r, max: MaxFrameBytes}
}

// Next returns the next frame's payload (the JSON bytes without the length
// prefix). It returns io.EOF at a clean end of stream between frames,
// io.ErrUnexpectedEOF for a stream cut inside a frame, and an
// *OversizeError (matching ErrFrameTooLarge) when a header declares more
// than MaxFrameBytes; the payload of an oversized frame is never read.
func (fr *FrameReader) Next() ([]byte, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(fr.hdr[:])
	if int64(n) > int64(fr.max) {
		return nil, &OversizeError{Declared: int64(n), Limit: fr.max}
	}
	if cap(fr.buf) < int(n) {
		fr.buf = make([]byte, n)
	}
	fr.buf = fr.buf[:n]
	if _, err := io.ReadFull(fr.r, fr.buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	payload := fr.buf
	// Don't pin a 1 MiB buffer for the life of an idle connection.
	if cap(fr.buf) > 64<<10 {
		fr.buf = nil
	}
	return payload, nil
}

// AppendFrame appends a frame carrying payload to dst.
func AppendFrame(dst, payload []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)))
	return append(dst, payload...)
}

// beginFrame reserves the length prefix of a frame whose JSON is appended
// next; endFrame fills it in.
func beginFrame(dst []byte) ([]byte, int) {
	start := len(dst)
	return append(dst, 0, 0, 0, 0), start
}

func endFrame(dst []byte, start int) []byte {
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-HeaderBytes))
	return dst
}
