package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/agent"
	"github.com/commandcore/commandcore/internal/enrollment"
	"github.com/commandcore/commandcore/internal/relay"
	"github.com/commandcore/commandcore/internal/relaystate"
	"github.com/commandcore/commandcore/internal/transport"
)

// enrollTimeout bounds the enrollment request.
const enrollTimeout = 30 * time.Second

func newEnrollCmd(g *globalFlags, streams IO) *cobra.Command {
	var server, code, name string
	var force bool
	cmd := &cobra.Command{
		Use:   "enroll --server URL --code CODE",
		Short: "Obtain this device's identity from a server with a one-time code",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if server == "" || code == "" {
				return usageError("enroll needs --server URL and --code CODE")
			}
			if _, err := transport.AgentURL(server); err != nil {
				return usageError("--server: %v", err)
			}
			dirs, err := g.dirs()
			if err != nil {
				return err
			}
			if old, err := enrollment.Load(dirs.Config); err == nil && !force {
				return fmt.Errorf("already enrolled as %s with %s; pass --force to replace this identity", old.Name, old.Server)
			}
			hint := ""
			switch host, _ := os.Hostname(); {
			case name != "" && !relaystate.ValidDeviceName(name):
				return usageError("--name: a device name is %s", relaystate.DeviceNameRule)
			case name == "" && relaystate.ValidDeviceName(host):
				name = host
			case name == "":
				// The relay refuses an invalid name the way it refuses a
				// wrong code, so say here why a code without a name of its
				// own may be refused.
				hint = "; this host's name is not a valid device name (" + relaystate.DeviceNameRule + "), so a code without a name needs --name NAME"
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), enrollTimeout)
			defer cancel()
			resp, err := enroll(ctx, server, relay.EnrollRequest{Code: code, Name: name})
			if err != nil {
				return fmt.Errorf("%w%s", err, hint)
			}
			id := &enrollment.Credential{
				Schema: enrollment.Schema, Server: strings.TrimRight(server, "/"), DeviceID: resp.DeviceID,
				Name: resp.Name, Token: resp.Token, Secret: resp.Secret, GrantKey: resp.GrantKey,
				EnrolledAt: time.Now().UTC(),
			}
			if err := enrollment.Save(dirs.Config, id); err != nil {
				return err
			}
			fmt.Fprintf(streams.Out, "Enrolled as %s (device %s) with %s.\nA running agent links within %s; otherwise start it: commandcore install (or commandcore agent).\n", id.Name, id.DeviceID, id.Server, agent.ReconcileEvery)
			return nil
		},
	}
	cmd.Flags().StringVar(&server, "server", "", "the server's URL (https://, or http:// on loopback)")
	cmd.Flags().StringVar(&code, "code", "", "the one-time enrollment code")
	cmd.Flags().StringVar(&name, "name", "", "the device name to propose (default: the host name)")
	cmd.Flags().BoolVar(&force, "force", false, "replace an existing identity")
	return cmd
}

// enrollClient follows no redirect: the identity it obtains is bound to
// --server, and a redirect would hand the code to another server.
var enrollClient = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// enroll posts the request and decodes the identity.
func enroll(ctx context.Context, server string, req relay.EnrollRequest) (*relay.EnrollResponse, error) {
	body, _ := json.Marshal(req)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(server, "/")+"/v1/enroll", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("enroll: %w", err)
	}
	hr.Header.Set("Content-Type", "application/json")
	res, err := enrollClient.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("enroll: %w", err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, relay.MaxEnrollResponseBytes))
	if err != nil {
		return nil, fmt.Errorf("enroll: read response: %w", err)
	}
	if res.StatusCode >= 300 && res.StatusCode < 400 {
		return nil, fmt.Errorf("enroll: the server answered with a redirect (%s), and enrollment follows none; give --server the relay's own URL", res.Status)
	}
	if res.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if json.Unmarshal(data, &e) == nil && e.Error.Message != "" {
			return nil, fmt.Errorf("enroll: the server refused: %s", e.Error.Message)
		}
		return nil, fmt.Errorf("enroll: the server answered %s", res.Status)
	}
	out, err := relay.DecodeEnrollResponse(data)
	if err != nil {
		return nil, fmt.Errorf("enroll: %w", err)
	}
	return out, nil
}
