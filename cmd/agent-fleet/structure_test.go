package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/agent-fleet/agent-fleet"

// allowedImports is the import direction of DESIGN.md "Packages": which
// project packages each top-level package may depend on.
var allowedImports = map[string][]string{
	"intercom": {"intercom"},
	"units":    {"units"},
	"manifest": {"manifest"},
	"fleet":    {"fleet", "units", "intercom"},
	"teams":    {"teams", "intercom", "manifest"},
	"contrib":  {"contrib"},
}

func goList(t *testing.T, env []string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Env = append(cmd.Environ(), env...)
	out, err := cmd.Output()
	require.NoError(t, err, "go list %v", args)
	return strings.Fields(string(out))
}

func topLevel(pkg string) string {
	rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
	top, _, _ := strings.Cut(rel, "/")
	return top
}

// TestImportDirection keeps the package boundaries of DESIGN.md true.
func TestImportDirection(t *testing.T) {
	for _, pkg := range goList(t, nil, module+"/...") {
		top := topLevel(pkg)
		allowed, ruled := allowedImports[top]
		if !ruled {
			continue
		}
		for _, dep := range goList(t, nil, "-deps", "-f", "{{.ImportPath}}", pkg) {
			if !strings.HasPrefix(dep, module+"/") {
				continue
			}
			ok := false
			for _, a := range allowed {
				ok = ok || topLevel(dep) == a
			}
			require.True(t, ok, "%s imports %s, against DESIGN.md's import direction", pkg, dep)
		}
	}
}

// TestWireIsPure: the wire package does no networking and no I/O beyond
// readers it is handed (STYLE.md 7).
func TestWireIsPure(t *testing.T) {
	for _, dep := range goList(t, nil, "-deps", "-f", "{{.ImportPath}}", module+"/intercom/wire") {
		require.NotContains(t, []string{"net", "os/exec", module + "/intercom"}, dep, "intercom/wire imports %s", dep)
	}
}

// TestBrokerOnlyBuildsHaveNoDBus: macOS and Windows builds carry the
// broker and intercom tools only, never D-Bus or systemd code.
func TestBrokerOnlyBuildsHaveNoDBus(t *testing.T) {
	for _, goos := range []string{"darwin", "windows"} {
		deps := goList(t, []string{"GOOS=" + goos, "CGO_ENABLED=0"}, "-deps", "-f", "{{.ImportPath}}", module+"/cmd/agent-fleet")
		for _, dep := range deps {
			require.False(t, strings.Contains(dep, "godbus") || strings.Contains(dep, "go-systemd"),
				"GOOS=%s build pulls in %s", goos, dep)
		}
	}
}
