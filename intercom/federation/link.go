package federation

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Errors of joining and using the link.
var (
	// ErrBadCredentials: the NATS server refused this host's credential
	// (an authorization violation).
	ErrBadCredentials = errors.New("the NATS server refused the credentials")
	// ErrUnreachable: no NATS server answered at any URL.
	ErrUnreachable = errors.New("no NATS server is reachable")
	// ErrWrongCluster: a host of another cluster (name or key) uses the
	// same prefix; this host joins nothing.
	ErrWrongCluster = errors.New("another cluster uses this subject prefix")
	// ErrNodeNameTaken: a live host holds this node name; this host joins
	// nothing.
	ErrNodeNameTaken = errors.New("the node name is held by a live host")
	// ErrLinkDown: the link is not connected to a NATS server now (it
	// keeps reconnecting) or is closed.
	ErrLinkDown = errors.New("the NATS link is down")
	// ErrTLS: the TLS handshake with the NATS server failed.
	ErrTLS = errors.New("TLS with the NATS server failed")
)

// UnreachableError is ErrUnreachable with the URLs tried.
type UnreachableError struct {
	URLs []string
	Err  error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("no NATS server is reachable at %s: %v", strings.Join(e.URLs, ", "), e.Err)
}
func (e *UnreachableError) Is(t error) bool { return t == ErrUnreachable }
func (e *UnreachableError) Unwrap() error   { return e.Err }

// WrongClusterError is ErrWrongCluster with the host met.
type WrongClusterError struct {
	Prefix         string
	Host           string // the host of the other cluster
	Cluster, KeyFp string // its cluster and key fingerprint
	MyCluster      string
	MyKeyFp        string
}

func (e *WrongClusterError) Error() string {
	why := "cluster " + e.Cluster + ", this host's is " + e.MyCluster
	if e.Cluster == e.MyCluster {
		why = "cluster key fingerprint " + e.KeyFp + ", this host's is " + e.MyKeyFp + " (copy the cluster key file from a host of the cluster)"
	}
	return fmt.Sprintf("host %s on prefix %s belongs to another cluster (%s): use another prefix or this cluster's name and key", e.Host, e.Prefix, why)
}
func (e *WrongClusterError) Is(t error) bool { return t == ErrWrongCluster }

// NameTakenError is ErrNodeNameTaken with the live holder.
type NameTakenError struct {
	Name      string
	StartedAt int64 // the holder's start, epoch ms
}

func (e *NameTakenError) Error() string {
	return fmt.Sprintf("node name %s is held by a live host (up since %s): give this host another name in node.toml",
		e.Name, time.UnixMilli(e.StartedAt).UTC().Format(time.RFC3339))
}
func (e *NameTakenError) Is(t error) bool { return t == ErrNodeNameTaken }

// Timing of the link. A host beats every BeatInterval and is gone after
// HostSilence without one.
const (
	BeatInterval = time.Second
	HostSilence  = 5 * time.Second
	// claimWindow is how long a joining host collects answers to its
	// name claim and cluster ping; a local round trip takes milliseconds.
	claimWindow = time.Second
	// pingWindow is how long Ping collects answers.
	pingWindow = 500 * time.Millisecond
	// reconnectBuffer bounds what a disconnected link buffers.
	reconnectBuffer = 8 << 20
)

// LinkOptions tune a Link; the zero value is usable.
type LinkOptions struct {
	// URLs replace cfg.URLs (the node joining its own embedded server).
	URLs []string
	// Logger receives the link's log (nil discards); no scope or scope
	// token is ever logged.
	Logger *slog.Logger
	// Version is the agent-fleet version announced in heartbeats.
	Version string
	// OnHostUp, OnHostDown and OnHostBeat are called, in order, from one
	// goroutine: a host's first heartbeat, its silence (or leaving), and
	// every heartbeat of a live host. They must not block for long.
	OnHostUp, OnHostDown, OnHostBeat func(HostInfo)
	// OnState is called when the connection's state changes
	// ("connected", "reconnecting", "closed").
	OnState func(state string)
}

