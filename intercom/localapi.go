package intercom

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"time"
)

// The broker's local API (docs/architecture.md "Session holders and the local API") is
// served beside broker.sock on agent-fleet.sock: one JSON object per line in
// each direction, one response per request, peer uid checked. Nothing of it
// is on broker.sock, and a TypeScript broker has none.

// Local API operations.
const (
	OpStats    = "stats"    // → Stats
	OpPeer     = "peer"     // sessionId → Peer
	OpShutdown = "shutdown" // → ok, then the broker exits
	// OpFederation and OpShare are answered by a node's broker (agent-fleet
	// node run, docs/federation.md); another broker answers "unknown op"
	// (ErrUnknownOp).
	OpFederation = "federation" // → Body: the node's federation status
	OpShare      = "share"      // sessionId, Body ShareRequest → ok
)

// APIRequest is one local API request line.
type APIRequest struct {
	Op        string `json:"op"`
	SessionID string `json:"sessionId,omitempty"`
	// Body carries the arguments of ops answered outside the broker's own
	// set (broker.Config.API), as that op defines them.
	Body json.RawMessage `json:"body,omitempty"`
}

// APIResponse is one local API response line. Error is set iff !OK.
type APIResponse struct {
	OK    bool         `json:"ok"`
	Error string       `json:"error,omitempty"`
	Stats *BrokerStats `json:"stats,omitempty"`
	Peer  *PeerInfo    `json:"peer,omitempty"`
	// Body is the result of an op answered outside the broker's own set
	// (broker.Config.API), as that op defines it.
	Body json.RawMessage `json:"body,omitempty"`
}

// BrokerStats is a snapshot of a running broker. Counters are totals since
// start; rates are averages over the last 10 s.
type BrokerStats struct {
	PID                 int     `json:"pid"`
	StartedAtMs         int64   `json:"startedAtMs"`
	UptimeMs            int64   `json:"uptimeMs"`
	Sessions            int     `json:"sessions"`
	RemoteSessions      int     `json:"remoteSessions"` // of Sessions, those of other hosts
	Connections         int     `json:"connections"`
	Unregistered        int     `json:"unregisteredConnections"`
	PendingDeliveries   int     `json:"pendingDeliveries"`
	AskEdges            int     `json:"askEdges"`
	RecentDeliveries    int     `json:"recentDeliveries"`
	Accepted            uint64  `json:"deliveriesAccepted"`
	Delivered           uint64  `json:"deliveriesDelivered"`
	Failed              uint64  `json:"deliveriesFailed"`
	Refused             uint64  `json:"sendsRefused"`
	FramesIn            uint64  `json:"framesIn"`
	FramesOut           uint64  `json:"framesOut"`
	BytesIn             uint64  `json:"bytesIn"`
	BytesOut            uint64  `json:"bytesOut"`
	RateLimited         uint64  `json:"rateLimited"`
	SlowConsumersClosed uint64  `json:"slowConsumersClosed"`
	DeliveredPerSecond  float64 `json:"deliveredPerSecond"`
	FramesInPerSecond   float64 `json:"framesInPerSecond"`
}

// PeerInfo says whether a session is connected to the broker and, when it
// is, the kernel-verified credentials of its connection (SO_PEERCRED on
// Linux; PID is 0 where the platform cannot tell).
type PeerInfo struct {
	SessionID string `json:"sessionId"`
	Connected bool   `json:"connected"`
	// Name is the connected session's display name ("" without one):
	// named-team rosters resolve members of other scopes by it.
	Name string `json:"name,omitempty"`
	PID  int    `json:"pid,omitempty"`
	UID  int    `json:"uid,omitempty"`
	// RemoteHost is the node name of the host whose session this is, for
	// a session of another host joined over NATS (docs/federation.md):
	// it is live there, but Connected is false here, where it has no
	// connection, no pid and no uid to verify.
	RemoteHost string `json:"remoteHost,omitempty"`
}

// LocalAPIClient talks to a broker's local API. The zero value is not
// usable: set Path. Safe for concurrent use; each call is one connection.
type LocalAPIClient struct {
	Path string // agent-fleet.sock
}

// Do sends one request and returns its response. A response with OK false
// is returned as an error.
func (c *LocalAPIClient) Do(ctx context.Context, req APIRequest) (*APIResponse, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.Path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoLocalAPI, err)
	}
	defer conn.Close()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(5 * time.Second)
	}
	_ = conn.SetDeadline(deadline)
	line, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write(append(line, '\n')); err != nil {
		return nil, fmt.Errorf("local API %s: %w", req.Op, err)
	}
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("local API %s: %w", req.Op, err)
		}
		return nil, fmt.Errorf("local API %s: connection closed without a response", req.Op)
	}
	var resp APIResponse
	if err := json.Unmarshal(sc.Bytes(), &resp); err != nil {
		return nil, fmt.Errorf("local API %s: bad response: %w", req.Op, err)
	}
	if !resp.OK {
		if resp.Error == "unknown op "+req.Op {
			return &resp, fmt.Errorf("local API %s: %w", req.Op, ErrUnknownOp)
		}
		return &resp, fmt.Errorf("local API %s: %s", req.Op, resp.Error)
	}
	return &resp, nil
}

// Stats returns the broker's statistics.
func (c *LocalAPIClient) Stats(ctx context.Context) (*BrokerStats, error) {
	resp, err := c.Do(ctx, APIRequest{Op: OpStats})
	if err != nil {
		return nil, err
	}
	return resp.Stats, nil
}

// Peer reports whether sessionID is connected and with which pid.
func (c *LocalAPIClient) Peer(ctx context.Context, sessionID string) (*PeerInfo, error) {
	resp, err := c.Do(ctx, APIRequest{Op: OpPeer, SessionID: sessionID})
	if err != nil {
		return nil, err
	}
	return resp.Peer, nil
}

// Shutdown asks the broker to shut down cleanly; it returns once the broker
// has acknowledged.
func (c *LocalAPIClient) Shutdown(ctx context.Context) error {
	_, err := c.Do(ctx, APIRequest{Op: OpShutdown})
	return err
}
