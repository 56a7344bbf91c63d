package federation

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// HostInfo is what a host announces on P.hosts.beat and answers to
// P.hosts.ping and name claims.
type HostInfo struct {
	Host     string `json:"host"`
	Instance string `json:"instance"` // random per link: a restarted host is a new instance
	Cluster  string `json:"cluster"`
	KeyFp    string `json:"keyFp"`
	Version  string `json:"version"`
	// StartedAt is when the link joined, epoch ms of the host's clock.
	StartedAt int64 `json:"startedAt"`
	// SessionsVersion is the version of the host's last sessions
	// announcement: a peer that has another asks for a snapshot.
	SessionsVersion uint64 `json:"sessionsVersion,omitempty"`
	// Leaving is set on the last beat of a host that closes its link.
	Leaving bool `json:"leaving,omitempty"`
}

func (l *Link) beatSubject() string { return l.cfg.Prefix + ".hosts.beat" }
func (l *Link) pingSubject() string { return l.cfg.Prefix + ".hosts.ping" }

func (l *Link) sameCluster(h HostInfo) bool {
	return h.Cluster == l.self.Cluster && h.KeyFp == l.self.KeyFp
}

func (l *Link) wrongCluster(h HostInfo) error {
	return &WrongClusterError{Prefix: l.cfg.Prefix, Host: h.Host, Cluster: h.Cluster, KeyFp: h.KeyFp,
		MyCluster: l.self.Cluster, MyKeyFp: l.self.KeyFp}
}

// claim asks P.host.N.hello and P.hosts.ping at once and collects the
// answers for claimWindow: a holder of the name or a host of another
// cluster refuses the join. Two hosts claiming one name at once both hear
// each other's hello; the lower instance answers, so exactly one joins.
func (l *Link) claim(ctx context.Context) error {
	hello, err := l.nc.Subscribe(l.Subject(l.self.Host, "hello"), l.onHello)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.subs = append(l.subs, hello)
	l.mu.Unlock()
	replies, err := l.scatter(ctx, claimWindow, l.Subject(l.self.Host, "hello"), l.pingSubject())
	if err != nil {
		return err
	}
	var taken error
	for _, h := range replies {
		if !l.sameCluster(h) {
			return l.wrongCluster(h)
		}
		if h.Host == l.self.Host && taken == nil {
			taken = &NameTakenError{Name: h.Host, StartedAt: h.StartedAt}
		}
	}
	return taken
}

func (l *Link) onHello(m *nats.Msg) {
	var req HostInfo
	if json.Unmarshal(m.Data, &req) != nil || req.Instance == l.self.Instance || m.Reply == "" {
		return
	}
	if l.joined.Load() || l.self.Instance < req.Instance {
		body, _ := json.Marshal(l.Info())
		_ = m.Respond(body)
	}
}

// scatter publishes this host's info as a request on each subject and
// collects every reply but its own for window (or until ctx ends).
func (l *Link) scatter(ctx context.Context, window time.Duration, subjects ...string) ([]HostInfo, error) {
	if !l.nc.IsConnected() {
		return nil, ErrLinkDown
	}
	inbox := l.nc.NewRespInbox()
	sub, err := l.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	body, _ := json.Marshal(l.Info())
	for _, s := range subjects {
		if err := l.nc.PublishRequest(s, inbox, body); err != nil {
			return nil, err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	var out []HostInfo
	for {
		m, err := sub.NextMsgWithContext(wctx)
		if err != nil {
			if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, ctx.Err()
			}
			return out, nil
		}
		var h HostInfo
		if json.Unmarshal(m.Data, &h) != nil || h.Instance == l.self.Instance || !nodeNameRe.MatchString(h.Host) {
			continue
		}
		out = append(out, h)
	}
}

// Ping asks every live host on the prefix to answer (for CLI clients and
// doctor) and returns those of this cluster, sorted by name, within
// about half a second or ctx. Answers from another cluster are returned
// as a *WrongClusterError next to the hosts.
func (l *Link) Ping(ctx context.Context) ([]HostInfo, error) {
	replies, err := l.scatter(ctx, pingWindow, l.pingSubject())
	if err != nil {
		return nil, err
	}
	var out []HostInfo
	var wrong error
	seen := map[string]bool{}
	for _, h := range replies {
		switch {
		case !l.sameCluster(h):
			if wrong == nil {
				wrong = l.wrongCluster(h)
			}
		case !seen[h.Host+"/"+h.Instance]:
			seen[h.Host+"/"+h.Instance] = true
			out = append(out, h)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Host < out[j].Host })
	return out, wrong
}

// startHost begins the life of a joined host: it answers pings, tracks
// the others' heartbeats and beats itself.
func (l *Link) startHost() error {
	ping, err := l.nc.Subscribe(l.pingSubject(), func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		body, _ := json.Marshal(l.Info())
		_ = m.Respond(body)
	})
	if err != nil {
		return err
	}
	beats := make(chan HostInfo, 1024)
	beat, err := l.nc.Subscribe(l.beatSubject(), func(m *nats.Msg) {
		var h HostInfo
		if json.Unmarshal(m.Data, &h) != nil || h.Instance == l.self.Instance || !nodeNameRe.MatchString(h.Host) {
			return
		}
		select {
		case beats <- h:
		case <-l.stop:
		}
	})
	if err != nil {
		_ = ping.Unsubscribe()
		return err
	}
	l.mu.Lock()
	l.subs = append(l.subs, ping, beat)
	l.mu.Unlock()
	l.joined.Store(true)
	l.beat(false)
	l.done.Add(2)
	go l.beatLoop()
	go l.hosts.run(beats)
	l.log.Info("joined", "prefix", l.cfg.Prefix, "cluster", l.cfg.Cluster, "server", l.nc.ConnectedUrlRedacted())
	return nil
}

