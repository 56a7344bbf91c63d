package intercom

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// A pair test proves that two live sessions can talk: an ask from A to B
// through A's holder, B's acknowledgement and reply, and A's receipt of the
// reply, each leg timed (`agent-fleet doctor --pair A B`).

// PairLeg is one leg of a pair test.
type PairLeg struct {
	// Name is ask, ack, reply or answer.
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Detail says what was seen (or what failed).
	Detail string `json:"detail"`
	// Ms is how long the leg took, in milliseconds.
	Ms int64 `json:"ms"`
}

// PairResult is a pair test's outcome.
type PairResult struct {
	A string `json:"a"`
	B string `json:"b"`
	// BAnswers: B's holder does not admit this process (a fleet worker's
	// admits only the worker's own), so B acknowledged and answered the
	// ask itself (a worker's turn).
	BAnswers bool      `json:"bAnswersItself,omitempty"`
	Legs     []PairLeg `json:"legs"`
	OK       bool      `json:"ok"`
}

// PairConfig configures PairTest.
type PairConfig struct {
	Paths Paths
	A, B  string // session ids
	// Wait bounds the wait for B (default 60 s): a session that answers
	// itself may need a model turn.
	Wait time.Duration
}

// ErrHolderRefused: a session's holder does not admit this process.
var ErrHolderRefused = errors.New("the session's holder does not admit this process")

// pairProbe marks a pair test's texts, so that whoever sees one knows what
// it is.
const pairProbe = "agent-fleet doctor --pair"

// PairTest runs a pair test. A must have a holder that admits this
// process; B must have one, or be connected to the broker and answer the
// ask itself. An error means the test could not run (A or B not live or
// not reachable: ErrTargetNotFound, ErrHolderRefused, ErrSelfTarget,
// ErrInvalidSessionID); a failed leg is a result with OK false.
func PairTest(ctx context.Context, cfg PairConfig) (*PairResult, error) {
	if cfg.Wait <= 0 {
		cfg.Wait = time.Minute
	}
	for _, id := range []string{cfg.A, cfg.B} {
		if !ValidSessionID(id) {
			return nil, fmt.Errorf("%w: %q", ErrInvalidSessionID, id)
		}
	}
	if cfg.A == cfg.B {
		return nil, fmt.Errorf("%w: a pair test needs two sessions, not %q twice", ErrSelfTarget, cfg.A)
	}
	a, err := pairHolder(ctx, cfg.Paths, cfg.A)
	if err != nil {
		if errors.Is(err, ErrHolderRefused) {
			err = fmt.Errorf("%w; the test asks from A through A's holder, so A must be an agent-fleet mcp or intercom listen (a worker can be B)", err)
		}
		return nil, err
	}
	res := &PairResult{A: cfg.A, B: cfg.B}
	b, err := pairHolder(ctx, cfg.Paths, cfg.B)
	switch {
	case errors.Is(err, ErrHolderRefused) && brokerConnected(ctx, cfg.Paths, cfg.B):
		res.BAnswers = true
	case err != nil:
		return nil, err
	}
	nonce := NewMessageID()[:8]
	ctx, cancel := context.WithTimeout(ctx, cfg.Wait)
	defer cancel()
	if res.BAnswers {
		pairSelfAnswered(ctx, a, res, nonce)
	} else {
		pairThroughHolders(ctx, a, b, res, nonce)
	}
	res.OK = len(res.Legs) > 0
	for _, l := range res.Legs {
		res.OK = res.OK && l.OK
	}
	return res, nil
}

// pairHolder is a client of the holder of id, or why there is none.
func pairHolder(ctx context.Context, p Paths, id string) (*HolderClient, error) {
	hc, err := DialHolder(ctx, p, id)
	if err == nil {
		return hc, nil
	}
	if _, serr := os.Stat(p.HolderSocket(id)); serr == nil && brokerConnected(ctx, p, id) {
		return nil, fmt.Errorf("%w: %q is live, but its holder closed the connection (a fleet worker's holder admits only the worker's own processes)", ErrHolderRefused, id)
	}
	return nil, fmt.Errorf("%w: %q has no live holder on this machine (start agent-fleet intercom listen or agent-fleet mcp with AGENT_INTERCOM_SESSION_ID=%s; agent-fleet intercom list shows the live sessions)",
		ErrTargetNotFound, id, id)
}

