package ui

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHostCheck(t *testing.T) {
	tcp := hostCheck{port: 8377}
	for host, ok := range map[string]bool{
		"127.0.0.1:8377": true, "localhost:8377": true, "[::1]:8377": true,
		"127.0.0.1:8378": false, "127.0.0.1": false, "evil.example:8377": false, "localhost.evil.example:8377": false, "": false,
	} {
		require.Equal(t, ok, tcp.ok(host), host)
	}
	sock := hostCheck{socket: true}
	for host, ok := range map[string]bool{"localhost": true, "localhost:8080": true, "127.0.0.1:9": true, "evil.example": false} {
		require.Equal(t, ok, sock.ok(host), host)
	}
}

func TestLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "localhost:8377", "[::1]:0", "127.0.0.2:80"} {
		require.NoError(t, loopbackOnly(addr), addr)
	}
	for _, addr := range []string{"0.0.0.0:0", ":8377", "192.168.1.2:80", "example.com:80", "127.0.0.1"} {
		require.Error(t, loopbackOnly(addr), addr)
	}
}
