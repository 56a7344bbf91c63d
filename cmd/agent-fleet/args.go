package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
)

// Positional-argument checks that name what is missing or extra ("stop
// needs a worker ID"), where cobra would say "accepts 1 arg(s), received
// 0". Each is a usage error (exit 2) and ends with the usage line.

// oneArg is exactly one argument, a what ("worker ID").
func oneArg(what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) == 0:
			return argsError(cmd, "needs %s %s", article(what), what)
		case len(args) > 1:
			return argsError(cmd, "takes one %s, not %d (%s)", what, len(args), quoteArgs(args))
		}
		return nil
	}
}

// optionalArg is at most one argument, a what.
func optionalArg(what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > 1 {
			return argsError(cmd, "takes at most one %s, not %d (%s)", what, len(args), quoteArgs(args))
		}
		return nil
	}
}

// targetAndText is a target session, then optionally the text (else read
// from stdin).
func targetAndText(cmd *cobra.Command, args []string) error {
	switch {
	case len(args) == 0:
		return argsError(cmd, "needs a target session (its id or name), then the text or - for stdin")
	case len(args) > 2:
		return argsError(cmd, "takes a target and one text, not %d arguments: quote the text", len(args))
	}
	return nil
}

func argsError(cmd *cobra.Command, format string, a ...any) error {
	return factory.Usagef("%s %s (usage: %s)", cmd.Name(), fmt.Sprintf(format, a...), cmd.UseLine())
}

func article(noun string) string {
	if noun != "" && strings.ContainsRune("aeiou", rune(noun[0])) {
		return "an"
	}
	return "a"
}

func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = fmt.Sprintf("%q", a)
	}
	return strings.Join(q, " ")
}
