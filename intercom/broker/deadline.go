package broker

import (
	"time"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// deliveryDeadlines fails deliveries not acknowledged within one fixed
// timeout (spec §3.2 DELIVERY_TIMEOUT) with a single runtime timer.
//
// A runtime timer per delivery costs every message two allocations, a
// timer-heap insertion and a removal, and keeps up to MaxPendingDeliveries
// timers (and their stopped husks) in the heap at full load. All
// deliveries of one queue share the timeout, so their deadlines arrive in
// the order they were accepted: a FIFO holds them, and one timer is armed
// for its oldest entry, so it fires about once per timeout, not per
// message. Completed deliveries stay queued (marked done) until they reach
// the front or a compaction drops them, so the queue holds at most about
// twice the pending deliveries beyond the done ones at its front. Guarded
// by Broker.mu.
type deliveryDeadlines struct {
	b       *Broker
	timeout time.Duration
	q       []*delivery // by deadline; head first
	head    int
	timer   *time.Timer
	armed   bool // timer is set for a deadline (or firing)
	stopped bool
}

// add queues d, whose deadline is now + timeout.
func (dl *deliveryDeadlines) add(d *delivery, now time.Time) {
	d.deadline = now.Add(dl.timeout)
	dl.dropDone()
	if queued := len(dl.q) - dl.head; queued >= 64 && queued > 2*dl.b.deliveries.pending()+32 {
		dl.compact()
	}
	dl.q = append(dl.q, d)
	if !dl.armed && !dl.stopped {
		dl.arm(now)
	}
}

// pending counts the deliveries waiting for an acknowledgement.
func (t *deliveryTable) pending() int { return len(t.byID) }

// dropDone pops completed deliveries off the front.
func (dl *deliveryDeadlines) dropDone() {
	for dl.head < len(dl.q) && dl.q[dl.head].done {
		dl.q[dl.head] = nil
		dl.head++
	}
	if dl.head == len(dl.q) {
		dl.q, dl.head = dl.q[:0], 0
	}
}

// compact drops every completed delivery, keeping the order.
func (dl *deliveryDeadlines) compact() {
	kept := dl.q[:0]
	for _, d := range dl.q[dl.head:] {
		if !d.done {
			kept = append(kept, d)
		}
	}
	clear(dl.q[len(kept):])
	dl.q, dl.head = kept, 0
}

// arm sets the timer for the front's deadline. Called with a non-empty
// queue.
func (dl *deliveryDeadlines) arm(now time.Time) {
	wait := max(dl.q[dl.head].deadline.Sub(now), 0)
	if dl.timer == nil {
		dl.timer = time.AfterFunc(wait, dl.expire)
	} else {
		dl.timer.Reset(wait)
	}
	dl.armed = true
}

// expire fails every pending delivery past its deadline and re-arms the
// timer for the next one.
func (dl *deliveryDeadlines) expire() {
	b := dl.b
	b.mu.Lock()
	defer b.mu.Unlock()
	dl.armed = false
	if dl.stopped {
		return
	}
	now := time.Now()
	for dl.head < len(dl.q) {
		d := dl.q[dl.head]
		if !d.done {
			if d.deadline.After(now) {
				break
			}
			// Not done: still in the table (remove marks it done).
			b.failDelivery(d, wire.FailDeliveryTimeout, "Recipient did not acknowledge the message in time")
		}
		dl.q[dl.head] = nil
		dl.head++
	}
	dl.dropDone()
	if dl.head < len(dl.q) {
		dl.arm(now)
	}
}

// stop stops the timer for good (the broker is shutting down).
func (dl *deliveryDeadlines) stop() {
	dl.stopped = true
	if dl.timer != nil {
		dl.timer.Stop()
	}
}
