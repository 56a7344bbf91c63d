package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agent-fleet/agent-fleet/fleet"
)

// A host's last-known records live in the bucket bucketName(prefix), one
// key <host>.<worker id> per worker id (its newest incarnation), and one
// <host>._host saying when the host last published (a worker id never
// begins with "_").

// hostMarker is the key suffix of a host's own entry.
const hostMarker = "_host"

// record is a worker as its host last published it.
type record struct {
	Host        string        `json:"host"`
	Worker      *fleet.Worker `json:"worker"`
	PublishedAt time.Time     `json:"publishedAt"`
}

// hostEntry is a host's own entry.
type hostEntry struct {
	Host        string    `json:"host"`
	PublishedAt time.Time `json:"publishedAt"`
}

// openBucket opens (create: or creates) the records bucket of t's prefix.
func openBucket(ctx context.Context, t Transport, create bool) (jetstream.KeyValue, error) {
	js, err := t.JetStream(ctx)
	if err != nil {
		if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
			return nil, fmt.Errorf("%w: %v", ErrRecordsUnavailable, err)
		}
		return nil, err
	}
	prefix := t.Prefix()
	var kv jetstream.KeyValue
	if create {
		kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucketName(prefix), History: 1,
			Description: "agent-fleet: the last-known worker records of each host"})
	} else {
		kv, err = js.KeyValue(ctx, bucketName(prefix))
	}
	switch {
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return nil, fmt.Errorf("%w: %v", ErrRecordsUnavailable, err)
	case err != nil:
		return nil, err
	}
	return kv, nil
}

// publisher writes one host's records, a key only when it changed.
type publisher struct {
	t    Transport
	host string
	kv   jetstream.KeyValue
	// last is what each key holds (the worker's JSON); nil until the
	// keys were read.
	last map[string][]byte
}

// publish writes the host's records from fl's registry (every manager's
// workers, settled against systemd) and removes those of forgotten ids.
func (p *publisher) publish(ctx context.Context, fl *fleet.Fleet) error {
	if p.kv == nil {
		kv, err := openBucket(ctx, p.t, true)
		if err != nil {
			return err
		}
		p.kv = kv
	}
	if p.last == nil {
		p.last = map[string][]byte{}
		keys, err := p.kv.ListKeysFiltered(ctx, p.host+".*")
		if err != nil {
			return err
		}
		for k := range keys.Keys() {
			if k != p.host+"."+hostMarker {
				p.last[k] = nil // there, contents unknown: rewritten or deleted below
			}
		}
	}
	ws, err := fl.List(ctx, true)
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	seen := map[string]bool{}
	for _, w := range ws {
		key := p.host + "." + w.ID
		if seen[key] {
			continue // an older incarnation (List gives the newest first)
		}
		seen[key] = true
		data, err := json.Marshal(w)
		if err != nil {
			return err
		}
		if old, ok := p.last[key]; ok && bytes.Equal(old, data) {
			continue
		}
		rec, _ := json.Marshal(record{Host: p.host, Worker: w, PublishedAt: now})
		if _, err := p.kv.Put(ctx, key, rec); err != nil {
			return err
		}
		p.last[key] = data
	}
	for key := range p.last {
		if !seen[key] {
			if err := p.kv.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
				return err
			}
			delete(p.last, key)
		}
	}
	mark, _ := json.Marshal(hostEntry{Host: p.host, PublishedAt: now})
	_, err = p.kv.Put(ctx, p.host+"."+hostMarker, mark)
	return err
}

// knownRecords are the records of the bucket, by host, and each host's
// last publication.
type knownRecords struct {
	workers map[string][]record
	hosts   map[string]time.Time
}

// readRecords reads every record of the bucket of t's prefix.
func readRecords(ctx context.Context, t Transport) (*knownRecords, error) {
	out := &knownRecords{workers: map[string][]record{}, hosts: map[string]time.Time{}}
	kv, err := openBucket(ctx, t, false)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return out, nil // no host published yet
	}
	if err != nil {
		return nil, err
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return out, nil
			}
			if e == nil {
				return out, nil // every current value was read
			}
			host, rest, _ := strings.Cut(e.Key(), ".")
			if rest == hostMarker {
				var h hostEntry
				if json.Unmarshal(e.Value(), &h) == nil {
					out.hosts[host] = h.PublishedAt
				}
				continue
			}
			var r record
			if json.Unmarshal(e.Value(), &r) == nil && r.Worker != nil {
				r.Host = host
				out.workers[host] = append(out.workers[host], r)
				if _, ok := out.hosts[host]; !ok {
					out.hosts[host] = time.Time{}
				}
			}
		}
	}
}
