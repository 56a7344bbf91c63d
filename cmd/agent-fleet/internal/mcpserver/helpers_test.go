package mcpserver

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/factory"
	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
)

var discard = slog.New(slog.DiscardHandler)

// testFactory is a factory writing nowhere.
func testFactory() *factory.Factory {
	return factory.New(&factory.IOStreams{In: io.MultiReader(), Out: io.Discard, Err: io.Discard}, "test")
}

func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "afm")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// startTestBroker runs a broker in this process on p until the test ends.
func startTestBroker(t *testing.T, p intercom.Paths) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = broker.ListenAndServe(ctx, broker.Config{Paths: p, IdleExit: -1, TrustedLocal: true})
	}()
	t.Cleanup(func() { cancel(); <-done })
	require.Eventually(t, func() bool {
		h, _ := intercom.ProbeBroker(context.Background(), p)
		return h == intercom.Compatible
	}, 5*time.Second, 5*time.Millisecond)
}
