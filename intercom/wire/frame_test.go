package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

// realFrames are frames as the TypeScript clients and broker write them.
var realFrames = []string{
	`{"type":"health","requestId":"h1"}`,
	`{"type":"register","protocol":"pi-intercom","version":4,"session":{"cwd":"/repo","model":"claude","pid":4242,"startedAt":1760000000000,"lastActivity":1760000000000,"name":"alpha","runtimeInstanceId":"rtA"},"sessionId":"aaaa-1111","scopeId":"Scope_AAAAAAAAAA"}`,
	`{"type":"send","to":"beta","message":{"id":"m1","timestamp":1760000000001,"content":{"text":"héllo \"quoted\" ✓ 🚀"}}}`,
	`{"type":"send","to":"bbbb-2222","message":{"id":"q1","timestamp":1,"expectsReply":true,"content":{"text":"ok?","attachments":[{"type":"snippet","name":"a.go","content":"package a","language":"go"}]}}}`,
	`{"type":"message_received","deliveryId":"6c1f3a52-5d43-4c7e-9a4d-6b2f0f3e2a11"}`,
	`{"type":"health_ok","requestId":"h1","protocol":"pi-intercom","version":4,"endpoint":"local","remoteAccess":` + RemoteAccessJSON + `}`,
	`{}`,
}

func stream(frames ...string) []byte {
	var b []byte
	for _, f := range frames {
		b = AppendFrame(b, []byte(f))
	}
	return b
}

func readAll(t *testing.T, r io.Reader) []string {
	t.Helper()
	fr := NewFrameReader(r)
	var out []string
	for {
		p, err := fr.Next()
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		out = append(out, string(p))
	}
}

// splitReader returns data in two reads split at off, then EOF.
type splitReader struct {
	data []byte
	cuts []int
	pos  int
}

func (s *splitReader) Read(p []byte) (int, error) {
	if s.pos >= len(s.data) {
		return 0, io.EOF
	}
	end := len(s.data)
	for _, c := range s.cuts {
		if c > s.pos {
			end = min(end, c)
			break
		}
	}
	n := copy(p, s.data[s.pos:end])
	s.pos += n
	return n, nil
}

func TestFrameReaderEverySplitOffset(t *testing.T) {
	data := stream(realFrames...)
	for off := 0; off <= len(data); off++ {
		got := readAll(t, &splitReader{data: data, cuts: []int{off}})
		require.Equal(t, realFrames, got, "split at %d", off)
	}
}

func TestFrameReaderEveryTwoSplitsOfEachFrame(t *testing.T) {
	for _, f := range realFrames[:5] {
		data := stream(f, f)
		for a := 0; a < len(data); a++ {
			for b := a + 1; b < len(data); b += 7 {
				got := readAll(t, &splitReader{data: data, cuts: []int{a, b}})
				require.Equal(t, []string{f, f}, got)
			}
		}
	}
}

func TestFrameReaderByteAtATime(t *testing.T) {
	got := readAll(t, iotest.OneByteReader(bytes.NewReader(stream(realFrames...))))
	require.Equal(t, realFrames, got)
}

func TestFrameReaderLimitIsInclusive(t *testing.T) {
	payload := bytes.Repeat([]byte(" "), MaxFrameBytes)
	copy(payload, `{}`)
	got := readAll(t, bytes.NewReader(AppendFrame(nil, payload)))
	require.Len(t, got, 1)
	require.Len(t, got[0], MaxFrameBytes)
}

// countingReader records how many bytes were consumed.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestFrameReaderRefusesOversizeBeforeReadingPayload(t *testing.T) {
	hdr := []byte{0x00, 0x10, 0x00, 0x01} // 1 MiB + 1
	data := append(hdr, bytes.Repeat([]byte("x"), 64)...)
	cr := &countingReader{r: iotest.OneByteReader(bytes.NewReader(data))}
	_, err := NewFrameReader(cr).Next()
	require.ErrorIs(t, err, ErrFrameTooLarge)
	var oe *OversizeError
	require.True(t, errors.As(err, &oe))
	require.EqualValues(t, MaxFrameBytes+1, oe.Declared)
	require.Equal(t, HeaderBytes, cr.n, "no payload byte may be consumed")

	_, err = NewFrameReader(bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff})).Next()
	require.ErrorIs(t, err, ErrFrameTooLarge)
}

func TestFrameReaderTruncated(t *testing.T) {
	data := stream(`{"type":"list","requestId":"r"}`)
	for cut := 1; cut < len(data); cut++ {
		_, err := NewFrameReader(bytes.NewReader(data[:cut])).Next()
		require.ErrorIs(t, err, io.ErrUnexpectedEOF, "cut at %d", cut)
	}
	_, err := NewFrameReader(bytes.NewReader(nil)).Next()
	require.ErrorIs(t, err, io.EOF)
}

func TestAppendFrameRoundTrip(t *testing.T) {
	for _, f := range realFrames {
		data := AppendFrame(nil, []byte(f))
		require.Len(t, data, len(f)+4)
		got := readAll(t, bytes.NewReader(data))
		require.Equal(t, []string{f}, got)
	}
}

// FuzzFrameStream feeds arbitrary byte streams through the frame reader and
// the client-frame parser: nothing may panic, every frame must respect the
// limit, and every parsed envelope must decode without panicking.
func FuzzFrameStream(f *testing.F) {
	for _, fr := range realFrames {
		f.Add(stream(fr), 3)
	}
	f.Add(stream(realFrames...), 1)
	f.Add([]byte{0x00, 0x10, 0x00, 0x01, '{'}, 2)
	f.Add(stream(`{"type":"register","protocol":"pi-intercom","version":4,"session":[]}`), 5)
	f.Add(stream(`{"type":"send","to":"x","message":{"id":"a","timestamp":1e400,"content":{"text":"\ud800"}}}`), 7)
	f.Fuzz(func(t *testing.T, data []byte, chunk int) {
		if chunk < 1 {
			chunk = 1
		}
		cuts := []int{}
		for c := chunk; c < len(data); c += chunk {
			cuts = append(cuts, c)
		}
		fr := NewFrameReader(&splitReader{data: data, cuts: cuts})
		for {
			p, err := fr.Next()
			if err != nil {
				return
			}
			if len(p) > MaxFrameBytes {
				t.Fatalf("frame of %d bytes passed the limit", len(p))
			}
			env, err := ParseEnvelope(p)
			if err != nil {
				continue
			}
			_, _ = env.DecodeRegister()
			_ = env.DecodeSend()
			_, _ = env.DecodePresence()
			_, _ = env.DecodeAskControl()
			_, _ = env.DecodeMessageRejected()
			_, _ = env.DecodeUnregister()
			_, _ = DecodeBrokerFrame(p)
		}
	})
}