// brokerConnected reports whether the broker's local API says id is
// connected.
func brokerConnected(ctx context.Context, p Paths, id string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	peer, err := (&LocalAPIClient{Path: p.LocalAPISocket()}).Peer(ctx, id)
	return err == nil && peer != nil && peer.Connected
}

// pairThroughHolders: B's holder is watched for the ask, acknowledges it
// (marks it read, leaving B's other mail unread) and replies; A's ask
// returns the reply.
func pairThroughHolders(ctx context.Context, a, b *HolderClient, res *PairResult, nonce string) {
	askText := fmt.Sprintf("%s (probe %s): a test ask from %s to %s; agent-fleet answers it for %s, nothing to do.", pairProbe, nonce, res.A, res.B, res.B)
	replyText := fmt.Sprintf("%s: %s's reply (probe %s)", pairProbe, res.B, nonce)
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	seen := make(chan MessageView, 2)
	watching := make(chan struct{})
	var started sync.Once
	watched := make(chan error, 1)
	go func() {
		watched <- b.Listen(wctx, ListenRequest{KeepUnread: true, Started: func() { started.Do(func() { close(watching) }) }}, func(m *MessageView) error {
			if m.From.ID == res.A && strings.Contains(m.Text, nonce) {
				seen <- *m
				return errors.New("seen")
			}
			return nil
		})
	}()
	select {
	case <-watching:
	case err := <-watched:
		res.leg("ask", false, "cannot watch "+res.B+"'s inbox: "+errText(err), 0)
		return
	case <-ctx.Done():
		res.leg("ask", false, "cannot watch "+res.B+"'s inbox: "+errText(ctx.Err()), 0)
		return
	}

	start := time.Now()
	asked := make(chan *AskResult, 1)
	askErr := make(chan error, 1)
	go func() {
		r, err := a.Ask(ctx, AskRequest{To: res.B, Text: askText, Wait: time.Until(deadline(ctx)), OnTimeout: CancelOnTimeout})
		if err != nil {
			askErr <- err
			return
		}
		asked <- r
	}()
	go pairAskPending(wctx, b, res.A, nonce, seen)
	var m MessageView
	select {
	case m = <-seen:
	case err := <-askErr:
		res.leg("ask", false, "the ask from "+res.A+" failed: "+errText(err), since(start))
		return
	case r := <-asked:
		res.leg("ask", false, "the ask ended before "+res.B+" stored it: "+askOutcome(r), since(start))
		return
	case <-ctx.Done():
		res.leg("ask", false, res.B+"'s holder never stored the ask: "+errText(ctx.Err()), since(start))
		return
	}
	stopWatch()
	stored := "message " + m.MessageID
	if m.MessageID == "" {
		stored = "ask " + m.AskID
	}
	res.leg("ask", true, fmt.Sprintf("%s asked %s through its holder; %s's holder stored and acknowledged it (%s)", res.A, res.B, res.B, stored), since(start))

	t := time.Now()
	p := &PendingResult{} // no message id: read already, it was among B's asks alone
	var err error
	if m.MessageID != "" {
		p, err = b.Pending(ctx, PendingRequest{IDs: []string{m.MessageID}, MarkRead: true})
	}
	switch {
	case err != nil:
		res.leg("ack", false, res.B+" could not mark the ask read: "+errText(err), since(t))
	case len(p.Unread) == 0:
		// Only B takes what B's inbox holds: a plain intercom listen
		// prints and consumes what arrives, an agent reads its pending.
		res.leg("ack", true, res.B+" had read the ask already (its listener printed it, or its agent took it)", since(t))
	case len(p.Unread) != 1:
		res.leg("ack", false, fmt.Sprintf("%d messages, not the ask alone, matched its id in %s's inbox", len(p.Unread), res.B), since(t))
	default:
		res.leg("ack", true, res.B+" read the ask and marked it read (its other mail stays unread)", since(t))
	}

	t = time.Now()
	sr, err := b.Reply(ctx, ReplyRequest{AskID: m.AskID, Text: replyText})
	switch {
	case err != nil:
		res.leg("reply", false, res.B+"'s reply failed: "+errText(err), since(t))
		return
	case !sr.OK || !sr.Delivered:
		res.leg("reply", false, fmt.Sprintf("%s's reply was not delivered: %s %s", res.B, sr.Code, sr.Reason), since(t))
		return
	}
	res.leg("reply", true, fmt.Sprintf("%s replied through its holder; %s's holder stored and acknowledged the reply", res.B, res.A), since(t))

	t = time.Now()
	select {
	case r := <-asked:
		if r.Replied && r.Reply != nil && r.Reply.Text == replyText {
			res.leg("answer", true, fmt.Sprintf("%s's ask returned %s's reply, consumed from its inbox (round trip %d ms)", res.A, res.B, since(start)), since(t))
		} else {
			res.leg("answer", false, res.A+"'s ask ended without the reply: "+askOutcome(r), since(t))
		}
	case err := <-askErr:
		res.leg("answer", false, res.A+"'s ask failed: "+errText(err), since(t))
	case <-ctx.Done():
		res.leg("answer", false, res.A+"'s ask never returned the reply: "+errText(ctx.Err()), since(t))
	}
}

