package federationtest

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// A client with an allowed nkey reaches the server through a proxy; a
// cut drops it and refuses it until restored; a restarted server keeps
// its port and admits it again; an unknown nkey is refused.
func TestServerAndProxy(t *testing.T) {
	t.Parallel()
	seed, pub := NewUser(t)
	srv := StartServer(t, pub)
	p := ListenProxy(t, srv.Addr)
	connect := func(seed []byte) (*nats.Conn, error) {
		opt, err := nats.NkeyOptionFromSeed(SeedFile(t, t.TempDir(), seed))
		require.NoError(t, err)
		return nats.Connect(p.URL(), opt, nats.NoReconnect(), nats.Timeout(5*time.Second))
	}
	nc, err := connect(seed)
	require.NoError(t, err)
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	sub, err := nc.SubscribeSync("t.echo")
	require.NoError(t, err)
	require.NoError(t, nc.Publish("t.echo", []byte("one")))
	m, err := sub.NextMsg(10 * time.Second)
	require.NoError(t, err)
	require.Equal(t, "one", string(m.Data))

	p.Cut()
	<-closed
	_, err = connect(seed)
	require.Error(t, err, "a cut link refuses new connections")
	p.Restore()

	port := srv.Addr()
	srv.Stop()
	_, err = connect(seed)
	require.Error(t, err, "no server, no connection")
	require.NoError(t, srv.Start())
	require.Equal(t, port, srv.Addr())
	nc, err = connect(seed)
	require.NoError(t, err)
	nc.Close()

	other, _ := NewUser(t)
	_, err = connect(other)
	require.ErrorContains(t, err, "Authorization Violation")
}

// A host's namespace reaches only what the test listens for inside it.
func TestNetns(t *testing.T) {
	t.Parallel()
	if err := NetnsSupported(); err != nil {
		t.Skip(err)
	}
	n := NewNetns(t)
	ln, err := n.Listen("127.0.0.1:4222")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write([]byte("inside\n"))
	}()
	// Outside the namespace nothing listens there (or something else does).
	if c, err := net.DialTimeout("tcp", "127.0.0.1:4222", time.Second); err == nil {
		c.Close()
	}
	out, err := n.Command("bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/4222; head -1 <&3").Output()
	require.NoError(t, err)
	require.Equal(t, "inside", strings.TrimSpace(string(out)))
	// Nothing else is reachable from inside: no route off loopback.
	out, _ = n.Command("ip", "-o", "link").Output()
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	var links []string
	for sc.Scan() {
		links = append(links, strings.Fields(sc.Text())[1])
	}
	require.Equal(t, []string{"lo:"}, links)
}
