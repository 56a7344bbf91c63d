package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/agent-fleet/agent-fleet"

// allowedImports is the import direction of docs/architecture.md
// "Packages": which
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

// TestImportDirection keeps the package boundaries of docs/architecture.md
// true.
func TestImportDirection(t *testing.T) {
	t.Parallel()
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
			require.True(t, ok, "%s imports %s, against the import direction of docs/architecture.md", pkg, dep)
		}
	}
}

// TestWireIsPure: the wire package does no networking and no I/O beyond
// readers it is handed (docs/architecture.md "Packages").
func TestWireIsPure(t *testing.T) {
	t.Parallel()
	for _, dep := range goList(t, nil, "-deps", "-f", "{{.ImportPath}}", module+"/intercom/wire") {
		require.NotContains(t, []string{"net", "os/exec", module + "/intercom"}, dep, "intercom/wire imports %s", dep)
	}
}

// TestBrokerOnlyBuildsHaveNoDBus: macOS and Windows builds carry the
// broker and intercom tools only, never D-Bus or systemd code.
func TestBrokerOnlyBuildsHaveNoDBus(t *testing.T) {
	t.Parallel()
	for _, goos := range []string{"darwin", "windows"} {
		deps := goList(t, []string{"GOOS=" + goos, "CGO_ENABLED=0"}, "-deps", "-f", "{{.ImportPath}}", module+"/cmd/agent-fleet")
		for _, dep := range deps {
			require.False(t, strings.Contains(dep, "godbus") || strings.Contains(dep, "go-systemd"),
				"GOOS=%s build pulls in %s", goos, dep)
		}
	}
}

const internal = module + "/cmd/agent-fleet/internal/"

// imports are pkg's direct imports, without its tests'.
func imports(t *testing.T, pkg string) []string {
	return goList(t, nil, "-f", "{{join .Imports \" \"}}", pkg)
}

// TestEnginesStayInTheirRooms: the engine packages under
// cmd/agent-fleet/internal import no cobra (the CLI is package main's),
// and only the factory reaches systemd (units) and the unit files
// (contrib): the engines get both from it.
func TestEnginesStayInTheirRooms(t *testing.T) {
	t.Parallel()
	for _, pkg := range goList(t, nil, module+"/cmd/agent-fleet/internal/...") {
		for _, dep := range imports(t, pkg) {
			require.False(t, strings.HasPrefix(dep, "github.com/spf13/"), "%s imports %s: engines import no cobra", pkg, dep)
			if pkg != internal+"factory" {
				require.False(t, strings.HasPrefix(dep, module+"/units") || strings.HasPrefix(dep, module+"/contrib"),
					"%s imports %s: only internal/factory imports units and contrib", pkg, dep)
			}
		}
	}
}

// TestTestPackagesOnlyInTests: the test harness packages (intercomtest,
// fleettest, unitstest, mcptest: any package whose name ends in "test")
// are imported only by tests and by each other, never by what ships.
func TestTestPackagesOnlyInTests(t *testing.T) {
	t.Parallel()
	isTestPkg := func(p string) bool { return strings.HasSuffix(p, "test") && strings.HasPrefix(p, module+"/") }
	for _, pkg := range goList(t, nil, module+"/...") {
		if isTestPkg(pkg) {
			continue
		}
		for _, dep := range imports(t, pkg) {
			require.False(t, isTestPkg(dep), "%s imports the test package %s outside its tests", pkg, dep)
		}
	}
	deps := goList(t, nil, "-deps", "-f", "{{.ImportPath}}", module+"/cmd/agent-fleet")
	require.False(t, slices.ContainsFunc(deps, isTestPkg), "the agent-fleet binary links a test package")
	require.NotContains(t, deps, "testing", "the agent-fleet binary links package testing")
}

// sourceFiles are the module's non-generated Go files, by package
// directory.
func sourceFiles(t *testing.T) map[string][]string {
	root := strings.TrimSpace(strings.Join(goList(t, nil, "-m", "-f", "{{.Dir}}"), " "))
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			out[filepath.Dir(path)] = append(out[filepath.Dir(path)], path)
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestOnePackageDoc: every package says what it is, once (tailscale's
// pkgdoc_test), and no file has an init function: what a package needs at
// start is explicit.
func TestOnePackageDocAndNoInit(t *testing.T) {
	t.Parallel()
	for dir, files := range sourceFiles(t) {
		var docs []string
		for _, path := range files {
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
			require.NoError(t, err)
			if doc := f.Doc.Text(); !strings.HasSuffix(path, "_test.go") && (strings.HasPrefix(doc, "Package ") || strings.HasPrefix(doc, "Command ")) {
				docs = append(docs, filepath.Base(path))
			}
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				require.False(t, ok && fn.Recv == nil && fn.Name.Name == "init", "%s has an init function", path)
			}
		}
		nonTest := slices.ContainsFunc(files, func(p string) bool { return !strings.HasSuffix(p, "_test.go") })
		if nonTest {
			require.Len(t, docs, 1, "%s: want one package doc comment, found %v", dir, docs)
		}
	}
}

// TestFleetReadsAsTwoPrograms: the manager (fleet) and the process inside
// a unit (fleet/shim) share the pure harness library; the manager never
// links the shim, and the harness kinds reach no systemd, registry or
// manager.
func TestFleetReadsAsTwoPrograms(t *testing.T) {
	deps := func(pkg string) []string { return goList(t, nil, "-deps", "-f", "{{.ImportPath}}", module+"/"+pkg) }
	require.NotContains(t, deps("fleet"), module+"/fleet/shim", "the manager links the shim")
	for _, dep := range deps("fleet/harness") {
		require.False(t, dep == module+"/fleet" || dep == module+"/units" || dep == module+"/fleet/shim",
			"fleet/harness imports %s: the harness kinds are pure", dep)
	}
}

// maxMainLines bounds package main's non-test code: it is the cobra tree
// and its wiring, and what does the work belongs in an engine package.
// The node's cobra tree (node init, key, run, status) is wiring too.
const maxMainLines = 3900

func TestMainStaysWiring(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	lines := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		lines += strings.Count(string(data), "\n")
	}
	require.LessOrEqual(t, lines, maxMainLines, "package main has %d non-test lines: move the work into an engine package under internal/", lines)
}
