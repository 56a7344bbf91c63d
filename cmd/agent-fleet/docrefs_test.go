package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDocRefs keeps the references that Go comments make to documents
// resolvable inside the repository: every "spec §N" or "§N.M" names a
// numbered heading of docs/protocol.md, every spec appendix an appendix
// heading there, every docs/<name>.md "Section" (also `"A" and "B"`) a
// heading of that file, and no Go file points at the design notes,
// specifications or testing notes the repository does not contain. It walks
// the whole module from the directory of go.mod, skipping only vendor and
// testdata.
func TestDocRefs(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	docs := readDocs(t, filepath.Join(root, "docs"))
	protocol, ok := docs["protocol"]
	require.True(t, ok, "docs/protocol.md is missing")
	_, ok = docs["architecture"]
	require.True(t, ok, "docs/architecture.md is missing")

	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (d.Name() == "vendor" || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		rel, _ := filepath.Rel(root, path)
		for _, p := range docRefProblems(string(src), docs, protocol) {
			t.Errorf("%s:%d: %s", filepath.ToSlash(rel), p.line, p.text)
		}
		return nil
	})
	require.NoError(t, err)
	require.Positive(t, files, "no Go files found below %s", root)
}

// docRefProblem is one unresolvable reference at a line of a file.
type docRefProblem struct {
	line int
	text string
}

var (
	// sectionRef is any section sign with a number: "spec §5.7", "(§6.9)",
	// the "§6" of "§2–§6".
	sectionRef = regexp.MustCompile(`§([0-9]+(?:\.[0-9]+)?)`)
	// appendixRef is "spec Appendix B", possibly across a comment line break.
	appendixRef = regexp.MustCompile(`(?i)\bspec[ \t]*(?:\n[ \t]*//)?[ \t]*Appendix[ \t]+([A-Z])\b`)
	// docsRef is a mention of a document in docs/.
	docsRef = regexp.MustCompile(`\bdocs/([A-Za-z0-9_-]+)\.md`)
	// external names documents kept outside the repository. The patterns
	// are written so that this file does not match them itself.
	external = []*regexp.Regexp{
		regexp.MustCompile(`DESIGN\.md`), // also the redesign notes
		regexp.MustCompile(`STYLE\.md`),
		regexp.MustCompile(`\b(?:spec|testing|seeds|hooks)/[A-Za-z0-9_.-]+\.md\b`),
		regexp.MustCompile(`\b(?:intercom-v[4]|mcp-and-system[d]|orchestrator-ancho[r]|known-failure-mode[s]|go-style-anchor[s])\b`),
		regexp.MustCompile(`\bancho[r] §`),
		regexp.MustCompile(`(?i)\bspec[ \t]+BU[G]-[0-9]`),
	}
	// continuation joins a comment that goes on at the next line.
	continuation = regexp.MustCompile(`[ \t]*\n[ \t]*//[ \t]*`)
)

// docRefProblems lists the references of one Go source that do not resolve.
func docRefProblems(src string, docs map[string]*docHeadings, protocol *docHeadings) []docRefProblem {
	var out []docRefProblem
	lineOf := func(off int) int { return strings.Count(src[:off], "\n") + 1 }
	add := func(off int, format string, args ...any) {
		out = append(out, docRefProblem{line: lineOf(off), text: fmt.Sprintf(format, args...)})
	}
	for _, re := range external {
		for _, m := range re.FindAllStringIndex(src, -1) {
			add(m[0], "%q refers to a document outside the repository; cite docs/ instead", src[m[0]:m[1]])
		}
	}
	for _, m := range sectionRef.FindAllStringSubmatchIndex(src, -1) {
		if num := src[m[2]:m[3]]; !protocol.numbers[num] {
			add(m[0], "§%s has no numbered heading in docs/protocol.md", num)
		}
	}
	for _, m := range appendixRef.FindAllStringSubmatchIndex(src, -1) {
		if letter := src[m[2]:m[3]]; !protocol.appendices[letter] {
			add(m[0], "spec Appendix %s has no heading in docs/protocol.md", letter)
		}
	}
	for _, m := range docsRef.FindAllStringSubmatchIndex(src, -1) {
		name := src[m[2]:m[3]]
		doc, ok := docs[name]
		if !ok {
			add(m[0], "docs/%s.md does not exist", name)
			continue
		}
		for _, section := range citedSections(src[m[1]:]) {
			if !doc.has(section) {
				add(m[0], "docs/%s.md has no heading %q", name, section)
			}
		}
	}
	return out
}

