package broker

import (
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
)

type counters struct {
	framesIn, framesOut, bytesIn, bytesOut atomic.Uint64
	accepted, delivered, failed, refused   atomic.Uint64
	rateLimited, slowClosed                atomic.Uint64
	deliveredRate, framesRate              rateMeter
}

// rateMeter counts events in one-second buckets over the last 10 s.
type rateMeter struct {
	mu      sync.Mutex
	buckets [10]uint64
	secs    [10]int64
}

func (m *rateMeter) add(n uint64) {
	sec := time.Now().Unix()
	m.mu.Lock()
	i := sec % 10
	if m.secs[i] != sec {
		m.secs[i], m.buckets[i] = sec, 0
	}
	m.buckets[i] += n
	m.mu.Unlock()
}

// perSecond averages the last 10 complete-or-current seconds.
func (m *rateMeter) perSecond() float64 {
	now := time.Now().Unix()
	m.mu.Lock()
	defer m.mu.Unlock()
	var sum uint64
	for i := range m.buckets {
		if now-m.secs[i] < 10 {
			sum += m.buckets[i]
		}
	}
	return float64(sum) / 10
}

// Stats returns a snapshot of the broker.
func (b *Broker) Stats() intercom.BrokerStats {
	b.mu.Lock()
	st := intercom.BrokerStats{
		PID:               os.Getpid(),
		StartedAtMs:       b.startedAt.UnixMilli(),
		UptimeMs:          time.Since(b.startedAt).Milliseconds(),
		Sessions:          len(b.sessions),
		RemoteSessions:    b.proxyCount,
		Connections:       len(b.conns),
		Unregistered:      b.unregistered.Len(),
		PendingDeliveries: len(b.deliveries.byID),
		AskEdges:          len(b.asks.byKey),
		RecentDeliveries:  b.recent.Len(),
	}
	b.mu.Unlock()
	c := &b.stats
	st.Accepted, st.Delivered, st.Failed, st.Refused = c.accepted.Load(), c.delivered.Load(), c.failed.Load(), c.refused.Load()
	st.FramesIn, st.FramesOut, st.BytesIn, st.BytesOut = c.framesIn.Load(), c.framesOut.Load(), c.bytesIn.Load(), c.bytesOut.Load()
	st.RateLimited, st.SlowConsumersClosed = c.rateLimited.Load(), c.slowClosed.Load()
	st.DeliveredPerSecond = c.deliveredRate.perSecond()
	st.FramesInPerSecond = c.framesRate.perSecond()
	return st
}

// Peer reports whether sessionID is connected and the kernel-verified
// credentials of its connection. A session of another host (a proxy) has
// no connection here: it is reported not connected, with its host in
// RemoteHost.
func (b *Broker) Peer(sessionID string) intercom.PeerInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := intercom.PeerInfo{SessionID: sessionID}
	if s := b.sessions[sessionID]; s != nil && s.proxyHost != "" {
		p.RemoteHost = s.proxyHost
	} else if s != nil {
		p.Connected, p.PID, p.UID = true, s.conn.peerPID, s.conn.peerUID
		if s.info.HasName {
			p.Name = s.info.Name
		}
	}
	return p
}
