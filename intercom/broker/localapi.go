package broker

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"time"

	"github.com/agent-fleet/agent-fleet/intercom"
)

const maxAPILine = 64 << 10

// serveAPI answers local API requests on one connection (docs/architecture.md "Session
// holders and the local API"): JSON lines, one response per request. Only
// the broker's own user may connect.
func (b *Broker) serveAPI(nc net.Conn) {
	defer nc.Close()
	b.mu.Lock()
	if b.closing {
		b.mu.Unlock()
		return
	}
	b.apiConns[nc] = struct{}{}
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.apiConns, nc)
		b.mu.Unlock()
	}()
	if uid, _, err := intercom.PeerCredentials(nc); err == nil && uid != os.Getuid() && b.cfg.CheckPeerUID {
		return
	}
	sc := bufio.NewScanner(nc)
	sc.Buffer(make([]byte, 0, 1024), maxAPILine)
	enc := json.NewEncoder(nc)
	for {
		_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
		if !sc.Scan() {
			return
		}
		var req intercom.APIRequest
		var resp intercom.APIResponse
		shutdown := false
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			resp.Error = "bad request: " + err.Error()
		} else {
			switch req.Op {
			case intercom.OpStats:
				st := b.Stats()
				resp.OK, resp.Stats = true, &st
			case intercom.OpPeer:
				if req.SessionID == "" {
					resp.Error = "peer needs sessionId"
					break
				}
				p := b.Peer(req.SessionID)
				resp.OK, resp.Peer = true, &p
			case intercom.OpShutdown:
				resp.OK, shutdown = true, true
			default:
				if b.cfg.API != nil {
					if r, ok := b.cfg.API(req); ok {
						resp = r
						break
					}
				}
				resp.Error = "unknown op " + req.Op
			}
		}
		_ = nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if err := enc.Encode(&resp); err != nil {
			return
		}
		if shutdown {
			b.log.Info("shutdown requested through the local API")
			b.Shutdown()
			return
		}
	}
}
