package factory

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// rssFileKiB is the process's resident file-backed memory (RssFile).
func rssFileKiB(t *testing.T) int {
	data, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "RssFile:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}

// The test binary, like agent-fleet, has far more of its executable
// resident after start-up than it runs afterwards.
func TestReleaseStartupPagesShrinksTheResidentSet(t *testing.T) {
	before := rssFileKiB(t)
	released, err := ReleaseStartupPages()
	require.NoError(t, err)
	after := rssFileKiB(t)
	require.Positive(t, released)
	require.Less(t, after, before, "RssFile %d kB before, %d kB after releasing %d bytes", before, after, released)
}
