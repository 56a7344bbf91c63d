// Package broker is the Agent Intercom protocol v4 broker: sessions,
// scopes, routing, delivery with acknowledgement, ask edges, presence, and
// the broker's files (docs/protocol.md §2–§6).
//
// All protocol state lives in one Broker guarded by one mutex, which gives
// every frame a single global order, as the single-threaded reference broker
// has. On Linux one event loop reads every connection (conn_linux.go);
// elsewhere each connection has a reader goroutine. Output is written to the
// socket at once when nothing waits before it, else it waits in a bounded
// queue per connection, so a session that stops reading slows nobody else;
// when its queue passes Config.MaxQueueBytes it is dropped. Nothing a
// message leaves behind grows with history: pending deliveries and ask edges
// are indexed and expire, and the dedup cache (recent.go) is a fixed ring.
//
// # Lock order
//
// A goroutine that holds several of the broker's locks took them in this
// order, and takes none out of it:
//
//	Broker.mu        all protocol state; frames are sent while it is held
//	  conn.wmu       one connection's output queue and transport state
//	    eventLoop.mu the Linux loop's connection table and attention list
//
// Broker.mu → conn.wmu is every send (conn.send under mu), conn.wmu →
// eventLoop.mu is a send that asks the loop to settle a connection
// (loopSend → notify). Nothing takes Broker.mu while it holds conn.wmu or
// eventLoop.mu: the event loop, the reader goroutines and the timers take
// Broker.mu with no other lock held, and the loop releases eventLoop.mu and
// conn.wmu before it hands a connection back to the broker (connClosed).
// No goroutine holds two connections' wmu at once. askPersister.mu and
// rateMeter.mu are leaves: taken under any of the above, holding nothing
// while held.
package broker

import (
	"container/list"
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// Defaults of spec §6.7; see Config.
const (
	DefaultMaxSessions         = 1024
	DefaultMaxUnregistered     = 32
	DefaultRegistrationTimeout = time.Second
	DefaultDeliveryTimeout     = 8 * time.Second
	DefaultAskTTL              = 10 * time.Minute
	DefaultIdleExit            = 5 * time.Second
	DefaultRecentTTL           = 10 * time.Minute
	DefaultRecentMax           = 1 << 17
	DefaultRateCapacity        = wire.RateCapacity
	DefaultRateRefill          = wire.RateRefill
	DefaultMaxQueueBytes       = 8 << 20
	MaxPendingDeliveries       = 1024
	MaxPendingPerSender        = 64
	MaxAsksPerSender           = 64
	presenceHeartbeat          = time.Second
)

// Config configures a Broker. Zero fields take the defaults above.
type Config struct {
	// Paths locates broker-asks.json. Required.
	Paths intercom.Paths
	// Logger receives operational logs; nil discards them. Scope ids are
	// never logged.
	Logger *slog.Logger
	// MaxSessions caps registered sessions (reference: 128). New ids beyond
	// it get TOO_MANY_SESSIONS.
	MaxSessions int
	// MaxUnregistered caps connections that have not registered; the oldest
	// is dropped when a new one exceeds it (spec §2.0).
	MaxUnregistered int
	// RegistrationTimeout drops a connection that has not registered.
	RegistrationTimeout time.Duration
	// DeliveryTimeout fails a delivery not acknowledged in time (spec §3.2).
	DeliveryTimeout time.Duration
	// AskTTL is the life of an ask edge (PI_INTERCOM_ASK_TIMEOUT_MS).
	AskTTL time.Duration
	// IdleExit is how long the broker lingers after the last session leaves
	// (spec §6.4). Negative disables idle exit.
	IdleExit time.Duration
	// RecentTTL and RecentMax bound the deduplication cache of finished
	// deliveries (spec §5.2): entries expire after RecentTTL, and the oldest
	// are evicted early when more than RecentMax are held.
	RecentTTL time.Duration
	RecentMax int
	// RateCapacity and RateRefill (tokens/s) size the per-connection token
	// bucket; a frame costs one token per started 8 KiB (spec §6.6).
	RateCapacity float64
	RateRefill   float64
	// MaxQueueBytes bounds a connection's unwritten output; a connection
	// that lets more pile up is dropped.
	MaxQueueBytes int
	// TrustedLocal is reported in SessionInfo.trustedLocal: true for a Unix
	// socket broker, false on Windows (spec §2.3).
	TrustedLocal bool
	// CheckPeerUID refuses connections from other users (SO_PEERCRED).
	CheckPeerUID bool
	// RateClock is the clock of the rate limiter; nil is time.Now. Tests
	// freeze it to make the bucket deterministic.
	RateClock func() time.Time
	// API answers local API ops the broker does not know itself (the
	// node's federation status, share requests): ok false means the op is
	// unknown to it too. It runs on the API connection's goroutine without
	// the broker's lock, so it may call the Broker's methods.
	API func(req intercom.APIRequest) (resp intercom.APIResponse, ok bool)
	// Prepare, when set, runs in ListenAndServe on the new broker once it
	// owns the agent directory and listens, just before it serves: a node
	// sets its federation there (SetFederation).
	Prepare func(b *Broker)

	// goroutineIO serves connections with a reader and a writer goroutine
	// each, as on platforms without the Linux event loop (tests of that
	// transport set it).
	goroutineIO bool

	// idleFromStart arms the idle exit when Run starts, not only when a
	// session leaves: set under socket activation, where the connection
	// that started the broker is already queued, so a broker woken by a
	// probe alone exits again and leaves the socket to systemd.
	idleFromStart bool
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.RegistrationTimeout, DefaultRegistrationTimeout)
	def(&c.DeliveryTimeout, DefaultDeliveryTimeout)
	def(&c.AskTTL, DefaultAskTTL)
	def(&c.IdleExit, DefaultIdleExit)
	def(&c.RecentTTL, DefaultRecentTTL)
	if c.MaxSessions == 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	if c.MaxUnregistered == 0 {
		c.MaxUnregistered = DefaultMaxUnregistered
	}
	if c.RecentMax == 0 {
		c.RecentMax = DefaultRecentMax
	}
	if c.RateCapacity == 0 {
		c.RateCapacity = DefaultRateCapacity
	}
	if c.RateRefill == 0 {
		c.RateRefill = DefaultRateRefill
	}
	if c.RateClock == nil {
		c.RateClock = time.Now
	}
	if c.MaxQueueBytes == 0 {
		c.MaxQueueBytes = DefaultMaxQueueBytes
	}
}