// Link is this host's connection to NATS: its identity (node name,
// cluster, prefix), the live hosts it hears and request helpers. Safe for
// concurrent use.
type Link struct {
	cfg      *Config
	opts     LinkOptions
	log      *slog.Logger
	nc       *nats.Conn
	self     HostInfo
	host     bool // claims its name and beats
	urls     []string
	sessions atomic.Uint64 // sessions version announced in beats

	hosts    *hostTable
	wmu      sync.Mutex
	watchers []HostWatcher

	mu      sync.Mutex
	subs    []*nats.Subscription
	closed  bool
	stop    chan struct{}
	done    sync.WaitGroup
	joined  atomic.Bool
	beatSub *nats.Subscription
}

// Connect joins NATS as a host: it claims cfg.Name (ErrNodeNameTaken when
// a live host holds it), checks that hosts on the prefix are of its
// cluster (ErrWrongCluster), then beats every second on P.hosts.beat and
// answers P.hosts.ping. A server that refuses the credential is
// ErrBadCredentials, none answering ErrUnreachable. Once joined the link
// reconnects forever, buffering at most 8 MiB meanwhile.
func Connect(ctx context.Context, cfg *Config, opts LinkOptions) (*Link, error) {
	l, err := dial(cfg, opts, true)
	if err != nil {
		return nil, err
	}
	if err := l.claim(ctx); err != nil {
		l.nc.Close()
		return nil, err
	}
	if err := l.startHost(); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// ConnectClient joins NATS for a one-shot CLI verb: no name claim, no
// heartbeat; Ping and requests work.
func ConnectClient(ctx context.Context, cfg *Config, opts LinkOptions) (*Link, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return dial(cfg, opts, false)
}

func dial(cfg *Config, o LinkOptions, host bool) (*Link, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	urls := o.URLs
	if len(urls) == 0 {
		urls = cfg.URLs
	}
	if len(urls) == 0 {
		return nil, &ConfigError{Path: cfg.Path, Field: "urls", Problem: "no NATS URL (and no embedded server running)"}
	}
	l := &Link{cfg: cfg, opts: o, log: log.With("node", cfg.Name), host: host, urls: urls, stop: make(chan struct{})}
	l.self = HostInfo{
		Host: cfg.Name, Instance: newInstance(), Cluster: cfg.Cluster, KeyFp: KeyFingerprint(cfg.ClusterKey),
		Version: o.Version, StartedAt: time.Now().UnixMilli(),
	}
	l.hosts = newHostTable(l)
	nopts := []nats.Option{
		nats.Name("agent-fleet " + cfg.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.ReconnectBufSize(reconnectBuffer),
		nats.IgnoreAuthErrorAbort(),
		nats.Timeout(5 * time.Second),
		nats.PingInterval(2 * time.Second),
		nats.MaxPingsOutstanding(3),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil {
				return // this link closed it (a refused join, the node's end): ClosedHandler follows
			}
			l.log.Warn("NATS link down, reconnecting", "err", err)
			l.state("reconnecting")
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			l.log.Info("NATS link back", "server", nc.ConnectedUrlRedacted())
			l.state("connected")
			if l.joined.Load() {
				l.beat(false)
			}
		}),
		nats.ClosedHandler(func(*nats.Conn) { l.state("closed") }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			l.log.Warn("NATS error", "subject", subj, "err", err)
		}),
	}
	switch {
	case cfg.Creds != "":
		nopts = append(nopts, nats.UserCredentials(cfg.Creds))
	case cfg.Nkey != "":
		opt, err := nats.NkeyOptionFromSeed(cfg.Nkey)
		if err != nil {
			return nil, &ConfigError{Path: cfg.Path, Field: "nkey", Problem: err.Error()}
		}
		nopts = append(nopts, opt)
	case cfg.User != "":
		pw, err := readSecret(cfg.PasswordFile)
		if err != nil {
			return nil, &ConfigError{Path: cfg.Path, Field: "password_file", Problem: err.Error()}
		}
		nopts = append(nopts, nats.UserInfo(cfg.User, pw))
	}
	if t := cfg.TLS; t != nil {
		if t.CA != "" {
			nopts = append(nopts, nats.RootCAs(t.CA))
		}
		if t.Cert != "" {
			nopts = append(nopts, nats.ClientCert(t.Cert, t.Key))
		}
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nopts...)
	if err != nil {
		return nil, connectError(urls, err)
	}
	l.nc = nc
	return l, nil
}

