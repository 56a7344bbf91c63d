package main

import (
	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/verbs"
)

func newHistoryCmd(f *factory.Factory) *cobra.Command {
	var a verbs.HistoryArgs
	h := verbs.HistoryHelp
	cmd := &cobra.Command{Use: h.Use, Short: h.Short, Long: h.Long, Example: h.Example, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return verbs.ShowHistory(cmd.Context(), f, a) }}
	a.Flags(cmd.Flags())
	return cmd
}
