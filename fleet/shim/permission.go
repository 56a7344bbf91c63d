//go:build !windows

package shim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/agent-fleet/agent-fleet/fleet"
	"github.com/agent-fleet/agent-fleet/fleet/harness"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// permissionRelay answers a coding agent's permission prompts
// (harness.OpPermission, from the worker's MCP server through the holder)
// by asking the worker's current manager, as an ordinary intercom ask:
// "w1 wants to run `npm install` in ~/src/app — reply allow / deny /
// always". While it waits, the worker needs input: the registry says so
// (StateReason needs-input, NeedsInput what for) and so does its presence
// status; both are put back once the answer is in. No answer within the
// spec's permission wait denies. An "always" answer is kept for the rest
// of the run (harness.RuleFor).
type permissionRelay struct {
	workerID, runID string
	spec            *harness.Spec
	home            string
	session         *intercom.Session
	status          *Presence // the shim's presence status
	regs            *fleet.RegistryHandle
	manager         func(context.Context) string
	log             *slog.Logger
	// askWait is the longest single ask (intercom.MaxAskWait); a longer
	// permission wait goes on waiting for the deferred ask's reply.
	askWait time.Duration

	// asking holds one prompt at a time: the manager answers them in
	// order, and an "always" covers the prompts behind it.
	asking sync.Mutex
	mu     sync.Mutex
	rules  []harness.PermissionRule
}

// Presence and registry words of a worker waiting for its manager.
const (
	reasonNeedsInput  = "needs-input"
	reasonTurnRunning = "turn-running"
)

// op serves harness.OpPermission.
func (p *permissionRelay) op(ctx context.Context, args json.RawMessage) (any, error) {
	var req harness.PermissionRequest
	if err := json.Unmarshal(args, &req); err != nil || req.Tool == "" {
		return nil, fmt.Errorf("%w: a permission request needs the tool's name and input", intercom.ErrInvalidInput)
	}
	return p.decide(ctx, req), nil
}

// decide asks the manager about req and says what it answered.
func (p *permissionRelay) decide(ctx context.Context, req harness.PermissionRequest) harness.PermissionDecision {
	p.asking.Lock()
	defer p.asking.Unlock()
	if rule, ok := p.covered(req); ok {
		p.log.Info("permission allowed by an earlier always", "tool", req.Tool, "rule", rule.Text())
		return harness.PermissionDecision{Allow: true}
	}
	what := harness.DescribeToolUse(req, p.spec.Cwd, p.home)
	manager := p.manager(ctx)
	if manager == "" {
		return harness.PermissionDecision{Message: fmt.Sprintf("Permission to %s was denied: worker %s has no manager to ask.", what, p.workerID)}
	}
	wait := p.spec.PermissionWait()
	rule := harness.RuleFor(req)
	text := fmt.Sprintf("%s wants to %s — reply allow / deny / always", p.workerID, what)
	if d := describeWhy(req); d != "" {
		text += "\nIts reason: " + d
	}
	text += fmt.Sprintf("\n(always: allow %s for the rest of this run without asking. No answer within %s denies it.)", rule.Text(), wait)

	p.needsInput(ctx, harness.NeedsInputText(req, p.spec.Cwd, p.home))
	reply, why := p.ask(ctx, manager, fitText(text), wait)
	p.inputDone(ctx)

	if reply == nil {
		p.log.Info("permission denied: no answer", "tool", req.Tool, "why", why)
		return harness.PermissionDecision{Message: fmt.Sprintf("Permission to %s was denied: %s. The action was not performed. Do not try it again in this turn; go on without it, or tell %s why you need it.", what, why, manager)}
	}
	answer, note := harness.ParsePermissionReply(reply.Text)
	who := reply.From.ID
	switch answer {
	case harness.AnswerAlways:
		p.mu.Lock()
		p.rules = append(p.rules, rule)
		p.mu.Unlock()
		fallthrough
	case harness.AnswerAllow:
		p.log.Info("permission allowed", "tool", req.Tool, "by", who, "always", answer == harness.AnswerAlways)
		return harness.PermissionDecision{Allow: true}
	}
	msg := fmt.Sprintf("Permission to %s was denied by %s.", what, who)
	if note != "" {
		msg += " They said: " + note
		if !strings.ContainsAny(note[len(note)-1:], ".!?") {
			msg += "."
		}
	}
	p.log.Info("permission denied", "tool", req.Tool, "by", who)
	return harness.PermissionDecision{Message: msg + " The action was not performed."}
}

func (p *permissionRelay) covered(req harness.PermissionRequest) (harness.PermissionRule, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rules {
		if r.Covers(req) {
			return r, true
		}
	}
	return harness.PermissionRule{}, false
}

// describeWhy is the harness's own reason for a command (Bash's
// description), "" when it gave none.
func describeWhy(req harness.PermissionRequest) string {
	var in struct {
		Description string `json:"description"`
	}
	_ = json.Unmarshal(req.Input, &in)
	return strings.Join(strings.Fields(in.Description), " ")
}

