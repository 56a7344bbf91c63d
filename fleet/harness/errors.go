package harness

import (
	"errors"
	"fmt"
)

// Errors of the harness kinds. fleet re-exports ErrUnsupportedKind and
// reports ErrInvalidOption as its ErrInvalidRequest, so the CLI maps both
// to exit 2.
var (
	// ErrUnsupportedKind: the kind is not one of Kinds (nor exec, which is
	// fleet's).
	ErrUnsupportedKind = errors.New("unsupported worker kind")

	// ErrInvalidOption: a model, effort or permission the kind does not
	// take. The error's text is the reason alone ("effort for claude
	// \"minimal\" is not one of …"): the caller says what it refused.
	ErrInvalidOption = errors.New("invalid option")

	// ErrNoOutput is the TurnResult.Error of a turn whose output said
	// nothing usable; the caller may know better (the harness's last line of
	// error output).
	ErrNoOutput = errors.New("the harness printed no result")
)

// optionError is an ErrInvalidOption with its reason as the whole text.
type optionError struct{ reason string }

func (e *optionError) Error() string { return e.reason }

// Is makes errors.Is(err, ErrInvalidOption) true.
func (e *optionError) Is(target error) bool { return target == ErrInvalidOption }

func invalidOption(format string, args ...any) error {
	return &optionError{reason: fmt.Sprintf(format, args...)}
}
