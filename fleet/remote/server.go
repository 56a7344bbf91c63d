package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/intercom"
)

// DefaultRecordsEvery is how often a Server publishes its workers'
// records even when nothing changed (a change publishes them at once).
const DefaultRecordsEvery = 30 * time.Second

// maxInFlight bounds the requests a Server runs at once; more wait.
const maxInFlight = 32

// publisherCaller is the session a Server's records pass lists as: it
// reads every manager's workers and owns none.
const publisherCaller = "agent-fleet"

// Server answers this host's fleet requests (P.host.<self>.fleet.VERB)
// and publishes its workers' last-known records.
type Server struct {
	Transport Transport
	// Open returns a Fleet of this host acting for caller (a session id
	// of any host).
	Open   func(ctx context.Context, caller string) (*fleet.Fleet, error)
	Logger *slog.Logger
	// Codes are errors beyond fleet's that cross the wire as themselves
	// (the Client needs the same).
	Codes []Code
	// RecordsEvery: 0 is DefaultRecordsEvery.
	RecordsEvery time.Duration

	sub      *nats.Subscription
	inflight sync.WaitGroup
	slots    chan struct{}
	kick     chan struct{}
	done     chan struct{}
}

// Serve answers this host's fleet requests over t with fleets from open
// until ctx ends (Server.Start).
func Serve(ctx context.Context, t Transport, open func(ctx context.Context, caller string) (*fleet.Fleet, error), logger *slog.Logger) error {
	s := &Server{Transport: t, Open: open, Logger: logger}
	if err := s.Start(ctx); err != nil {
		return err
	}
	<-s.Done()
	return nil
}

// Start subscribes to this host's fleet subjects — the server answers once
// Start returned — and publishes its records, until ctx ends; Done is then
// closed once the requests in flight were answered.
func (s *Server) Start(ctx context.Context) error {
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	if s.RecordsEvery <= 0 {
		s.RecordsEvery = DefaultRecordsEvery
	}
	s.slots = make(chan struct{}, maxInFlight)
	s.kick = make(chan struct{}, 1)
	s.done = make(chan struct{})
	t := s.Transport
	sub, err := t.Conn().Subscribe(t.Subject(t.Self(), "fleet", "*"), func(m *nats.Msg) {
		s.inflight.Add(1)
		go func() {
			defer s.inflight.Done()
			s.slots <- struct{}{}
			defer func() { <-s.slots }()
			s.handle(context.WithoutCancel(ctx), m)
		}()
	})
	if err != nil {
		return fmt.Errorf("remote fleet: subscribe: %w", err)
	}
	if err := t.Conn().Flush(); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("remote fleet: subscribe: %w", err)
	}
	s.sub = sub
	records := make(chan struct{})
	go func() {
		defer close(records)
		s.publishRecords(ctx)
	}()
	go func() {
		<-ctx.Done()
		_ = sub.Unsubscribe()
		s.inflight.Wait()
		<-records
		close(s.done)
	}()
	return nil
}

// Done is closed once the server stopped (Start).
func (s *Server) Done() <-chan struct{} { return s.done }

