package harness

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Kinds of RateLimit.
const (
	// RateLimited: the provider refused the model call for the caller's
	// rate or usage limit (HTTP 429, rate_limit_error, a plan's usage
	// limit).
	RateLimited = "rate-limit"
	// Overloaded: the provider had no capacity for it (HTTP 529
	// overloaded_error, 503, "at capacity").
	Overloaded = "overloaded"
)

// RateLimit is how a turn that ended on a rate limit or an overloaded
// provider ended, after the harness's own retries: the worker did nothing
// wrong, and the same conversation can go on once the limit resets.
type RateLimit struct {
	// Kind is RateLimited or Overloaded.
	Kind string `json:"kind"`
	// ResetAt is when the harness says the limit resets; zero when it does
	// not say.
	ResetAt time.Time `json:"resetAt,omitzero"`
}

// rateLimitOfStatus classifies an HTTP status: 429 is a rate limit, 529 and
// 503 an overloaded provider; "" for any other.
func rateLimitOfStatus(status int) string {
	switch status {
	case http.StatusTooManyRequests:
		return RateLimited
	case 529, http.StatusServiceUnavailable:
		return Overloaded
	}
	return ""
}

// rateLimitOfType classifies an API error type of the Anthropic and OpenAI
// bodies (rate_limit_error, overloaded_error, rate_limit_exceeded, …).
func rateLimitOfType(t string) string {
	switch t = strings.ToLower(t); {
	case t == "":
		return ""
	case strings.Contains(t, "overloaded"), t == "server_is_overloaded", t == "slow_down":
		return Overloaded
	case strings.Contains(t, "rate_limit"), t == "usage_limit_reached", t == "too_many_requests":
		return RateLimited
	}
	return ""
}

var (
	// notTransient are limits that waiting does not lift: a quota or
	// billing problem is a failed turn to report.
	notTransient = regexp.MustCompile(`(?i)quota exceeded|insufficient_quota|billing|out of (usage )?credits|out of budget|monthly (usage|spend) limit`)
	// overloadedText and rateLimitedText are how the harnesses word the
	// two when no status or type says it.
	overloadedText  = regexp.MustCompile(`(?i)\b529\b|overloaded|at capacity|\b503\b|service unavailable|high demand`)
	rateLimitedText = regexp.MustCompile(`(?i)\b429\b|rate[ _-]?limit|too many requests|usage limit|hit your limit`)
)

// rateLimitOfText classifies an error message; "" when it is neither.
func rateLimitOfText(msg string) string {
	switch {
	case msg == "", notTransient.MatchString(msg):
		return ""
	case overloadedText.MatchString(msg):
		return Overloaded
	case rateLimitedText.MatchString(msg):
		return RateLimited
	}
	return ""
}

var (
	// tryAgainIn is a relative reset in an error message: "Please try
	// again in 11.054s", "try again in 20 seconds", "retry after 2
	// minutes".
	tryAgainIn = regexp.MustCompile(`(?i)(?:try again|retry) (?:in|after)\s*(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?)\b`)
	// tryAgainAt is Codex's absolute reset: "Try again at 3:04 PM." today,
	// "Try again at Jan 2nd, 2027 3:04 PM." on another day, in the
	// harness's local time.
	tryAgainAt = regexp.MustCompile(`(?i)try again at ([A-Z][a-z]{2} \d{1,2}(?:st|nd|rd|th)?,? (?:\d{4},? )?(?:at )?)?(\d{1,2}:\d{2} ?[AP]M)`)
	daySuffix  = regexp.MustCompile(`(\d)(st|nd|rd|th)`)
)

// resetOfText is the reset an error message names, resolved against now
// (the local time of the harness, which is the shim's); zero when it
// names none.
func resetOfText(msg string, now time.Time) time.Time {
	if m := tryAgainIn.FindStringSubmatch(msg); m != nil {
		n, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			return time.Time{}
		}
		unit := time.Second
		switch u := strings.ToLower(m[2]); {
		case strings.HasPrefix(u, "ms"), strings.HasPrefix(u, "milli"):
			unit = time.Millisecond
		case strings.HasPrefix(u, "m"):
			unit = time.Minute
		case strings.HasPrefix(u, "h"):
			unit = time.Hour
		}
		return now.Add(time.Duration(n * float64(unit)))
	}
	if m := tryAgainAt.FindStringSubmatch(msg); m != nil {
		clock, err := time.Parse("3:04PM", strings.ToUpper(strings.ReplaceAll(m[2], " ", "")))
		if err != nil {
			return time.Time{}
		}
		day := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(m[1]), "at"))
		if day == "" {
			at := time.Date(now.Year(), now.Month(), now.Day(), clock.Hour(), clock.Minute(), 0, 0, now.Location())
			if at.Before(now.Add(-time.Minute)) {
				at = at.AddDate(0, 0, 1) // a time of day already past is tomorrow's
			}
			return at
		}
		day = strings.TrimSuffix(daySuffix.ReplaceAllString(day, "$1"), ",")
		for _, layout := range []string{"Jan 2, 2006", "Jan 2 2006", "Jan 2"} {
			d, err := time.ParseInLocation(layout, day, now.Location())
			if err != nil {
				continue
			}
			year := d.Year()
			if layout == "Jan 2" {
				year = now.Year()
			}
			return time.Date(year, d.Month(), d.Day(), clock.Hour(), clock.Minute(), 0, 0, now.Location())
		}
	}
	return time.Time{}
}

// resetOfHeaders is the reset the response headers an error carries name
// (retry-after-ms, retry-after in seconds or as an HTTP date), resolved
// against now; zero when they name none. Header names are matched without
// regard to case.
func resetOfHeaders(h map[string]string, now time.Time) time.Time {
	get := func(name string) string {
		for k, v := range h {
			if strings.EqualFold(k, name) {
				return strings.TrimSpace(v)
			}
		}
		return ""
	}
	if v := get("retry-after-ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return now.Add(time.Duration(ms * float64(time.Millisecond)))
		}
	}
	if v := get("retry-after"); v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
			return now.Add(time.Duration(s * float64(time.Second)))
		}
		if t, err := http.ParseTime(v); err == nil {
			return t
		}
	}
	return time.Time{}
}
