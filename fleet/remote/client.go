package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agent-fleet/agent-fleet/fleet"
)

// Client runs fleet verbs on other hosts as Caller. Safe for concurrent
// use.
type Client struct {
	Transport Transport
	// Caller is the session id the verbs act as.
	Caller string
	// Codes are errors beyond fleet's that cross the wire as themselves
	// (Server.Codes).
	Codes []Code
	// Timeout bounds a request that reads (list, status, logs, adopt); 0
	// is DefaultTimeout. A spawn gets the remote start timeout and a stop
	// its grace on top of it.
	Timeout time.Duration
}

func (c *Client) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return DefaultTimeout
}

// call sends verb's args to host within timeout and decodes its result
// into result (also when the host answered with an error beside it: the
// returned bool says whether a result came).
func (c *Client) call(ctx context.Context, host, verb string, args any, timeout time.Duration, result any) (bool, error) {
	if !ValidHost(host) {
		return false, fmt.Errorf("%w: %q is not a node name (lowercase letters, digits and -, at most 63)", ErrUnknownHost, host)
	}
	t := c.Transport
	body, err := json.Marshal(args)
	if err != nil {
		return false, err
	}
	data, _ := json.Marshal(request{Caller: c.Caller, CallerHost: t.Self(), Args: body})
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m, err := t.Conn().RequestWithContext(rctx, t.Subject(host, "fleet", verb), data)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return false, c.absent(ctx, host)
	case err != nil && rctx.Err() != nil && ctx.Err() == nil:
		return false, fmt.Errorf("%w: %s did not answer %s within %s (it may have done it: list --all --host shows)", ErrHostUnreachable, host, verb, timeout)
	case err != nil:
		return false, fmt.Errorf("%w: %s: %v", ErrHostUnreachable, host, err)
	}
	var rep reply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return false, fmt.Errorf("host %s answered %s with something that is not JSON: %w", host, verb, err)
	}
	got := false
	if len(rep.Result) > 0 && string(rep.Result) != "null" && result != nil {
		if err := json.Unmarshal(rep.Result, result); err != nil {
			return false, fmt.Errorf("host %s answered %s with a result this agent-fleet cannot read: %w", host, verb, err)
		}
		got = true
	}
	if rep.Error != nil {
		return got, decodeError(host, rep.Error, c.Codes)
	}
	return got, nil
}

