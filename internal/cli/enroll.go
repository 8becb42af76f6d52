package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/commandcore/commandcore/internal/agent"
	"github.com/commandcore/commandcore/internal/enrollment"
	"github.com/commandcore/commandcore/internal/relay/downloads"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/transport"
)

// enrollTimeout bounds the enrollment request.
const enrollTimeout = 30 * time.Second

type enrollOptions struct {
	IO IO
	// The flags as given.
	Server, Code, Name string
	Force              bool
	// KeepIdentity succeeds without enrolling when an identity exists.
	KeepIdentity bool
	// Hostname proposes the device's name when --name is not given.
	Hostname func() (string, error)
	// Getenv reads the code when --code is not given.
	Getenv func(string) string
}

func newEnrollCmd(g *globalFlags, streams IO) *cobra.Command {
	o := &enrollOptions{IO: streams, Hostname: os.Hostname, Getenv: os.Getenv}
	cmd := &cobra.Command{
		Use:   "enroll --server URL",
		Short: "Obtain this device's identity from a server with a one-time code",
		Long: "Obtain this device's identity from a server with a one-time code, read from $" + downloads.CodeEnv + ":\n\n" +
			"  " + downloads.EnrollLine("https://relay.example", "ccE-...") + "\n\n" +
			"A process's environment is readable only by its own user and root; its command line, by every local user\n" +
			"(ps, /proc/PID/cmdline), who could enroll a device of their own with a code seen there first.",
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error { return runEnroll(cmd.Context(), g, o) },
	}
	cmd.Flags().StringVar(&o.Server, "server", "", "the server's URL (https://, or http:// on loopback), or its replicas' URLs separated by commas (the first enrolls; the agent links to any)")
	cmd.Flags().StringVar(&o.Code, "code", "", "the one-time enrollment code, instead of $"+downloads.CodeEnv+"; other local users can read it in the process list while enroll runs")
	cmd.Flags().StringVar(&o.Name, "name", "", "the device name to propose (default: the host name)")
	cmd.Flags().BoolVar(&o.Force, "force", false, "replace an existing identity")
	cmd.Flags().BoolVar(&o.KeepIdentity, "keep-identity", false, "when this device already has an identity, keep it and succeed without using a code (for scripts that install or upgrade)")
	return cmd
}

// deviceName is the name to propose, and a hint for a refusal when the
// host's name is no device name.
func (o *enrollOptions) deviceName() (name, hint string, err error) {
	switch host, _ := o.Hostname(); {
	case o.Name != "" && !store.ValidDeviceName(o.Name):
		return "", "", usageError("--name: a device name is %s", store.DeviceNameRule)
	case o.Name != "":
		return o.Name, "", nil
	case store.ValidDeviceName(host):
		return host, "", nil
	}
	// The relay refuses an invalid name the way it refuses a wrong code,
	// so say here why a code without a name of its own may be refused.
	return "", "; this host's name is not a valid device name (" + store.DeviceNameRule + "), so a code without a name needs --name NAME", nil
}

func runEnroll(ctx context.Context, g *globalFlags, o *enrollOptions) error {
	if o.Code == "" && o.Getenv != nil {
		o.Code = strings.TrimSpace(o.Getenv(downloads.CodeEnv))
	}
	switch {
	case o.KeepIdentity && o.Force:
		return usageError("--keep-identity and --force contradict each other")
	case o.Server == "" || (o.Code == "" && !o.KeepIdentity):
		return usageError("enroll needs --server URL and a code in $%s (or --code CODE)", downloads.CodeEnv)
	}
	servers, err := transport.ParseServers(o.Server)
	if err != nil {
		return usageError("--server: %v", err)
	}
	dirs, err := g.dirs()
	if err != nil {
		return err
	}
	switch old, err := enrollment.Load(dirs.Config); {
	case err == nil && o.KeepIdentity:
		fmt.Fprintf(o.IO.Out, "Already enrolled as %s (device %s) with %s; identity kept.\n", old.Name, old.DeviceID, old.Server)
		return nil
	case err == nil && !o.Force:
		return fmt.Errorf("already enrolled as %s with %s; pass --force to replace this identity", old.Name, old.Server)
	case o.Code == "":
		return usageError("this device is not enrolled: enroll needs a code in $%s (or --code CODE)", downloads.CodeEnv)
	}
	name, hint, err := o.deviceName()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, enrollTimeout)
	defer cancel()
	// Any replica enrolls: the first is asked.
	resp, err := enrollment.Enroll(ctx, servers[0], enrollment.Request{Code: o.Code, Name: name})
	if err != nil {
		return fmt.Errorf("%w%s", err, hint)
	}
	id := &enrollment.Credential{
		Schema: enrollment.Schema, Server: servers[0], DeviceID: resp.DeviceID,
		Name: resp.Name, Token: resp.Token, Secret: resp.Secret, GrantKey: resp.GrantKey,
		EnrolledAt: time.Now().UTC(),
	}
	if len(servers) > 1 {
		id.Servers = servers
	}
	if err := enrollment.Save(dirs.Config, id); err != nil {
		return err
	}
	fmt.Fprintf(o.IO.Out, "Enrolled as %s (device %s) with %s.\nA running agent links within %s; otherwise start it: commandcore install (or commandcore agent).\n", id.Name, id.DeviceID, id.Server, agent.ReconcileEvery)
	return nil
}