// pairAskPending sends seen the probe ask once B's holder lists it among
// its pending asks, as the unread message when it is one still. The watch
// of B's unread mail misses an ask that B's own consuming listen (a plain
// intercom listen) took first, but an ask stays pending until answered.
// It looks every 100 ms, until ctx ends.
func pairAskPending(ctx context.Context, b *HolderClient, from, nonce string, seen chan<- MessageView) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		p, err := b.Pending(ctx, PendingRequest{})
		if err != nil {
			continue
		}
		for _, ask := range p.Asks {
			if ask.From.ID != from || !strings.Contains(ask.Preview, nonce) {
				continue
			}
			m := MessageView{AskID: ask.AskID, From: ask.From}
			for _, u := range p.Unread {
				if u.AskID == ask.AskID {
					m = u
				}
			}
			seen <- m
			return
		}
	}
}

// pairSelfAnswered: B cannot be acted for, so A's ask waits for B's own
// answer (a worker's turn acknowledges it by reading it and replies).
func pairSelfAnswered(ctx context.Context, a *HolderClient, res *PairResult, nonce string) {
	askText := fmt.Sprintf("%s: a test ask from %s (probe %s). Reply to this ask with the word pong and the probe %s.", pairProbe, res.A, nonce, nonce)
	start := time.Now()
	r, err := a.Ask(ctx, AskRequest{To: res.B, Text: askText, Wait: time.Until(deadline(ctx)), OnTimeout: CancelOnTimeout})
	if err != nil {
		res.leg("ask", false, "the ask from "+res.A+" failed: "+errText(err), since(start))
		return
	}
	if !r.OK || !r.Delivered {
		res.leg("ask", false, fmt.Sprintf("the ask was not delivered to %s: %s %s", res.B, r.Code, r.Reason), since(start))
		return
	}
	res.leg("ask", true, fmt.Sprintf("%s asked %s through its holder; %s stored and acknowledged it", res.A, res.B, res.B), 0)
	if !r.Replied || r.Reply == nil {
		res.leg("answer", false, res.B+" did not answer in time: "+askOutcome(r), since(start))
		return
	}
	res.leg("answer", true, fmt.Sprintf("%s answered the ask itself; %s's ask returned the reply, consumed from its inbox: %q", res.B, res.A, Preview(r.Reply.Text, 80)), since(start))
}

func (r *PairResult) leg(name string, ok bool, detail string, ms int64) {
	r.Legs = append(r.Legs, PairLeg{Name: name, OK: ok, Detail: detail, Ms: ms})
}

func since(t time.Time) int64 { return time.Since(t).Milliseconds() }

func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

func errText(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "timed out"
	}
	return err.Error()
}

// askOutcome says how an ask ended without a reply.
func askOutcome(r *AskResult) string {
	switch {
	case !r.OK:
		return strings.TrimSpace(r.Code + " " + r.Reason)
	case r.Cancelled:
		return fmt.Sprintf("no reply within %d ms; the ask was withdrawn", r.WaitedMs)
	case r.Pending:
		return fmt.Sprintf("no reply within %d ms", r.WaitedMs)
	}
	return "no reply"
}
