//go:build !windows

package manifest

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// teamDir is a 0700 directory holding a valid 0600 manifest.
func teamDir(t *testing.T) (dir, path string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "teams")
	require.NoError(t, os.Mkdir(dir, 0o700))
	require.NoError(t, os.Chmod(dir, 0o700))
	path = filepath.Join(dir, "team.json")
	writeManifest(t, path, encode(t, doc()), 0o600)
	return dir, path
}

func writeManifest(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, data, 0o600))
	require.NoError(t, os.Chmod(path, mode))
}

func TestReadValid(t *testing.T) {
	_, path := teamDir(t)
	m, err := Read(path)
	require.NoError(t, err)
	require.Equal(t, runID, m.RunID)
	m, err = Read("  " + path + "\n")
	require.NoError(t, err, "the path is trimmed")
	require.Len(t, m.Members, 3)

	dir, _ := teamDir(t)
	big := doc()
	big["members"] = []any{member(leadID, "lead")}
	data := mustIndent(t, big)
	data = append(data, []byte(strings.Repeat(" ", MaxBytes-len(data)))...)
	writeManifest(t, filepath.Join(dir, "exact.json"), data, 0o600)
	_, err = Read(filepath.Join(dir, "exact.json"))
	require.NoError(t, err, "exactly 64 KiB is allowed")
}

func TestReadRefused(t *testing.T) {
	dir, path := teamDir(t)
	base := filepath.Dir(dir)
	secret := filepath.Join(dir, "confidential-name.json")

	cases := map[string]struct {
		setup func(t *testing.T) string
		want  *Error
		hint  string
	}{
		"blank path":    {func(*testing.T) string { return "   " }, ErrInvalid, "the manifest path is empty"},
		"relative path": {func(*testing.T) string { return "some/relative/path/team.json" }, ErrInvalid, "the manifest path must be absolute"},
		"missing file":  {func(*testing.T) string { return secret }, ErrUnavailable, "the manifest file does not exist"},
		"missing dir":   {func(*testing.T) string { return filepath.Join(base, "nope", "team.json") }, ErrUnavailable, "the manifest's directory does not exist or cannot be read"},
		"symlink file": {func(t *testing.T) string {
			link := filepath.Join(dir, "link.json")
			require.NoError(t, os.Symlink(path, link))
			return link
		}, ErrUnavailable, "the manifest file must not be a symlink"},
		"directory": {func(t *testing.T) string {
			sub := filepath.Join(dir, "sub.json")
			require.NoError(t, os.Mkdir(sub, 0o600))
			return sub
		}, ErrUnavailable, "the manifest must be a regular file"},
		"fifo": {func(t *testing.T) string {
			fifo := filepath.Join(dir, "fifo.json")
			require.NoError(t, syscall.Mkfifo(fifo, 0o600))
			require.NoError(t, os.Chmod(fifo, 0o600))
			return fifo
		}, ErrUnavailable, "the manifest must be a regular file"},
		"oversized": {func(t *testing.T) string {
			big := filepath.Join(dir, "big.json")
			writeManifest(t, big, append(encode(t, doc()), []byte(strings.Repeat(" ", MaxBytes))...), 0o600)
			return big
		}, ErrUnavailable, "the manifest must be at most 64 KiB"},
		"permissive parent": {func(t *testing.T) string {
			open := filepath.Join(base, "open")
			require.NoError(t, os.Mkdir(open, 0o755))
			require.NoError(t, os.Chmod(open, 0o755))
			p := filepath.Join(open, "team.json")
			writeManifest(t, p, encode(t, doc()), 0o600)
			return p
		}, ErrUnavailable, "the manifest's directory must be mode 0700 and owned by you"},
		"strict parent 0500": {func(t *testing.T) string {
			d := filepath.Join(base, "ro")
			require.NoError(t, os.Mkdir(d, 0o700))
			p := filepath.Join(d, "team.json")
			writeManifest(t, p, encode(t, doc()), 0o600)
			require.NoError(t, os.Chmod(d, 0o500))
			t.Cleanup(func() { _ = os.Chmod(d, 0o700) })
			return p
		}, ErrUnavailable, "the manifest's directory must be mode 0700 and owned by you"},
		"symlinked parent": {func(t *testing.T) string {
			link := filepath.Join(base, "linked")
			require.NoError(t, os.Symlink(dir, link))
			return filepath.Join(link, "team.json")
		}, ErrUnavailable, "the manifest's directory must be a real directory, not a symlink"},
		"a file's path as its directory": {func(t *testing.T) string {
			p := filepath.Join(dir, "plain.json")
			writeManifest(t, p, encode(t, doc()), 0o600)
			return filepath.Join(p, "x.json")
		}, ErrUnavailable, "the manifest's directory is not a directory"},
		"a trailing slash": {func(t *testing.T) string {
			p := filepath.Join(dir, "slash.json")
			writeManifest(t, p, encode(t, doc()), 0o600)
			return p + "/"
		}, ErrInvalid, "the manifest path must name a file, not end in a slash"},
		"invalid content": {func(t *testing.T) string {
			p := filepath.Join(dir, "bad.json")
			writeManifest(t, p, with("scope", "secret-scope-value"), 0o600)
			return p
		}, ErrInvalid, "the manifest must be an object with exactly the keys"},
	}
	for _, mode := range []os.FileMode{0o400, 0o644, 0o666, 0o700, 0o000, 0o640, 0o604} {
		mode := mode
		cases["file mode "+mode.String()] = struct {
			setup func(t *testing.T) string
			want  *Error
			hint  string
		}{func(t *testing.T) string {
			p := filepath.Join(dir, "mode-"+strings.ReplaceAll(mode.String(), "-", "_")+".json")
			writeManifest(t, p, encode(t, doc()), mode)
			return p
		}, ErrUnavailable, "the manifest must be mode 0600 and owned by you"}
	}
	if os.Getuid() == 0 {
		cases["file of another user"] = struct {
			setup func(t *testing.T) string
			want  *Error
			hint  string
		}{func(t *testing.T) string {
			p := filepath.Join(dir, "theirs.json")
			writeManifest(t, p, encode(t, doc()), 0o600)
			require.NoError(t, os.Chown(p, 4242, 4242))
			return p
		}, ErrUnavailable, "the manifest must be mode 0600 and owned by you"}
		cases["directory of another user"] = struct {
			setup func(t *testing.T) string
			want  *Error
			hint  string
		}{func(t *testing.T) string {
			d := filepath.Join(base, "theirs")
			require.NoError(t, os.Mkdir(d, 0o700))
			p := filepath.Join(d, "team.json")
			writeManifest(t, p, encode(t, doc()), 0o600)
			require.NoError(t, os.Chown(d, 4242, 4242))
			return p
		}, ErrUnavailable, "the manifest's directory must be mode 0700 and owned by you"}
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p := c.setup(t)
			m, err := Read(p)
			require.Nil(t, m)
			require.ErrorIs(t, err, c.want)
			var me *Error
			require.ErrorAs(t, err, &me)
			require.Equal(t, c.want.Code, me.Code)
			require.True(t, strings.HasPrefix(err.Error(), c.want.Code+": "), err.Error())
			require.Contains(t, err.Error(), c.hint)
			require.NotContains(t, err.Error(), "/", "no path in the error")
			require.NotContains(t, err.Error(), "confidential")
		})
	}
}
