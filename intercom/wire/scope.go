package wire

import "errors"

// ScopeEnv is the environment variable every adapter reads its v4 routing
// scope from (spec §4.1).
const ScopeEnv = "AGENT_INTERCOM_SCOPE_ID"

// ScopePattern is the public form of a valid scope id (spec §4.1). Errors
// name this pattern, never the rejected value.
const ScopePattern = "^[A-Za-z0-9_-]{16,128}$"

// ErrInvalidScope is returned for a scope id that does not match
// ScopePattern. Its text deliberately carries no part of the value.
var ErrInvalidScope = errors.New(ScopeEnv + " must match " + ScopePattern)

// ValidateScope checks a scope id exactly as spec §4.1 says: "" means
// unscoped; anything else must match ScopePattern byte for byte (no trimming,
// no case folding, no normalisation).
func ValidateScope(scope string) error {
	if scope == "" {
		return nil
	}
	if len(scope) < 16 || len(scope) > 128 {
		return ErrInvalidScope
	}
	for i := 0; i < len(scope); i++ {
		c := scope[i]
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return ErrInvalidScope
		}
	}
	return nil
}

// SameScope is the v4 visibility relation (spec §4.3): strict equality,
// where unscoped ("") equals only unscoped.
func SameScope(a, b string) bool { return a == b }
