// Package remote runs fleet verbs on another host over NATS request/reply
// (docs/federation.md "Workers on another host"). A host's Server answers
// P.host.<self>.fleet.<verb> with a Fleet acting for the requesting
// session, so ownership and lease rules are the same as locally (session
// ids are global across the cluster); a Client asks one host, or gathers
// every host's workers (ListAll). Each Server keeps its workers' last
// known records in a JetStream key-value bucket, so that the workers of a
// host that went away are shown unreachable, not lost.
//
// Everything is JSON. A request is {caller, callerHost, args}; a reply
// {result} or {error: {code, message, kind, detail}}, and the error comes
// back as the same Go error (errors.Is the same fleet sentinel, errors.As
// the same typed error), so the CLI's exit codes are the same as for a
// local worker.
package remote

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-fleet/agent-fleet/fleet"
)

// Transport is the NATS link a Server and a Client work over: one
// connection with the host's identity (intercom/federation's Link and its
// client connection satisfy it).
type Transport interface {
	// Conn is the connection.
	Conn() *nats.Conn
	// Self is this host's node name.
	Self() string
	// Prefix is the cluster's subject prefix P.
	Prefix() string
	// Subject is P.host.<host>.<rest joined by dots>.
	Subject(host string, rest ...string) string
	// LiveHosts are the node names of the hosts live now, this one
	// included or not (a host's link knows them from heartbeats; a CLI's
	// asks P.hosts.ping).
	LiveHosts(ctx context.Context) ([]string, error)
	// JetStream is the JetStream context of the connection; a server
	// without JetStream is jetstream.ErrJetStreamNotEnabled (then no
	// last-known records are kept).
	JetStream(ctx context.Context) (jetstream.JetStream, error)
}

// Verbs a Server answers, the last token of P.host.N.fleet.VERB.
const (
	VerbSpawn  = "spawn"
	VerbList   = "list"
	VerbStatus = "status"
	VerbStop   = "stop"
	VerbLogs   = "logs"
	VerbAdopt  = "adopt"
	VerbWait   = "wait"
)

// Verbs lists every verb a Server answers.
var Verbs = []string{VerbSpawn, VerbList, VerbStatus, VerbStop, VerbLogs, VerbAdopt, VerbWait}

// EnvShare, set to 1 in a worker's environment, has its intercom session
// shared with the other hosts (docs/federation.md "What is shared"): a
// Server sets it on every worker it spawns for a remote caller, whose
// manager lives on another host.
const EnvShare = "AGENT_FLEET_SHARE"

// StateUnreachable is the state of a worker whose host does not answer:
// its record is the last one its host published (HostWorker.Unreachable).
const StateUnreachable = "unreachable"

// hostNameRE is what a node name may be (docs/federation.md "Identity").
var hostNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ValidHost reports whether name is a node name.
func ValidHost(name string) bool { return hostNameRE.MatchString(name) }

// request is the body of every fleet request.
type request struct {
	Caller     string          `json:"caller"`
	CallerHost string          `json:"callerHost"`
	Args       json.RawMessage `json:"args"`
}

// reply is the body of every answer: Result, or Error.
type reply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *wireError      `json:"error,omitempty"`
}

// Each verb's arguments and result. Fleet's own types travel as Go's JSON
// of them: both ends are agent-fleet.
type (
	spawnArgs struct {
		Request fleet.SpawnRequest `json:"request"`
	}
	listArgs struct {
		All bool `json:"all"`
	}
	idArgs struct {
		ID string `json:"id"`
	}
	stopArgs struct {
		ID    string        `json:"id"`
		Grace time.Duration `json:"grace,omitempty"`
		Kill  bool          `json:"kill,omitempty"`
	}
	logsArgs struct {
		ID    string         `json:"id"`
		Query fleet.LogQuery `json:"query"`
	}
	adoptArgs struct {
		ID    string `json:"id"`
		Force bool   `json:"force,omitempty"`
	}
	waitArgs struct {
		IDs     []string      `json:"ids"`
		Any     bool          `json:"any,omitempty"`
		Timeout time.Duration `json:"timeout"`
	}
	// workerResult carries a worker beside an error (a failed spawn's
	// record).
	workersResult struct {
		Workers []*fleet.Worker `json:"workers"`
	}
)

// Defaults of a Client's timeouts.
const (
	// DefaultTimeout bounds a request that reads (list, status, logs,
	// adopt).
	DefaultTimeout = 15 * time.Second
	// spawnMargin is added to the remote fleet's start timeout
	// (fleet.DefaultStartTimeout) for a spawn; stopMargin to a stop's
	// grace.
	spawnMargin = 30 * time.Second
	stopMargin  = 30 * time.Second
	// MaxWait bounds a remote wait (a request must not be held for long).
	MaxWait = 2 * time.Minute
)

// bucketName is the key-value bucket of last-known worker records of a
// prefix: bucket names take letters, digits, - and _ only.
func bucketName(prefix string) string {
	var b strings.Builder
	for _, r := range prefix {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return "agent-fleet-workers_" + b.String()
}
