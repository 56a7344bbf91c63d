package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
	"github.com/agent-fleet/agent-fleet/intercom/wire"
)

// versionInfo is what `agent-fleet version` reports.
type versionInfo struct {
	Version  string `json:"version"`
	Module   string `json:"module,omitempty"`
	Protocol string `json:"protocol"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
	// Revision, Time and Modified describe the commit it was built from,
	// when the build recorded it (a build in a git checkout does, unless
	// -buildvcs=false).
	Revision string `json:"vcsRevision,omitempty"`
	Time     string `json:"vcsTime,omitempty"`
	Modified bool   `json:"vcsModified,omitempty"`
	// Settings are the other build settings that change the binary.
	CGO   string `json:"cgo,omitempty"`
	Flags string `json:"ldflags,omitempty"`
}

func readVersionInfo(built string) versionInfo {
	v := versionInfo{
		Version:  built,
		Protocol: wire.ProtocolLabel(),
		Go:       runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH,
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.Module = bi.Main.Path
	for _, st := range bi.Settings {
		switch st.Key {
		case "vcs.revision":
			v.Revision = st.Value
		case "vcs.time":
			v.Time = st.Value
		case "vcs.modified":
			v.Modified = st.Value == "true"
		case "CGO_ENABLED":
			v.CGO = st.Value
		case "-ldflags":
			v.Flags = st.Value
		}
	}
	return v
}

type versionOptions struct {
	IO      *factory.IOStreams
	Version string
	JSON    bool
}

func newVersionCmd(f *factory.Factory, runF func(*versionOptions) error) *cobra.Command {
	opts := &versionOptions{IO: f.IO, Version: f.Version}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, build and protocol information",
		Long: `Print agent-fleet's version (set at link time with -ldflags "-X main.version=…",
else the module version: the tag for "go install …@vX.Y.Z", a pseudo-version
for a build in a git checkout), the intercom protocol it speaks, the Go
version and platform, and the commit it was built from when the build
recorded it. "agent-fleet --version" prints the first line alone.`,
		Example: "  agent-fleet version\n  agent-fleet version --json\n  agent-fleet --version",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runF != nil {
				return runF(opts)
			}
			return versionRun(opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print as JSON")
	return cmd
}

func versionRun(opts *versionOptions) error {
	v := readVersionInfo(opts.Version)
	out := opts.IO.Out
	if opts.JSON {
		return output.PrintJSON(out, v)
	}
	fmt.Fprintf(out, "agent-fleet %s\n", v.Version)
	fmt.Fprintf(out, "protocol: %s\n", v.Protocol)
	fmt.Fprintf(out, "go: %s %s\n", v.Go, v.Platform)
	if v.Module != "" {
		fmt.Fprintf(out, "module: %s\n", v.Module)
	}
	if v.Revision != "" {
		mod := ""
		if v.Modified {
			mod = " (with uncommitted changes)"
		}
		fmt.Fprintf(out, "commit: %s %s%s\n", v.Revision, v.Time, mod)
	}
	if v.CGO != "" {
		fmt.Fprintf(out, "cgo: %s\n", v.CGO)
	}
	return nil
}
