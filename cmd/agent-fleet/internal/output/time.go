package output

import (
	"fmt"
	"time"
)

// Times, one convention per surface:
//
//   - Fleet JSON and the structuredContent of agent_fleet: RFC 3339 in UTC
//     (Stamp; a worker's turns too).
//   - Intercom JSON (intercom … --json, listen --json) and the intercom
//     tools' structuredContent: the v4 protocol's epoch milliseconds, as
//     numbers (startedAt, lastActivity, receivedAt, deferredAt,
//     received_at), the key sets the TypeScript adapters use.
//   - Text for a model (Tool): RFC 3339 in UTC, since a model compares
//     it with other stamps; intercom tools say how long ago ("12s ago").
//   - Text for people (CLI): local time with its zone, as systemctl status
//     prints it ("2026-12-01 12:07:31 CET"), with how long ago or how soon
//     where that is what a reader acts on ("(3m ago)", "(in 57m)"); a table
//     column that is a span (AGE, LEASE) is the span alone ("57m").

// humanLayout is an instant for people: local, seconds, zone.
const humanLayout = "2006-01-02 15:04:05 MST"

// HumanTime is t for people: "2026-12-01 12:07:31 CET" (local time).
func HumanTime(t time.Time) string { return t.Local().Format(humanLayout) }

// HumanWhen is t for people with its distance from now: "2026-12-01
// 12:07:31 CET (3m ago)", "… (in 57m)".
func HumanWhen(t, now time.Time) string {
	if d := now.Sub(t); d >= 0 {
		return HumanTime(t) + " (" + Span(d) + " ago)"
	}
	return HumanTime(t) + " (in " + Span(t.Sub(now)) + ")"
}

// Span is a duration for people, to the unit that matters: "45s", "3m",
// "3m05s" under 10 minutes, "1h05m", "2d03h".
func Span(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Round(time.Second)/time.Second))
	case d < 10*time.Minute:
		d = d.Round(time.Second)
		m, s := int(d/time.Minute), int(d%time.Minute/time.Second)
		if s == 0 {
			return fmt.Sprintf("%dm", m)
		}
		return fmt.Sprintf("%dm%02ds", m, s)
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Round(time.Minute)/time.Minute))
	case d < 24*time.Hour:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	d = d.Round(time.Hour)
	return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// toolTime is t for a model: RFC 3339 in UTC, seconds.
func toolTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }
