package ui

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"runtime"

	"github.com/agent-fleet/agent-fleet/cmd/agent-fleet/internal/output"
)

// Serve is agent-fleet ui: it listens, prints where (the URL with its
// token on out, or with asJSON {"url", "listen"|"socket"} as one line),
// opens the URL in the person's browser unless noOpen (or serving on a
// socket, which a browser cannot reach by itself), and serves until ctx
// ends.
func Serve(ctx context.Context, cfg Config, out, errOut io.Writer, noOpen, asJSON bool) error {
	s, err := New(ctx, cfg)
	if err != nil {
		return err
	}
	where := map[string]string{"url": s.URL()}
	if cfg.Socket != "" {
		where["socket"] = s.Addr().String()
	} else {
		where["listen"] = s.Addr().String()
	}
	switch {
	case asJSON:
		_ = output.PrintJSON(out, where)
	case cfg.Socket != "":
		fmt.Fprintf(out, "agent-fleet ui on the socket %s\n%s\n", where["socket"], s.URL())
		fmt.Fprintf(errOut, "Reach it through a forwarder, e.g. curl --unix-socket %s '%s', or ssh -L 8080:%s HOST and then http://localhost:8080/?token=…\n",
			where["socket"], s.URL(), where["socket"])
	default:
		fmt.Fprintln(out, s.URL())
		fmt.Fprintln(errOut, "agent-fleet ui: open the URL above (it carries this run's token); Ctrl-C stops the dashboard")
	}
	if !noOpen && cfg.Socket == "" {
		if err := openBrowser(s.URL()); err != nil {
			fmt.Fprintln(errOut, "agent-fleet ui: could not open a browser:", err)
		}
	}
	return s.Run(ctx)
}

// openBrowser hands url to the desktop's opener, without waiting for it.
func openBrowser(url string) error {
	var cmd *exec.Cmd
	switch runtime.GOOS {
	case "darwin":
		cmd = exec.Command("open", url)
	case "windows":
		cmd = exec.Command("rundll32", "url.dll,FileProtocolHandler", url)
	default:
		cmd = exec.Command("xdg-open", url)
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }()
	return nil
}