func (l *Link) beat(leaving bool) {
	i := l.Info()
	i.Leaving = leaving
	body, _ := json.Marshal(i)
	_ = l.nc.Publish(l.beatSubject(), body)
}

func (l *Link) beatLoop() {
	defer l.done.Done()
	t := time.NewTicker(BeatInterval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.beat(false)
		}
	}
}

// LiveHosts are the other hosts of this cluster heard within HostSilence,
// sorted by name (none for a client link).
func (l *Link) LiveHosts() []HostInfo { return l.hosts.list() }

// IsLive reports whether host is live now.
func (l *Link) IsLive(host string) bool { return l.hosts.live(host) }

type liveHost struct {
	info HostInfo
	seen time.Time
}

// hostTable is the live hosts, kept by one goroutine from the heartbeats.
type hostTable struct {
	l      *Link
	mu     sync.Mutex
	m      map[string]*liveHost
	warned map[string]bool
}

func newHostTable(l *Link) *hostTable {
	return &hostTable{l: l, m: map[string]*liveHost{}, warned: map[string]bool{}}
}

func (t *hostTable) list() []HostInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]HostInfo, 0, len(t.m))
	for _, h := range t.m {
		out = append(out, h.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Host < out[j].Host })
	return out
}

func (t *hostTable) live(host string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[host] != nil
}

func (t *hostTable) run(beats <-chan HostInfo) {
	defer t.l.done.Done()
	sweep := time.NewTicker(BeatInterval / 2)
	defer sweep.Stop()
	for {
		select {
		case <-t.l.stop:
			return
		case h := <-beats:
			t.heard(h)
		case <-sweep.C:
			t.expire()
		}
	}
}

func (t *hostTable) warnOnce(key, msg string, args ...any) {
	if !t.warned[key] {
		t.warned[key] = true
		t.l.log.Warn(msg, args...)
	}
}

func (t *hostTable) heard(h HostInfo) {
	l := t.l
	switch {
	case h.Host == l.self.Host:
		t.warnOnce("name/"+h.Instance, "another host beats with this node name", "instance", h.Instance)
		return
	case !l.sameCluster(h):
		t.warnOnce("cluster/"+h.Host+"/"+h.KeyFp, "ignoring a host of another cluster on this prefix",
			"host", h.Host, "cluster", h.Cluster, "keyFp", h.KeyFp)
		return
	}
	t.mu.Lock()
	old := t.m[h.Host]
	var gone *HostInfo
	if old != nil && old.info.Instance != h.Instance {
		g := old.info
		gone = &g
		delete(t.m, h.Host)
		old = nil
	}
	up := false
	if h.Leaving {
		if old != nil {
			g := old.info
			gone = &g
			delete(t.m, h.Host)
		}
	} else if old == nil {
		t.m[h.Host] = &liveHost{info: h, seen: time.Now()}
		up = true
	} else {
		old.info, old.seen = h, time.Now()
	}
	t.mu.Unlock()
	if gone != nil {
		l.log.Info("host down", "host", gone.Host, "why", map[bool]string{true: "left", false: "restarted"}[h.Leaving])
		l.notify(hostDown, *gone)
	}
	if up {
		l.log.Info("host up", "host", h.Host, "version", h.Version)
		l.notify(hostUp, h)
	}
	if !h.Leaving {
		l.notify(hostBeat, h)
	}
}

func (t *hostTable) expire() {
	now := time.Now()
	var gone []HostInfo
	t.mu.Lock()
	for name, h := range t.m {
		if now.Sub(h.seen) > HostSilence {
			gone = append(gone, h.info)
			delete(t.m, name)
		}
	}
	t.mu.Unlock()
	sort.Slice(gone, func(i, j int) bool { return gone[i].Host < gone[j].Host })
	for _, h := range gone {
		t.l.log.Info("host down", "host", h.Host, "why", "silent")
		t.l.notify(hostDown, h)
	}
}

type hostEvent int

const (
	hostUp hostEvent = iota
	hostDown
	hostBeat
)

// HostWatcher receives host events; nil fields are skipped.
type HostWatcher struct {
	OnHostUp, OnHostDown, OnHostBeat func(HostInfo)
}

// Watch adds w to the receivers of host events (after LinkOptions'
// own), called in order from the link's one host goroutine.
func (l *Link) Watch(w HostWatcher) {
	l.wmu.Lock()
	l.watchers = append(l.watchers, w)
	l.wmu.Unlock()
}

func (l *Link) notify(ev hostEvent, h HostInfo) {
	l.wmu.Lock()
	ws := append([]HostWatcher{{l.opts.OnHostUp, l.opts.OnHostDown, l.opts.OnHostBeat}}, l.watchers...)
	l.wmu.Unlock()
	for _, w := range ws {
		f := [...]func(HostInfo){hostUp: w.OnHostUp, hostDown: w.OnHostDown, hostBeat: w.OnHostBeat}[ev]
		if f != nil {
			f(h)
		}
	}
}
