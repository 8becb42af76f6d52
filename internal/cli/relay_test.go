package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/commandcore/commandcore/internal/enrollment"
	"github.com/commandcore/commandcore/internal/humantime"
	"net"
	"regexp"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/testkit"
)

// relayAt returns relay options over a fresh relay database whose clock
// reads now, writing to out and errOut.
func relayAt(t *testing.T, now time.Time, out, errOut *bytes.Buffer) relayOptions {
	t.Helper()
	state := t.TempDir()
	return relayOptions{IO: IO{Out: out, Err: errOut}, Now: func() time.Time { return now },
		State: func() (store.State, error) { return store.Open(state) }}
}

// table is rows (tab-separated cells) as the relay commands align them:
// columns two spaces apart.
func table(rows ...string) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, r)
	}
	tw.Flush()
	return b.String()
}

var bearerRE = regexp.MustCompile(`^cct_tok_[0-9a-f]{12}_[A-Za-z0-9_-]{43}\n$`)

// TestRelayTokens: create prints the secret alone on stdout and the grant
// on stderr; list shows it active, then revoked after revoke, and
// expired once its time has passed.
func TestRelayTokens(t *testing.T) {
	now := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	var out, errOut bytes.Buffer
	ro := relayAt(t, now, &out, &errOut)
	create := &tokenCreateOptions{relayOptions: ro, Name: "ci", Devices: "build-box", Tools: "process.*,system.metrics", TTL: "12h"}
	if err := runTokenCreate(create); err != nil {
		t.Fatal(err)
	}
	if !bearerRE.MatchString(out.String()) {
		t.Fatalf("token create stdout %q is not the bearer alone", out.String())
	}
	id := strings.Join(strings.Split(out.String(), "_")[1:3], "_")
	if want := "token " + id + " (ci): principal " + id + ", devices build-box, tools process.*,system.metrics, expires " + humantime.Time(now.Add(12*time.Hour)) + ". It is shown only now.\n"; errOut.String() != want {
		t.Fatalf("token create stderr %q, want %q", errOut.String(), want)
	}

	out.Reset()
	list := &tokenListOptions{relayOptions: ro, JSON: true}
	if err := runTokenList(list); err != nil {
		t.Fatal(err)
	}
	toks, err := testkit.DecodeLines[store.Token](out.Bytes())
	if err != nil || len(toks) != 1 || toks[0].ID != id || toks[0].Name != "ci" || toks[0].RevokedAt != nil {
		t.Fatalf("token list --json (%v):\n%s", err, out.String())
	}
	// The state the table shows is in the JSON too, and its times stay
	// RFC 3339.
	for _, want := range []string{`"state":"active"`, `"expires_at":"2031-01-02T15:04:05Z"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("token list --json lacks %s:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "cct_") {
		t.Fatalf("token list shows a secret:\n%s", out.String())
	}

	wantRow := func(state string) {
		t.Helper()
		out.Reset()
		list.JSON = false
		if err := runTokenList(list); err != nil {
			t.Fatal(err)
		}
		want := table("ID\tKIND\tNAME\tCLIENT\tPRINCIPAL\tDEVICES\tTOOLS\tCREATED\tLAST USED\tEXPIRES\tSTATE",
			id+"\tstatic\tci\t-\t"+id+"\tbuild-box\tprocess.*,system.metrics\t"+humantime.Time(now)+"\t-\t"+humantime.Time(now.Add(12*time.Hour))+"\t"+state)
		if out.String() != want {
			t.Fatalf("token list:\n%s\nwant:\n%s", out.String(), want)
		}
	}
	wantRow("active")
	later := now.Add(13 * time.Hour)
	list.Now = func() time.Time { return later }
	wantRow("expired")

	out.Reset()
	if err := runTokenRevoke(&tokenRevokeOptions{relayOptions: ro, ID: id}); err != nil || out.String() != "revoked "+id+"\n" {
		t.Fatalf("token revoke: %v, %q", err, out.String())
	}
	wantRow("revoked")
	err = runTokenRevoke(&tokenRevokeOptions{relayOptions: ro, ID: "tok_000000000000"})
	if errcode.From(err).Code != errcode.NotFound {
		t.Fatalf("revoking an unknown token: %v", err)
	}
}

// TestRelayTokenListShowsConnections: an OAuth connection is listed with
// its kind, its client's name, when it was created and last used.
func TestRelayTokenListShowsConnections(t *testing.T) {
	now := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	var out, errOut bytes.Buffer
	ro := relayAt(t, now, &out, &errOut)
	st, err := ro.State()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	req, err := st.CreateAuthRequest(store.AuthRequest{ClientID: "https://app.example/c.json", ClientName: "Claude Desktop",
		RedirectURI: "https://app.example/cb", Challenge: strings.Repeat("A", 43), Resource: "https://relay.example/mcp/box"}, now)
	if err != nil {
		t.Fatal(err)
	}
	code, _, err := st.ApproveAuthRequest(req, store.ConnectionSpec{Devices: []string{"box"}, Tools: []string{"process.jobs"},
		Principal: "olga", TTL: 24 * time.Hour, Admin: "olga"}, now)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := st.RedeemAuthCode(code, func(*store.AuthCode) error { return nil }, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.AppendAudit([]store.AuditEntry{{At: now.Add(time.Minute), Principal: "olga", TokenID: tok.ID, Tool: "process.jobs", Outcome: store.AuditOK}}, now); err != nil {
		t.Fatal(err)
	}
	if err := runTokenList(&tokenListOptions{relayOptions: ro}); err != nil {
		t.Fatal(err)
	}
	want := table("ID\tKIND\tNAME\tCLIENT\tPRINCIPAL\tDEVICES\tTOOLS\tCREATED\tLAST USED\tEXPIRES\tSTATE",
		tok.ID+"\toauth\tClaude-Desktop\tClaude Desktop\tolga\tbox\tprocess.jobs\t"+humantime.Time(now)+"\t"+humantime.Time(now.Add(time.Minute))+"\t"+humantime.Time(now.Add(24*time.Hour))+"\tactive")
	if out.String() != want {
		t.Fatalf("token list:\n%s\nwant:\n%s", out.String(), want)
	}
}

func TestRelayTokenCreateRefusesBadFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	ro := relayAt(t, time.Now(), &out, &errOut)
	for _, o := range []tokenCreateOptions{
		{Devices: "*", Tools: "*", TTL: "30d"},
		{Name: "ci", Devices: "*", Tools: "*", TTL: "0d"},
		{Name: "ci", Devices: "*", Tools: "*", TTL: "-5m"},
		{Name: "ci", Devices: "", Tools: "*", TTL: "30d"},
		{Name: "ci", Devices: "*", Tools: "process.start,,process.stop", TTL: "30d"},
		{Name: "ci", Devices: "*", Tools: "process start", TTL: "30d"},
	} {
		o.relayOptions = ro
		var ee *exitError
		if err := runTokenCreate(&o); !errors.As(err, &ee) || ee.code != ExitUsage {
			t.Errorf("%+v: %v, want a usage error", o, err)
		}
	}
	if out.Len() != 0 {
		t.Errorf("a refused token printed %q", out.String())
	}
}

func TestRelayDevices(t *testing.T) {
	now := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	var out, errOut bytes.Buffer
	ro := relayAt(t, now, &out, &errOut)
	st, err := ro.State()
	if err != nil {
		t.Fatal(err)
	}
	code, err := st.CreateEnrollCode("build-box", time.Minute, now)
	if err != nil {
		t.Fatal(err)
	}
	dev, _, _, err := st.Enroll(code, "", now)
	st.Close()
	if err != nil {
		t.Fatal(err)
	}

	o := &devicesOptions{relayOptions: ro}
	if err := runDevices(o); err != nil {
		t.Fatal(err)
	}
	want := "NAME       ID                                    STANDING  CONNECTED  REPLICA  LAST SEEN  AGENT\n" +
		"build-box  " + dev.ID + "  active    false      -        never      -\n"
	if out.String() != want {
		t.Fatalf("devices:\n%s\nwant:\n%s", out.String(), want)
	}
	// A live replica holding the link is named; one gone past its TTL
	// holds nothing, even before another replica sweeps it away.
	st, _ = ro.State()
	st.JoinReplica(store.Replica{ID: "rpl_a", Name: "relay-a"}, now)
	st.TakeLink(dev.ID, "rpl_a", "", now)
	st.NoteAgent(dev.ID, "rpl_a", store.AgentNote{Version: "1.0.0", Offered: "1.1.0"})
	st.Close()
	out.Reset()
	// A connected device is seen now, whenever its last-seen time was
	// last written.
	if err := runDevices(o); err != nil || !strings.Contains(out.String(), "  true       relay-a  connected  1.0.0 (outdated: 1.1.0 offered)") {
		t.Fatalf("devices with a live replica holding the link (%v):\n%s", err, out.String())
	}
	later := now.Add(limits.ReplicaTTL + time.Second)
	o.Now = func() time.Time { return later }
	out.Reset()
	if err := runDevices(o); err != nil || !strings.Contains(out.String(), "  false      -        "+humantime.Time(now)+"  ") {
		t.Fatalf("devices held by a replica gone past its TTL (%v):\n%s", err, out.String())
	}
	o.Now = ro.Now
	out.Reset()
	o.JSON = true
	if err := runDevices(o); err != nil {
		t.Fatal(err)
	}
	devs, err := testkit.DecodeLines[store.Device](out.Bytes())
	if err != nil || len(devs) != 1 || devs[0].ID != dev.ID || devs[0].Name != "build-box" || !devs[0].Connected || devs[0].Replica != "rpl_a" {
		t.Fatalf("devices --json (%v):\n%s", err, out.String())
	}
}

// TestEnrollCodeLine: enroll-code prints the code alone on stdout and on
// stderr the line that installs a device from --url, or the public URL the
// relay recorded, or the relay a running replica announced, or with a
// placeholder when none is known.
func TestEnrollCodeLine(t *testing.T) {
	state := t.TempDir()
	codeRE := regexp.MustCompile(`^ccE-[A-Za-z0-9]+\n$`)
	code, out, errOut := runMain("relay", "enroll-code", "--state-dir", state)
	if code != 0 || !codeRE.MatchString(out) || !strings.Contains(errOut, "curl --proto '=https' -fsSL https://RELAY/install.sh | COMMANDCORE_ENROLL_CODE="+strings.TrimSpace(out)+" sh\n") {
		t.Fatalf("no relay running: exit %d, %q, %q", code, out, errOut)
	}
	code, out, errOut = runMain("relay", "enroll-code", "--state-dir", state, "--url", "https://relay.example:8440/")
	if code != 0 || errOut != "On the device, run (valid 15m0s, once): curl --proto '=https' -fsSL https://relay.example:8440/install.sh | COMMANDCORE_ENROLL_CODE="+strings.TrimSpace(out)+" sh\n" {
		t.Fatalf("--url: exit %d, %q, %q", code, out, errOut)
	}
	if code, _, errOut := runMain("relay", "enroll-code", "--state-dir", state, "--url", "relay.example"); code != ExitUsage || !strings.Contains(errOut, "--url") {
		t.Fatalf("a bad --url: exit %d, %q", code, errOut)
	}
	st, err := store.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.JoinReplica(store.Replica{ID: "rpl_000000000001", Name: "one", Address: "http://127.0.0.1:8440"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	st.Close()
	code, out, errOut = runMain("relay", "enroll-code", "--state-dir", state, "--ttl", "1h")
	if code != 0 || errOut != "On the device, run (valid 1h0m0s, once): curl -fsSL http://127.0.0.1:8440/install.sh | COMMANDCORE_ENROLL_CODE="+strings.TrimSpace(out)+" sh\n" {
		t.Fatalf("a relay running: exit %d, %q, %q", code, out, errOut)
	}
	// A relay started with --public-url recorded it: devices reach it there,
	// not at the replica's own address; --url still wins.
	st, err = store.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetPublicURL("https://relay.example"); err != nil {
		t.Fatal(err)
	}
	st.Close()
	code, out, errOut = runMain("relay", "enroll-code", "--state-dir", state)
	if code != 0 || errOut != "On the device, run (valid 15m0s, once): curl --proto '=https' -fsSL https://relay.example/install.sh | COMMANDCORE_ENROLL_CODE="+strings.TrimSpace(out)+" sh\n" {
		t.Fatalf("a public URL recorded: exit %d, %q, %q", code, out, errOut)
	}
	code, out, errOut = runMain("relay", "enroll-code", "--state-dir", state, "--url", "https://other.example")
	if code != 0 || errOut != "On the device, run (valid 15m0s, once): curl --proto '=https' -fsSL https://other.example/install.sh | COMMANDCORE_ENROLL_CODE="+strings.TrimSpace(out)+" sh\n" {
		t.Fatalf("--url over the recorded public URL: exit %d, %q, %q", code, out, errOut)
	}
}

// TestLeaveSaysWhatToRunWhereNoRelayAnswers: an uninstall that cannot
// tell the relay the device leaves names the command to run there, with
// the device's ID.
func TestLeaveSaysWhatToRunWhereNoRelayAnswers(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close()
	var out bytes.Buffer
	leave(context.Background(), IO{Out: &out}, &enrollment.Credential{Server: url, DeviceID: "0b1e6c52-6a63-4c36-a2a4-8e4a3c1b7d10", Token: "ccd_x"})
	if got := out.String(); !strings.HasPrefix(got, "the relay was not told that device 0b1e6c52-6a63-4c36-a2a4-8e4a3c1b7d10 leaves (") ||
		!strings.HasSuffix(got, "); there, run: commandcore relay devices revoke 0b1e6c52-6a63-4c36-a2a4-8e4a3c1b7d10\n") {
		t.Fatalf("leave with no relay answering: %q", got)
	}
}
