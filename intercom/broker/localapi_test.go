package broker_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agent-fleet/agent-fleet/intercom"
	"github.com/agent-fleet/agent-fleet/intercom/broker"
)

// Config.API answers the ops the broker does not know, with their bodies;
// the broker's own ops stay its own.
func TestLocalAPIExtraOps(t *testing.T) {
	var seen []string
	h := startBroker(t, func(c *broker.Config) {
		c.API = func(req intercom.APIRequest) (intercom.APIResponse, bool) {
			seen = append(seen, req.Op)
			if req.Op != "echo" {
				return intercom.APIResponse{}, false
			}
			return intercom.APIResponse{OK: true, Body: req.Body}, true
		}
	})
	api := &intercom.LocalAPIClient{Path: h.Paths.LocalAPISocket()}
	ctx := context.Background()
	resp, err := api.Do(ctx, intercom.APIRequest{Op: "echo", Body: json.RawMessage(`{"share":["a"]}`)})
	require.NoError(t, err)
	require.JSONEq(t, `{"share":["a"]}`, string(resp.Body))

	_, err = api.Do(ctx, intercom.APIRequest{Op: "nope"})
	require.ErrorIs(t, err, intercom.ErrUnknownOp)
	require.ErrorContains(t, err, "nope")

	resp, err = api.Do(ctx, intercom.APIRequest{Op: intercom.OpStats})
	require.NoError(t, err)
	require.NotNil(t, resp.Stats)
	require.Equal(t, []string{"echo", "nope"}, seen, "the broker's own ops never reach the hook")
}