// ask asks the manager and waits up to wait for the reply: nil and why
// not when none came (the ask is withdrawn then, so a late "allow" finds
// nothing to answer). A wait longer than one ask may last defers the ask
// and watches the inbox for its reply.
func (p *permissionRelay) ask(ctx context.Context, manager, text string, wait time.Duration) (*intercom.MessageView, string) {
	deadline := time.Now().Add(wait)
	first, onTimeout := wait, intercom.CancelOnTimeout
	if wait > p.askWait {
		first, onTimeout = p.askWait, intercom.DeferOnTimeout
	}
	res, err := p.session.Ask(ctx, intercom.AskRequest{To: manager, Text: text, Wait: first, OnTimeout: onTimeout})
	switch {
	case err != nil:
		return nil, "the ask to " + manager + " failed: " + err.Error()
	case !res.OK:
		return nil, manager + " could not be asked (" + strings.TrimSpace(res.Code+" "+res.Reason) + ")"
	case res.Replied:
		return res.Reply, ""
	case !res.Pending:
		return nil, fmt.Sprintf("%s did not answer within %s", manager, wait)
	}
	reply := p.lateReply(ctx, res.MessageID, time.Until(deadline))
	if reply == nil {
		if _, err := p.session.Client().AskControl(context.WithoutCancel(ctx), wire.TypeCancelAsk, res.MessageID); err != nil {
			p.log.Warn("could not withdraw the permission ask", "err", err)
		}
		return nil, fmt.Sprintf("%s did not answer within %s", manager, wait)
	}
	return reply, ""
}

// errFound ends the inbox watch of lateReply.
var errFound = errors.New("found")

// lateReply waits up to wait for the reply to the deferred ask askID in
// the inbox, and takes it out (it answers the prompt; it is no message
// for the next turn).
func (p *permissionRelay) lateReply(ctx context.Context, askID string, wait time.Duration) *intercom.MessageView {
	if wait <= 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var found *intercom.MessageView
	_ = p.session.Listen(wctx, intercom.ListenRequest{KeepUnread: true}, func(m *intercom.MessageView) error {
		if m.ReplyTo != askID {
			return nil
		}
		v := *m
		found = &v
		return errFound
	})
	if found == nil {
		return nil
	}
	for _, m := range p.session.Inbox().Unread() {
		if m.Message.ID == found.MessageID {
			if err := p.session.Inbox().Consume(m.Key); err != nil {
				p.log.Warn("could not take the permission answer out of the inbox", "err", err)
			}
		}
	}
	return found
}

// needsInput records that the worker waits for its manager: the registry
// (status, list) and the presence status (intercom list).
func (p *permissionRelay) needsInput(ctx context.Context, what string) {
	p.record(ctx, func(r *fleet.Worker) {
		r.StateReason, r.NeedsInput = reasonNeedsInput, what
	})
	p.presence(ctx, reasonNeedsInput+": "+what)
}

// inputDone puts back what needsInput set: the turn goes on.
func (p *permissionRelay) inputDone(ctx context.Context) {
	p.record(ctx, func(r *fleet.Worker) {
		if r.StateReason == reasonNeedsInput {
			r.StateReason = reasonTurnRunning
		}
		r.NeedsInput = ""
	})
	p.presence(ctx, "")
}

// presence shows what the worker waits for instead of its state in its
// presence status ("" shows the state again).
func (p *permissionRelay) presence(ctx context.Context, status string) {
	p.status.SetOverlay(context.WithoutCancel(ctx), status)
}

func (p *permissionRelay) record(ctx context.Context, change func(*fleet.Worker)) {
	reg, err := p.regs.Get(context.WithoutCancel(ctx))
	if err != nil || reg == nil {
		return
	}
	_, err = reg.Update(context.WithoutCancel(ctx), p.workerID, p.runID, func(r *fleet.Worker) error {
		if r.State == fleet.StateRunning || r.State == fleet.StateProvisioning {
			change(r)
		}
		return nil
	})
	if err != nil && !errors.Is(err, fleet.ErrNotFound) {
		p.log.Warn("could not record the permission wait", "err", err)
	}
}

// withPermission serves harness.OpPermission, once a coding agent's wake
// workload set its relay, beside next's operations.
func (s *held) withPermission(next intercom.HolderExtra) intercom.HolderExtra {
	return func(ctx context.Context, op string, args json.RawMessage) (any, bool, error) {
		if op != harness.OpPermission {
			return next(ctx, op, args)
		}
		p := s.permission.Load()
		if p == nil {
			return nil, true, fmt.Errorf("%w: this worker relays no permission prompts", intercom.ErrInvalidInput)
		}
		res, err := p.op(ctx, args)
		return res, true, err
	}
}