// Broker is one intercom broker. Create it with New and run it with Run.
type Broker struct {
	cfg Config
	log *slog.Logger

	mu           sync.Mutex
	sessions     map[string]*session
	scopes       map[string]*scopeGroup
	nextOrder    uint64
	conns        map[*conn]struct{}
	apiConns     map[net.Conn]struct{}
	unregistered *list.List // *conn, oldest first
	asks         askTable
	deliveries   deliveryTable
	recent       recentCache
	keys         keyHasher
	ids          *idSource
	// sessionDigests counts registered sessions by the digest of their id
	// (keyHasher.session), for dedup records that name a recipient by it.
	sessionDigests map[uint32]int
	idleTimer      *time.Timer
	closing        bool
	scratch        []byte     // frame encoding buffer, guarded by mu
	loop           *eventLoop // Linux: serves the connections (conn_linux.go)

	// Federation (proxy.go): nil fed is a broker of one host.
	fed        Federation
	scoper     Scoper
	proxies    map[string]map[string]*session // host → session id → proxy session
	proxyCount int

	stats     counters
	startedAt time.Time
	stop      context.CancelFunc // set by Run
	persister *askPersister
	wg        sync.WaitGroup
	ready     chan struct{} // closed once Run accepts connections
	readyOnce sync.Once
}

// New returns a broker that has loaded the ask edges persisted by a previous
// broker (as deferred, spec §5.7). A corrupt edge file is kept aside as
// broker-asks.json.corrupt-<ms> and the broker starts with none.
func New(cfg Config) (*Broker, error) {
	if cfg.Paths.Dir == "" {
		return nil, errors.New("broker: Config.Paths is required")
	}
	cfg.setDefaults()
	b := &Broker{
		cfg:          cfg,
		log:          cfg.Logger,
		sessions:     make(map[string]*session),
		scopes:       make(map[string]*scopeGroup),
		conns:        make(map[*conn]struct{}),
		apiConns:     make(map[net.Conn]struct{}),
		proxies:      make(map[string]map[string]*session),
		unregistered: list.New(),
		startedAt:    time.Now(),
		ready:        make(chan struct{}),
	}
	b.asks.init()
	b.deliveries.init(b)
	b.recent.init(cfg.RecentTTL, cfg.RecentMax)
	b.keys = newKeyHasher()
	b.ids = newIDSource()
	b.sessionDigests = make(map[uint32]int)
	b.persister = newAskPersister(b, cfg.Paths.AskState())
	if err := b.loadAskEdges(); err != nil {
		return nil, err
	}
	return b, nil
}

