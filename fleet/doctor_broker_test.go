//go:build !windows

package fleet

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
)

// doctor tells a broker socket nobody listens on (a broker starts on
// demand) from one that something else holds: no broker can start there,
// so clients would wait for one in vain.
func TestBrokerCheckTellsAForeignListener(t *testing.T) {
	t.Parallel()
	p := brokerCheckPaths(t)

	_, st, detail, _ := brokerCheck(context.Background(), p)
	require.Equal(t, CheckOK, st)
	require.Equal(t, "not running (started on demand)", detail)

	ln, err := net.Listen("unix", p.BrokerSocket())
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			c.Close()
		}
	}()
	_, st, detail, fix := brokerCheck(context.Background(), p)
	require.Equal(t, CheckFail, st, detail)
	require.Contains(t, detail, "something listens on "+p.BrokerSocket()+" but does not answer as an intercom v4 broker")
	require.Contains(t, fix, "never replaces a live listener")
}

// A live broker whose socket was removed under it (its owner file names a
// live process, nothing answers on the socket) is no "not running": no
// other broker can start until it is stopped.
func TestBrokerCheckTellsAnOwnerWithoutItsSocket(t *testing.T) {
	t.Parallel()
	p := brokerCheckPaths(t)
	require.NoError(t, os.WriteFile(p.OwnerFile(), []byte(strconv.Itoa(os.Getpid())), intercom.FileMode)) // a live process

	_, st, detail, fix := brokerCheck(context.Background(), p)
	require.Equal(t, CheckFail, st, detail)
	require.Contains(t, detail, fmt.Sprintf("broker pid %d owns", os.Getpid()))
	require.Contains(t, fix, fmt.Sprintf("ps -o args= -p %d", os.Getpid()))

	require.NoError(t, os.WriteFile(p.OwnerFile(), []byte("999999999"), intercom.FileMode)) // long gone
	_, st, detail, _ = brokerCheck(context.Background(), p)
	require.Equal(t, CheckOK, st)
	require.Equal(t, "not running (started on demand)", detail)
}

// brokerCheckPaths is an empty agent directory with a short path (a
// socket path has to fit in sun_path).
func brokerCheckPaths(t *testing.T) intercom.Paths {
	t.Helper()
	dir, err := os.MkdirTemp("", "afd")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := intercom.NewPaths(dir)
	require.NoError(t, intercom.EnsureDir(p.Dir))
	return p
}
