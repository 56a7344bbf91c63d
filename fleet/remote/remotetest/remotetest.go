// Package remotetest gives tests of several hosts a real NATS server of
// their own (StartNATS) and a remote.Transport over a plain connection to
// it (Link). Only tests import it.
package remotetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// Prefix is the subject prefix of every Link.
const Prefix = "af-test"

// StartNATS runs a NATS server on a free loopback port, with JetStream
// (its store in a temp directory) unless noJetStream, until the test ends.
func StartNATS(t testing.TB, noJetStream bool) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: !noJetStream,
		StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(30*time.Second), "the NATS server did not start")
	t.Cleanup(s.Shutdown)
	return s
}

// Link is a host named Self of a cluster whose hosts are Hosts, over one
// connection to a test's NATS server. Liveness is the federation link's
// business, not this one's: LiveHosts is Hosts, and a host whose fleet
// server is gone answers no request, which is what a remote.Client goes
// by.
type Link struct {
	NC    *nats.Conn
	Name  string
	Hosts []string
}

// NewLink connects host self to s; the connection closes when the test
// ends.
func NewLink(t testing.TB, s *server.Server, self string, hosts []string) *Link {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.Name(self))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return &Link{NC: nc, Name: self, Hosts: hosts}
}

// Conn implements remote.Transport.
func (l *Link) Conn() *nats.Conn { return l.NC }

// Self implements remote.Transport.
func (l *Link) Self() string { return l.Name }

// Prefix implements remote.Transport.
func (l *Link) Prefix() string { return Prefix }

// Subject implements remote.Transport.
func (l *Link) Subject(host string, rest ...string) string {
	return strings.Join(append([]string{Prefix, "host", host}, rest...), ".")
}

// LiveHosts implements remote.Transport.
func (l *Link) LiveHosts(context.Context) ([]string, error) { return l.Hosts, nil }

// JetStream implements remote.Transport as the federation link does: a
// server without JetStream is jetstream.ErrJetStreamNotEnabled.
func (l *Link) JetStream(ctx context.Context) (jetstream.JetStream, error) {
	js, err := jetstream.New(l.NC)
	if err != nil {
		return nil, err
	}
	if _, err := js.AccountInfo(ctx); err != nil {
		return nil, err
	}
	return js, nil
}

// WaitRecord waits until the last-known record of worker id of host in
// the records bucket satisfies ok (servers publish asynchronously). ok
// gets the record's JSON worker.
func WaitRecord(t testing.TB, l *Link, host, id string, ok func(worker []byte) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard
	defer cancel()
	js, err := l.JetStream(ctx)
	require.NoError(t, err)
	var kv jetstream.KeyValue
	for kv == nil {
		if kv, err = js.KeyValue(ctx, "agent-fleet-workers_"+Prefix); err != nil {
			require.ErrorIs(t, err, jetstream.ErrBucketNotFound)
			select {
			case <-ctx.Done():
				t.Fatalf("no records bucket: %v", err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	w, err := kv.Watch(ctx, host+"."+id)
	require.NoError(t, err)
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			t.Fatalf("the record of %s on %s never got there", id, host)
		case e := <-w.Updates():
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			if ok(e.Value()) {
				return
			}
		}
	}
}