// Run serves the v4 protocol on ln and, when api is not nil, the local API
// on api, until ctx is cancelled, a local API shutdown arrives, or the idle
// exit fires. It closes both listeners, ends every connection, flushes the
// ask edges, and returns only after every goroutine it started has exited.
// The error is nil for any of those ends.
func (b *Broker) Run(ctx context.Context, ln net.Listener, api net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	b.mu.Lock()
	b.stop = cancel
	if b.cfg.idleFromStart {
		b.scheduleIdleCheck()
	}
	b.mu.Unlock()
	defer cancel()

	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.persister.run()
	}()
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.acceptLoop(ctx, ln, b.serveConn)
	}()
	if api != nil {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.acceptLoop(ctx, api, b.goServe(b.serveAPI))
		}()
	}
	b.readyOnce.Do(func() { close(b.ready) })
	<-ctx.Done()
	_ = ln.Close()
	if api != nil {
		_ = api.Close()
	}
	b.shutdown()
	b.wg.Wait()
	b.mu.Lock()
	b.recent.release()
	b.mu.Unlock()
	return nil
}

// Ready is closed once Run serves its listeners: from then on a client's
// connection is accepted and its frames are handled (connections made
// earlier wait in the listener's backlog and are served too). It stays
// closed after Run returns; it never closes for a broker that is not run.
// Tests and benchmarks wait on it instead of polling the socket.
func (b *Broker) Ready() <-chan struct{} { return b.ready }

// Shutdown asks a running broker to stop, as SIGTERM or the local API does.
func (b *Broker) Shutdown() {
	b.mu.Lock()
	stop := b.stop
	b.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// acceptLoop accepts connections until ln closes. serve runs on the accept
// loop, so connections are admitted in the order they arrived; it returns
// quickly and starts whatever goroutines a connection needs.
func (b *Broker) acceptLoop(ctx context.Context, ln net.Listener, serve func(net.Conn)) {
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			b.log.Warn("accept failed", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		serve(nc)
	}
}

// goServe runs serve on a goroutine of its own per connection.
func (b *Broker) goServe(serve func(net.Conn)) func(net.Conn) {
	return func(nc net.Conn) {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			serve(nc)
		}()
	}
}

// shutdown ends every connection after flushing what was queued for it
// (spec §6.4), stops all timers and writes the ask edges one last time.
func (b *Broker) shutdown() {
	b.mu.Lock()
	b.closing = true
	if b.idleTimer != nil {
		b.idleTimer.Stop()
		b.idleTimer = nil
	}
	for c := range b.conns {
		c.end()
	}
	for nc := range b.apiConns {
		_ = nc.Close()
	}
	b.deliveries.stopTimers()
	b.asks.stopTimers()
	b.mu.Unlock()
	b.persister.close()
	// Writers flush within this grace; a peer that does not read is cut.
	grace := time.AfterFunc(2*time.Second, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for c := range b.conns {
			c.destroy()
		}
	})
	go func() {
		b.wg.Wait()
		grace.Stop()
	}()
}

// scheduleIdleCheck arms the idle exit after a session left (spec §6.4).
// Called with mu held.
func (b *Broker) scheduleIdleCheck() {
	if b.cfg.IdleExit < 0 || b.idleTimer != nil || b.closing {
		return
	}
	b.idleTimer = time.AfterFunc(b.cfg.IdleExit, func() {
		b.mu.Lock()
		b.idleTimer = nil
		idle := len(b.sessions) == b.proxyCount && !b.closing // proxies keep no broker alive
		stop := b.stop
		b.mu.Unlock()
		if idle && stop != nil {
			b.log.Info("no sessions connected, shutting down")
			stop()
		}
	})
}

// cancelIdleCheck is called with mu held by every successful registration.
func (b *Broker) cancelIdleCheck() {
	if b.idleTimer != nil {
		b.idleTimer.Stop()
		b.idleTimer = nil
	}
}