// handle answers one request.
func (s *Server) handle(ctx context.Context, m *nats.Msg) {
	verb := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	result, err := s.run(ctx, verb, m.Data)
	rep := reply{}
	if result != nil {
		rep.Result, _ = json.Marshal(result)
	}
	if err != nil {
		rep.Error = encodeError(err, s.Codes)
	}
	data, _ := json.Marshal(rep)
	if rerr := m.Respond(data); rerr != nil {
		s.Logger.Warn("remote fleet: could not answer", "verb", verb, "err", rerr)
	}
	if verb == VerbSpawn || verb == VerbStop || verb == VerbAdopt {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// run performs verb for the request in data: its result (possibly beside
// an error) and its error.
func (s *Server) run(ctx context.Context, verb string, data []byte) (any, error) {
	var req request
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, fmt.Errorf("%w: the request is not JSON: %v", fleet.ErrInvalidRequest, err)
	}
	if !slices.Contains(Verbs, verb) {
		return nil, fmt.Errorf("%w: no fleet verb %q here", fleet.ErrInvalidRequest, verb)
	}
	if !intercom.ValidSessionID(req.Caller) {
		return nil, fmt.Errorf("%w: caller %q is not a session id", fleet.ErrInvalidRequest, req.Caller)
	}
	args := func(v any) error {
		if err := json.Unmarshal(req.Args, v); err != nil {
			return fmt.Errorf("%w: %s arguments: %v", fleet.ErrInvalidRequest, verb, err)
		}
		return nil
	}
	fl, err := s.Open(ctx, req.Caller)
	if err != nil {
		return nil, err
	}
	s.Logger.Info("remote fleet request", "verb", verb, "caller", req.Caller, "callerHost", req.CallerHost)
	switch verb {
	case VerbSpawn:
		var a spawnArgs
		if err := args(&a); err != nil {
			return nil, err
		}
		a.Request.Env = s.shareEnv(a.Request.Env, req.CallerHost)
		w, err := fl.Spawn(ctx, a.Request)
		if w == nil {
			return nil, err
		}
		return w, err
	case VerbList:
		var a listArgs
		if err := args(&a); err != nil {
			return nil, err
		}
		ws, err := fl.List(ctx, a.All)
		if err != nil {
			return nil, err
		}
		return workersResult{Workers: ws}, nil
	case VerbStatus:
		var a idArgs
		if err := args(&a); err != nil {
			return nil, err
		}
		return fl.Status(ctx, a.ID)
	case VerbStop:
		var a stopArgs
		if err := args(&a); err != nil {
			return nil, err
		}
		res, err := fl.StopWith(ctx, a.ID, fleet.StopOptions{Grace: a.Grace, Kill: a.Kill})
		if res == nil {
			return nil, err
		}
		return res, err
	case VerbLogs:
		var a logsArgs
		if err := args(&a); err != nil {
			return nil, err
		}
		lines, err := fl.ReadLog(ctx, a.ID, a.Query)
		if err != nil {
			return nil, err
		}
		return lines, nil
	case VerbAdopt:
		var a adoptArgs
		if err := args(&a); err != nil {
			return nil, err
		}
		w, err := fl.Adopt(ctx, a.ID, a.Force)
		if err != nil {
			return nil, err
		}
		return w, nil
	case VerbWait:
		var a waitArgs
		if err := args(&a); err != nil {
			return nil, err
		}
		if a.Timeout <= 0 || a.Timeout > MaxWait {
			a.Timeout = MaxWait
		}
		wctx, cancel := context.WithTimeout(ctx, a.Timeout)
		defer cancel()
		ws, err := fl.Wait(wctx, a.IDs, a.Any)
		if ws == nil {
			return nil, err
		}
		return workersResult{Workers: ws}, err
	}
	return nil, nil
}

// shareEnv is a spawn's environment for a caller on callerHost: a worker
// whose manager is on another host has its session shared (EnvShare=1),
// whatever the request said of it.
func (s *Server) shareEnv(env []string, callerHost string) []string {
	out := slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, EnvShare+"=") })
	if callerHost != s.Transport.Self() {
		out = append(out, EnvShare+"=1")
	}
	return out
}

// publishRecords keeps this host's records in the bucket until ctx ends:
// at start, at every change of the fleet, after each spawn, stop and
// adopt it served, and every RecordsEvery.
func (s *Server) publishRecords(ctx context.Context) {
	fl, err := s.Open(ctx, publisherCaller)
	if err != nil {
		s.Logger.Warn("remote fleet: records not published", "err", err)
		return
	}
	var changes <-chan struct{}
	if w, err := fleet.WatchFleet(ctx, fl.Paths()); err == nil {
		changes = w.C
	}
	pub := &publisher{t: s.Transport, host: s.Transport.Self()}
	tick := time.NewTicker(s.RecordsEvery)
	defer tick.Stop()
	for {
		if err := pub.publish(ctx, fl); errors.Is(err, ErrRecordsUnavailable) {
			s.Logger.Info("remote fleet: no JetStream; other hosts will not see this host's workers while it is away", "err", err)
			return
		} else if err != nil && ctx.Err() == nil {
			s.Logger.Warn("remote fleet: records not published", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case _, ok := <-changes:
			if !ok {
				changes = nil
			}
		case <-s.kick:
		case <-tick.C:
		}
	}
}
