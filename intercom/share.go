package intercom

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// ShareRequest is the body of the local API op share: whether the broker's
// node announces the session to the other hosts (docs/federation.md
// "What is shared").
type ShareRequest struct {
	On bool `json:"on"`
}

// Share asks the broker to announce sessionID to the other hosts (on) or
// to stop (off). A broker without federation answers ErrUnknownOp; no
// broker, ErrNoLocalAPI.
func (c *LocalAPIClient) Share(ctx context.Context, sessionID string, on bool) error {
	body, err := json.Marshal(ShareRequest{On: on})
	if err != nil {
		return err
	}
	_, err = c.Do(ctx, APIRequest{Op: OpShare, SessionID: sessionID, Body: body})
	return err
}

// Federation returns the node's federation status as its broker renders
// it (the JSON of the node's status type); a broker without federation
// answers ErrUnknownOp.
func (c *LocalAPIClient) Federation(ctx context.Context) (json.RawMessage, error) {
	resp, err := c.Do(ctx, APIRequest{Op: OpFederation})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// sharer asks the broker to share a session after each of its
// registrations (SessionConfig.Share). A broker without federation is
// logged once and otherwise ignored: sharing is off, nothing else changes.
type sharer struct {
	api  LocalAPIClient
	id   string
	log  *slog.Logger
	mu   sync.Mutex
	off  bool // logged that the broker has no federation
	busy bool // a request is under way; registrations in between coalesce
	more bool
}

// registered runs after a registration; it must not block.
func (s *sharer) registered() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy {
		s.more = true
		return
	}
	s.busy = true
	go s.ask()
}

func (s *sharer) ask() {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := s.api.Share(ctx, s.id, true)
		cancel()
		s.mu.Lock()
		switch {
		case err == nil:
			if s.off {
				s.log.Info("the broker shares this session with the other hosts again")
			}
			s.off = false
		case errors.Is(err, ErrUnknownOp):
			if !s.off {
				s.log.Warn("sharing is off: this broker is not a node joined to other hosts (agent-fleet node run)")
			}
			s.off = true
		default:
			s.log.Warn("could not ask the broker to share this session", "err", err)
		}
		if !s.more {
			s.busy = false
			s.mu.Unlock()
			return
		}
		s.more = false
		s.mu.Unlock()
	}
}
