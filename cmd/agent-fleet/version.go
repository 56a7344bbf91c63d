package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// version is set at link time (-ldflags "-X main.version=…"); otherwise the
// module version from the build information is used.
var version = ""

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

func newVersionCmd(s *streams) *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version, build and protocol information",
		Example: "  agent-fleet version",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(s.Out, "agent-fleet %s\n", buildVersion())
			fmt.Fprintf(s.Out, "protocol: %s v%d\n", wire.ProtocolName, wire.ProtocolVersion)
			fmt.Fprintf(s.Out, "go: %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, st := range bi.Settings {
					if st.Key == "vcs.revision" || st.Key == "vcs.time" || st.Key == "vcs.modified" {
						fmt.Fprintf(s.Out, "%s: %s\n", st.Key, st.Value)
					}
				}
			}
			return nil
		},
	}
}