// citedSections reads the quoted section names that follow a document
// mention: ` "A"`, ` "A" and "B"`, ` "A", "B" or "C"`, each possibly broken
// across comment lines. The first name must be separated from the mention by
// blank space, so a path that merely ends a string literal cites nothing.
func citedSections(rest string) []string {
	var names []string
	for {
		i := 0
		for i < len(rest) {
			if r := rest[i]; r == ' ' || r == '\t' {
				i++
				continue
			}
			if j := skipContinuation(rest[i:]); j > 0 {
				i += j
				continue
			}
			if len(names) > 0 {
				if rest[i] == ',' {
					i++
					continue
				}
				if w := leadingWord(rest[i:]); w == "and" || w == "or" {
					i += len(w)
					continue
				}
			}
			break
		}
		if i == 0 || i >= len(rest) || rest[i] != '"' {
			return names
		}
		end := strings.IndexByte(rest[i+1:], '"')
		if end < 0 {
			return names
		}
		raw := rest[i+1 : i+1+end]
		names = append(names, strings.Join(strings.Fields(continuation.ReplaceAllString(raw, " ")), " "))
		rest = rest[i+1+end+1:]
	}
}

// skipContinuation returns the length of a line break followed by a comment
// marker at the start of s, or 0.
func skipContinuation(s string) int {
	if loc := continuation.FindStringIndex(s); loc != nil && loc[0] == 0 && strings.Contains(s[:loc[1]], "\n") {
		return loc[1]
	}
	return 0
}

func leadingWord(s string) string {
	n := 0
	for n < len(s) && (s[n] >= 'a' && s[n] <= 'z') {
		n++
	}
	if n < len(s) && s[n] != ' ' && s[n] != '\t' && s[n] != '\n' && s[n] != '"' {
		return ""
	}
	return s[:n]
}

// docHeadings are the headings of one document in docs/.
type docHeadings struct {
	titles     map[string]bool // heading text, and the text after a leading section number
	numbers    map[string]bool // section numbers of numbered headings: "5", "5.7"
	appendices map[string]bool // appendix letters
}

func (d *docHeadings) has(title string) bool { return d.titles[title] }

var (
	headingLine   = regexp.MustCompile(`^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$`)
	numberedTitle = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\.?[ \t]+(.+)$`)
	appendixTitle = regexp.MustCompile(`^Appendix[ \t]+([A-Z])\b`)
)

// readDocs reads the headings of every docs/*.md, keyed by base name.
func readDocs(t *testing.T, dir string) map[string]*docHeadings {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.md"))
	require.NoError(t, err)
	out := map[string]*docHeadings{}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		out[strings.TrimSuffix(filepath.Base(path), ".md")] = parseHeadings(data)
	}
	return out
}

func parseHeadings(data []byte) *docHeadings {
	d := &docHeadings{titles: map[string]bool{}, numbers: map[string]bool{}, appendices: map[string]bool{}}
	fenced := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		m := headingLine.FindStringSubmatch(line)
		if fenced || m == nil {
			continue
		}
		title := m[1]
		d.titles[title] = true
		if n := numberedTitle.FindStringSubmatch(title); n != nil {
			d.numbers[n[1]] = true
			d.titles[n[2]] = true
		}
		if a := appendixTitle.FindStringSubmatch(title); a != nil {
			d.appendices[a[1]] = true
		}
	}
	return d
}

// moduleRoot is the directory of the go.mod above the working directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		} else if !errors.Is(err, fs.ErrNotExist) {
			require.NoError(t, err)
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod above the test's directory")
		dir = parent
	}
}

// TestDocRefsParsing checks the reference parser on small inputs, so that
// TestDocRefs cannot pass by missing references. The inputs spell the
// section sign "#" and the docs directory "D/", so that TestDocRefs does not
// read them as references of this file.
func TestDocRefsParsing(t *testing.T) {
	t.Parallel()
	docs := map[string]*docHeadings{
		"protocol":     parseHeadings([]byte("# P\n## 5 Delivery\n### 5.7 Ask semantics\n```\n## 9.9 not a heading\n```\n## Appendix B Environment\n")),
		"architecture": parseHeadings([]byte("# A\n## Session holders and the local API\n### Session holders\n## Decisions\n")),
	}
	in := strings.NewReplacer("#", "\u00a7", "D/", "docs/")
	count := func(src string) int { return len(docRefProblems(in.Replace(src), docs, docs["protocol"])) }

	require.Zero(t, count("// spec #5.7, #5 and (#5.7)."))
	require.Equal(t, 1, count("// spec #5.8"))
	require.Equal(t, 1, count("// spec #9.9 sits in a code block there"))
	require.Zero(t, count("// spec Appendix B"))
	require.Equal(t, 1, count("// spec\n// Appendix C"))
	require.Zero(t, count(`// D/architecture.md "Session
// holders and the local API", D/architecture.md "Session holders"`))
	require.Zero(t, count(`// D/architecture.md "Decisions" and "Session holders", then more`))
	require.Equal(t, 1, count(`// D/architecture.md "Decisions" and "Leases"`))
	require.Equal(t, 1, count(`// D/architecture.md "Nope"`))
	require.Zero(t, count(`// D/architecture.md's rules; f("D/protocol.md", "x")`))
	require.Equal(t, 1, count(`// see D/missing.md`))
	require.Equal(t, 1, count("// the "+"DESIGN"+".md notes"))
	require.Equal(t, 1, count("// spec/"+"x.md"))
	require.NotZero(t, count("// (orchestrator-"+"ancho"+"r #5)"))
}