// absent is the error of a host no fleet server answers for: unreachable
// when it is live or has published records, else unknown.
func (c *Client) absent(ctx context.Context, host string) error {
	if live, err := c.Transport.LiveHosts(ctx); err == nil && slices.Contains(live, host) {
		return fmt.Errorf("%w: %s is live but its fleet does not answer (is its node running agent-fleet's fleet?)", ErrHostUnreachable, host)
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	if recs, err := readRecords(rctx, c.Transport); err == nil {
		if _, known := recs.hosts[host]; known {
			return fmt.Errorf("%w: %s is not live (its node is down or its link is cut)", ErrHostUnreachable, host)
		}
	}
	return fmt.Errorf("%w: no live host is named %q (agent-fleet node status lists them)", ErrUnknownHost, host)
}

// Spawn starts a worker on host, managed by the Caller (fleet.Fleet.Spawn
// there). A failed spawn's record comes with its error. The host's
// working directory default is its own (req.Cwd "" is the host's node's).
func (c *Client) Spawn(ctx context.Context, host string, req fleet.SpawnRequest) (*fleet.Worker, error) {
	var w fleet.Worker
	got, err := c.call(ctx, host, VerbSpawn, spawnArgs{Request: req}, c.timeout()+fleet.DefaultStartTimeout+spawnMargin, &w)
	if !got {
		return nil, err
	}
	return &w, err
}

// List lists host's workers: the Caller's, every manager's with all.
func (c *Client) List(ctx context.Context, host string, all bool) ([]*fleet.Worker, error) {
	var res workersResult
	if _, err := c.call(ctx, host, VerbList, listArgs{All: all}, c.timeout(), &res); err != nil {
		return nil, err
	}
	return res.Workers, nil
}

// Status is worker id's status on host.
func (c *Client) Status(ctx context.Context, host, id string) (*fleet.Status, error) {
	var st fleet.Status
	if _, err := c.call(ctx, host, VerbStatus, idArgs{ID: id}, c.timeout(), &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Stop stops worker id on host with opts (its Progress is not called: the
// signals are sent there) and returns what it did and proved, also beside
// an error (ErrCleanupIncomplete).
func (c *Client) Stop(ctx context.Context, host, id string, opts fleet.StopOptions) (*fleet.StopResult, error) {
	grace := opts.Grace
	if grace <= 0 {
		grace = fleet.DefaultStopTimeout
	}
	var res fleet.StopResult
	got, err := c.call(ctx, host, VerbStop, stopArgs{ID: id, Grace: opts.Grace, Kill: opts.Kill}, c.timeout()+grace+stopMargin, &res)
	if !got {
		return nil, err
	}
	return &res, err
}

// Logs are the lines q selects of worker id's log on host.
func (c *Client) Logs(ctx context.Context, host, id string, q fleet.LogQuery) ([]fleet.LogLine, error) {
	var lines []fleet.LogLine
	if _, err := c.call(ctx, host, VerbLogs, logsArgs{ID: id, Query: q}, c.timeout(), &lines); err != nil {
		return nil, err
	}
	return lines, nil
}

// Adopt makes the Caller the manager of worker id on host.
func (c *Client) Adopt(ctx context.Context, host, id string, force bool) (*fleet.Worker, error) {
	var w fleet.Worker
	if _, err := c.call(ctx, host, VerbAdopt, adoptArgs{ID: id, Force: force}, c.timeout(), &w); err != nil {
		return nil, err
	}
	return &w, nil
}

// Wait waits on host, at most timeout (MaxWait when 0 or more), for the
// workers ids to end (anyOne: one of them), as fleet.Fleet.Wait there.
func (c *Client) Wait(ctx context.Context, host string, ids []string, anyOne bool, timeout time.Duration) ([]*fleet.Worker, error) {
	if timeout <= 0 || timeout > MaxWait {
		timeout = MaxWait
	}
	var res workersResult
	got, err := c.call(ctx, host, VerbWait, waitArgs{IDs: ids, Any: anyOne, Timeout: timeout}, c.timeout()+timeout, &res)
	if !got {
		return nil, err
	}
	return res.Workers, err
}

// HostWorker is a worker of another host.
type HostWorker struct {
	Host   string
	Worker *fleet.Worker
	// Unreachable: the host did not answer, and Worker is the record it
	// last published (at PublishedAt); its state then is unknown.
	Unreachable bool
	PublishedAt time.Time
}

// HostProblem is a host that did not answer a ListAll.
type HostProblem struct {
	Host string
	Err  error
	// Known: its last-known records are in the listing (none may have
	// been published: it had no workers).
	Known bool
}

// Listing is what ListAll found.
type Listing struct {
	// Workers are every other host's workers, by host and id.
	Workers []HostWorker
	// Problems are the hosts that did not answer, by name.
	Problems []HostProblem
	// RecordsErr says why no last-known records could be read
	// (ErrRecordsUnavailable without JetStream); nil when they were.
	RecordsErr error
}

// ListAll lists every manager's workers of every other host: those of
// the live hosts as they answer (in parallel), and for each host that is
// not live or does not answer, the records it last published, marked
// Unreachable. This host (Transport.Self) is left out: its own registry
// says more.
func (c *Client) ListAll(ctx context.Context) (*Listing, error) {
	self := c.Transport.Self()
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	recs, recErr := readRecords(rctx, c.Transport)
	cancel()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	live, err := c.Transport.LiveHosts(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the live hosts: %w", err)
	}
	hosts := map[string]bool{}
	for _, h := range live {
		hosts[h] = true
	}
	if recs != nil {
		for h := range recs.hosts {
			hosts[h] = true
		}
	}
	delete(hosts, self)
	out := &Listing{RecordsErr: recErr}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for h := range hosts {
		wg.Go(func() {
			ws, err := c.List(ctx, h, true)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				for _, w := range ws {
					out.Workers = append(out.Workers, HostWorker{Host: h, Worker: w})
				}
				return
			}
			p := HostProblem{Host: h, Err: err}
			if recs != nil {
				_, p.Known = recs.hosts[h]
				for _, r := range recs.workers[h] {
					out.Workers = append(out.Workers, HostWorker{Host: h, Worker: r.Worker, Unreachable: true, PublishedAt: r.PublishedAt})
				}
			}
			out.Problems = append(out.Problems, p)
		})
	}
	wg.Wait()
	sort.Slice(out.Workers, func(i, j int) bool {
		a, b := out.Workers[i], out.Workers[j]
		if a.Host != b.Host {
			return a.Host < b.Host
		}
		return a.Worker.ID < b.Worker.ID
	})
	sort.Slice(out.Problems, func(i, j int) bool { return out.Problems[i].Host < out.Problems[j].Host })
	return out, nil
}

// Locate is the hosts whose last-known records hold worker id, the host
// with a live incarnation of it first (ErrRecordsUnavailable without
// JetStream).
func (c *Client) Locate(ctx context.Context, id string) ([]string, error) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	recs, err := readRecords(rctx, c.Transport)
	if err != nil {
		return nil, err
	}
	var live, ended []string
	for h, rs := range recs.workers {
		if h == c.Transport.Self() {
			continue
		}
		for _, r := range rs {
			switch {
			case r.Worker.ID != id:
			case r.Worker.State.Live():
				live = append(live, h)
			default:
				ended = append(ended, h)
			}
		}
	}
	slices.Sort(live)
	slices.Sort(ended)
	return append(live, ended...), nil
}
