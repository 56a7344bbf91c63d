package units_test

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
	"time"
)

// helperEnv makes the test binary act as a service's main process instead
// of running tests (for Type=notify services).
const helperEnv = "AGENT_FLEET_UNITS_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode))
	}
	os.Exit(m.Run())
}

// helper modes:
//
//	notify:<ms>  sleep ms, send READY=1 on $NOTIFY_SOCKET, then sleep
//	exit:<n>     exit n without sending READY=1
func helper(mode string) int {
	var arg string
	for i := range mode {
		if mode[i] == ':' {
			mode, arg = mode[:i], mode[i+1:]
			break
		}
	}
	n, _ := strconv.Atoi(arg)
	switch mode {
	case "notify":
		time.Sleep(time.Duration(n) * time.Millisecond)
		addr := os.Getenv("NOTIFY_SOCKET")
		if addr != "" && addr[0] == '@' {
			addr = "\x00" + addr[1:]
		}
		conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
		if err != nil {
			fmt.Fprintln(os.Stderr, "notify:", err)
			return 1
		}
		if _, err := conn.Write([]byte("READY=1")); err != nil {
			fmt.Fprintln(os.Stderr, "notify:", err)
			return 1
		}
		conn.Close()
		time.Sleep(time.Hour)
		return 0
	case "exit":
		return n
	}
	fmt.Fprintln(os.Stderr, "unknown helper mode", mode)
	return 2
}