func connectError(urls []string, err error) error {
	var netErr net.Error
	var certErr *tls.CertificateVerificationError
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked):
		return fmt.Errorf("%w at %s: %v", ErrBadCredentials, strings.Join(urls, ", "), err)
	case errors.As(err, &certErr), strings.Contains(err.Error(), "tls:"), strings.Contains(err.Error(), "x509:"),
		errors.Is(err, nats.ErrSecureConnRequired), errors.Is(err, nats.ErrSecureConnWanted):
		return fmt.Errorf("%w at %s: %v", ErrTLS, strings.Join(urls, ", "), err)
	case errors.Is(err, nats.ErrNoServers), errors.As(err, &netErr):
		return &UnreachableError{URLs: urls, Err: err}
	}
	return fmt.Errorf("join NATS at %s: %w", strings.Join(urls, ", "), err)
}

func newInstance() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (l *Link) state(s string) {
	if l.opts.OnState != nil {
		l.opts.OnState(s)
	}
}

// Conn is the NATS connection.
func (l *Link) Conn() *nats.Conn { return l.nc }

// Self is this host's node name.
func (l *Link) Self() string { return l.cfg.Name }

// Info is what this host announces of itself.
func (l *Link) Info() HostInfo {
	i := l.self
	i.SessionsVersion = l.sessions.Load()
	return i
}

// Config is the configuration the link joined with.
func (l *Link) Config() *Config { return l.cfg }

// Prefix is the subject prefix.
func (l *Link) Prefix() string { return l.cfg.Prefix }

// Logger is the link's logger.
func (l *Link) Logger() *slog.Logger { return l.log }

// Subject is P.host.HOST[.REST…], the subjects of one host.
func (l *Link) Subject(host string, rest ...string) string {
	s := l.cfg.Prefix + ".host." + host
	if len(rest) > 0 {
		s += "." + strings.Join(rest, ".")
	}
	return s
}

// State is "connected", "reconnecting" or "closed".
func (l *Link) State() string {
	switch l.nc.Status() {
	case nats.CONNECTED, nats.DRAINING_SUBS, nats.DRAINING_PUBS:
		return "connected"
	case nats.CLOSED:
		return "closed"
	}
	return "reconnecting"
}

// Connected reports whether the link reaches a NATS server now.
func (l *Link) Connected() bool { return l.nc.IsConnected() }

// ServerURL is the server the link is connected to, credentials removed
// ("" while down).
func (l *Link) ServerURL() string { return l.nc.ConnectedUrlRedacted() }

// SetSessionsVersion sets the sessions version announced in heartbeats,
// so hosts that missed an announcement ask for a snapshot.
func (l *Link) SetSessionsVersion(v uint64) { l.sessions.Store(v) }

// Request sends a request and waits for one reply, within ctx. A link that
// is down is ErrLinkDown; nobody subscribed is nats.ErrNoResponders.
func (l *Link) Request(ctx context.Context, subject string, body []byte) ([]byte, error) {
	if !l.nc.IsConnected() {
		return nil, ErrLinkDown
	}
	m, err := l.nc.RequestWithContext(ctx, subject, body)
	if err != nil {
		if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected) {
			return nil, ErrLinkDown
		}
		return nil, err
	}
	return m.Data, nil
}

// Handle subscribes handler to subject; each request's reply is what the
// handler returns (nil: no reply). Handlers of one subscription run one
// at a time. The subscription ends with the link.
func (l *Link) Handle(subject string, handler func(data []byte) []byte) error {
	sub, err := l.nc.Subscribe(subject, func(m *nats.Msg) {
		if out := handler(m.Data); out != nil && m.Reply != "" {
			_ = m.Respond(out)
		}
	})
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.subs = append(l.subs, sub)
	l.mu.Unlock()
	return nil
}

// JetStream is the JetStream context of the link; a server without
// JetStream is jetstream.ErrJetStreamNotEnabled.
func (l *Link) JetStream(ctx context.Context) (jetstream.JetStream, error) {
	js, err := jetstream.New(l.nc)
	if err != nil {
		return nil, err
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		return nil, err
	}
	return js, nil
}

// Close leaves: a host announces it is leaving (the others drop it at
// once) and the connection closes. Idempotent.
func (l *Link) Close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	close(l.stop)
	subs := l.subs
	l.mu.Unlock()
	for _, s := range subs {
		_ = s.Unsubscribe()
	}
	if l.joined.Load() && l.nc.IsConnected() {
		l.beat(true)
		_ = l.nc.FlushTimeout(time.Second)
	}
	l.nc.Close()
	l.done.Wait()
}
