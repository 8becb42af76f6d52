package store

import (
	"github.com/commandcore/commandcore/internal/isolation"

	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
)

func signInT(t *testing.T, s *Store, admin string) (code, session string) {
	t.Helper()
	code, err := s.CreateSignIn(admin, limits.SignInCodeTTL, t0)
	if err != nil {
		t.Fatal(err)
	}
	who, session, err := s.SignIn(code, t0)
	if err != nil || who != admin {
		t.Fatalf("SignIn = %q, %v; want %q", who, err, admin)
	}
	return code, session
}

// TestSignInCodeWorksOnce: a printed code signs its admin in once, in any
// letter case; a second use, a wrong code and an expired one get the one
// refusal, and every session is new.
func TestSignInCodeWorksOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		code, err := s.CreateSignIn("alice", limits.SignInCodeTTL, t0)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(code, signInPrefix) || len(code) != len(signInPrefix)+signInCodeLen {
			t.Fatalf("code %q is not ccA- and 20 characters", code)
		}
		who, first, err := s.SignIn(strings.ToLower(code), t0)
		if err != nil || who != "alice" {
			t.Fatalf("first use: %q, %v", who, err)
		}
		_, _, err = s.SignIn(code, t0)
		wantCode(t, err, errcode.PermissionDenied)
		refusal := err.Error()
		second, _ := s.CreateSignIn("alice", limits.SignInCodeTTL, t0)
		if _, again, err := s.SignIn(second, t0); err != nil || again == first {
			t.Fatalf("a second code: session %q (first %q), %v", again, first, err)
		}
		expiring, _ := s.CreateSignIn("alice", limits.SignInCodeTTL, t0)
		for name, c := range map[string]string{
			"used":      code,
			"wrong":     signInPrefix + strings.Repeat("A", signInCodeLen),
			"malformed": "ccA-short",
			"empty":     "",
		} {
			if _, _, err := s.SignIn(c, t0); err == nil || err.Error() != refusal {
				t.Errorf("%s code: %v, want the uniform refusal %q", name, err, refusal)
			}
		}
		if _, _, err := s.SignIn(expiring, t0.Add(limits.SignInCodeTTL)); err == nil || err.Error() != refusal {
			t.Errorf("a code at its expiry: %v", err)
		}
		if _, _, err := s.SignIn(expiring, t0.Add(limits.SignInCodeTTL-time.Second)); err != nil {
			t.Errorf("a code a second before its expiry: %v", err)
		}
		for _, bad := range []string{"", "a b", "admin:x", strings.Repeat("a", MaxNameBytes+1)} {
			_, err := s.CreateSignIn(bad, limits.SignInCodeTTL, t0)
			wantCode(t, err, errcode.InvalidArgument)
		}
	})
}

// TestSessionsIdleOutAndEnd: a session lives while used within the idle
// bound, ends at sign-out, and dies with its admin's revocation, as do
// the admin's unused codes; a new code makes a revoked admin whole again,
// without their old sessions.
func TestSessionsIdleOutAndEnd(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		_, sess := signInT(t, s, "alice")
		at := t0
		for range 3 {
			at = at.Add(limits.PanelSessionIdle - time.Minute)
			p, err := s.AuthSession(sess, at)
			if err != nil || p.Admin != "alice" || !p.CreatedAt.Equal(t0.Truncate(0)) {
				t.Fatalf("a session used within the idle bound: %+v, %v", p, err)
			}
		}
		_, err := s.AuthSession(sess, at.Add(limits.PanelSessionIdle))
		wantCode(t, err, errcode.PermissionDenied)

		_, out := signInT(t, s, "alice")
		if err := s.EndSession(out); err != nil {
			t.Fatal(err)
		}
		_, err = s.AuthSession(out, t0)
		wantCode(t, err, errcode.PermissionDenied)
		if err := s.EndSession(out); err != nil {
			t.Errorf("ending an ended session: %v", err)
		}

		_, live := signInT(t, s, "alice")
		_, bobs := signInT(t, s, "bob")
		unused, _ := s.CreateSignIn("alice", limits.SignInCodeTTL, t0)
		if err := s.RevokeAdmin("alice", t0); err != nil {
			t.Fatal(err)
		}
		_, err = s.AuthSession(live, t0)
		wantCode(t, err, errcode.PermissionDenied)
		_, _, err = s.SignIn(unused, t0)
		wantCode(t, err, errcode.PermissionDenied)
		if _, err := s.AuthSession(bobs, t0); err != nil {
			t.Errorf("another admin's session after alice's revocation: %v", err)
		}
		wantCode(t, s.RevokeAdmin("carol", t0), errcode.NotFound)
		if err := s.RevokeAdmin("alice", t0.Add(time.Hour)); err != nil {
			t.Errorf("revoking again: %v", err)
		}
		admins, err := s.Admins(t0)
		if err != nil || len(admins) != 2 || admins[0].Name != "alice" || admins[0].RevokedAt == nil ||
			!admins[0].RevokedAt.Equal(t0.Truncate(0)) || admins[1].Name != "bob" || admins[1].Sessions != 1 {
			t.Fatalf("Admins = %+v, %v", admins, err)
		}
		_, again := signInT(t, s, "alice")
		if _, err := s.AuthSession(again, t0); err != nil {
			t.Errorf("alice signed in again: %v", err)
		}
		_, err = s.AuthSession(live, t0)
		wantCode(t, err, errcode.PermissionDenied)
		for _, bad := range []string{"", "ccs_", "ccs_" + strings.Repeat("A", 43), "x" + live[1:]} {
			_, err := s.AuthSession(bad, t0)
			wantCode(t, err, errcode.PermissionDenied)
		}
	})
}

// TestSessionsEndSevenDaysAfterSignIn: a session used all along still
// ends limits.PanelSessionMax after sign-in, and is not counted open
// then; a live page's re-check (SessionLive) sees what AuthSession sees
// but is no use: it keeps no idle session alive.
func TestSessionsEndSevenDaysAfterSignIn(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		_, sess := signInT(t, s, "alice")
		last := t0.Add(limits.PanelSessionMax - time.Second)
		for at := t0; at.Before(last); at = at.Add(limits.PanelSessionIdle / 2) {
			if _, err := s.AuthSession(sess, at); err != nil {
				t.Fatalf("used every 6 h, at %s: %v", at.Sub(t0), err)
			}
		}
		if _, err := s.AuthSession(sess, last); err != nil {
			t.Fatalf("a second before the bound: %v", err)
		}
		if err := s.SessionLive(sess, last); err != nil {
			t.Fatalf("re-checked a second before the bound: %v", err)
		}
		if admins, err := s.Admins(last); err != nil || admins[0].Sessions != 1 {
			t.Fatalf("Admins before the bound = %+v, %v", admins, err)
		}
		end := t0.Add(limits.PanelSessionMax)
		_, err := s.AuthSession(sess, end)
		wantCode(t, err, errcode.PermissionDenied)
		wantCode(t, s.SessionLive(sess, end), errcode.PermissionDenied)
		if admins, err := s.Admins(end); err != nil || admins[0].Sessions != 0 {
			t.Fatalf("Admins at the bound = %+v, %v", admins, err)
		}

		_, watched := signInT(t, s, "bob")
		for at := t0; at.Before(t0.Add(limits.PanelSessionIdle)); at = at.Add(time.Hour) {
			if err := s.SessionLive(watched, at); err != nil {
				t.Fatalf("re-checked at %s: %v", at.Sub(t0), err)
			}
		}
		wantCode(t, s.SessionLive(watched, t0.Add(limits.PanelSessionIdle)), errcode.PermissionDenied)
		_, err = s.AuthSession(watched, t0.Add(limits.PanelSessionIdle))
		wantCode(t, err, errcode.PermissionDenied)
		if err := s.RevokeAdmin("alice", t0); err != nil {
			t.Fatal(err)
		}
		wantCode(t, s.SessionLive(sess, t0), errcode.PermissionDenied)
		wantCode(t, s.SessionLive("ccs_x", t0), errcode.PermissionDenied)
	})
}

// TestRevocationEndsSessionsOnEveryReplica: an admin revoked through one
// store (the CLI) is refused by the other (a replica) at its next
// request, round after round.
func TestRevocationEndsSessionsOnEveryReplica(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		place := newPlace(t)
		cli, relay := openT(t, place), openT(t, place)
		for round := range raceRounds {
			_, sess := signInT(t, relay, "alice")
			if _, err := relay.AuthSession(sess, t0); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if err := cli.RevokeAdmin("alice", t0); err != nil {
				t.Fatal(err)
			}
			if _, err := relay.AuthSession(sess, t0); !errcode.Is(err, errcode.PermissionDenied) {
				t.Fatalf("round %d: a revoked admin's session checks as %v", round, err)
			}
		}
	})
}

// TestSignInRaceOneWinner: one code redeemed at once on two replicas opens
// one session.
func TestSignInRaceOneWinner(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		place := newPlace(t)
		stores := [2]*Store{openT(t, place), openT(t, place)}
		for round := range raceRounds {
			code, err := stores[0].CreateSignIn("alice", limits.SignInCodeTTL, t0)
			if err != nil {
				t.Fatal(err)
			}
			var errs [2]error
			race(2, func(i int) { _, _, errs[i] = stores[i].SignIn(code, t0) })
			if (errs[0] == nil) == (errs[1] == nil) {
				t.Fatalf("round %d: %v", round, errs)
			}
		}
	})
}

// TestAgentVersionIsTheHoldersAndPrintable: the version a link reports is
// kept while its replica holds the link, shown as "unknown" when it could
// upset a page or a terminal, and cleared when the link is taken again.
func TestAgentVersionIsTheHoldersAndPrintable(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		dev, _ := enrollT(t, s, "", "box")
		r := Replica{ID: "r1", Name: "r1", Address: "http://127.0.0.1:1"}
		if err := s.JoinReplica(r, t0); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.TakeLink(dev.ID, "r1", "", t0); err != nil || !ok {
			t.Fatalf("TakeLink: %v, %v", ok, err)
		}
		version := func() *Device {
			t.Helper()
			d, err := s.FindDevice(dev.ID)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		if d := version(); d.LinkedAt == nil || !d.LinkedAt.Equal(t0.Truncate(0)) || d.AgentVersion != "" {
			t.Fatalf("after TakeLink: linked %v, version %q", d.LinkedAt, d.AgentVersion)
		}
		for in, want := range map[string]string{
			"1.2.3":                 "1.2.3",
			"v0.9.0-dev+abc":        "v0.9.0-dev+abc",
			"<script>\x1b[2J":       "unknown",
			"":                      "unknown",
			strings.Repeat("9", 65): "unknown",
			strings.Repeat("9", 64): strings.Repeat("9", 64),
			"caf\u00e9":             "unknown",
		} {
			if err := s.NoteAgent(dev.ID, "r1", AgentNote{Version: in}); err != nil {
				t.Fatal(err)
			}
			if got := version().AgentVersion; got != want {
				t.Errorf("NoteAgent(%q) shows %q, want %q", in, got, want)
			}
		}
		if err := s.NoteAgent(dev.ID, "r2", AgentNote{Version: "6.6.6"}); err != nil {
			t.Fatal(err)
		}
		if got := version().AgentVersion; got == "6.6.6" {
			t.Error("a replica that does not hold the link recorded a version")
		}
	})
}

// TestBindsCallsIsTheCurrentLinksAgents: whether grants for a device are
// bound to their call follows what the agent of its current link said,
// and a new link forgets it until its agent says it again (an agent put
// back to an earlier build would refuse bound grants).
func TestBindsCallsIsTheCurrentLinksAgents(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		dev, _ := enrollT(t, s, "", "box")
		for _, id := range []string{"r1", "r2"} {
			if err := s.JoinReplica(Replica{ID: id, Name: id, Address: "http://127.0.0.1:1", NATS: true}, t0); err != nil {
				t.Fatal(err)
			}
		}
		binds := func() bool {
			t.Helper()
			d, err := s.FindDevice(dev.ID)
			if err != nil {
				t.Fatal(err)
			}
			return d.BindsCalls
		}
		if ok, err := s.TakeLink(dev.ID, "r1", "", t0); err != nil || !ok {
			t.Fatalf("TakeLink: %v, %v", ok, err)
		}
		if binds() {
			t.Fatal("a device whose agent said nothing binds calls")
		}
		if err := s.NoteAgent(dev.ID, "r2", AgentNote{Version: "1.0", BindsCalls: true}); err != nil {
			t.Fatal(err)
		}
		if binds() {
			t.Fatal("a replica that does not hold the link recorded the capability")
		}
		if err := s.NoteAgent(dev.ID, "r1", AgentNote{Version: "1.0", Offered: "1.1", BindsCalls: true}); err != nil {
			t.Fatal(err)
		}
		if !binds() {
			t.Fatal("the holder's agent said it binds calls; the device does not")
		}
		if d, _ := s.FindDevice(dev.ID); d.NumbersGrants {
			t.Fatal("an agent that said nothing of numbered grants takes them")
		}
		if err := s.NoteAgent(dev.ID, "r1", AgentNote{Version: "1.0", BindsCalls: true, NumbersGrants: true}); err != nil {
			t.Fatal(err)
		}
		if d, _ := s.FindDevice(dev.ID); !d.NumbersGrants || !d.BindsCalls {
			t.Fatalf("the holder's agent said it takes numbered grants; the device: numbers %v binds %v", d.NumbersGrants, d.BindsCalls)
		}
		if err := s.ReleaseLink(dev.ID, "r1", t0); err != nil {
			t.Fatal(err)
		}
		if ok, err := s.TakeLink(dev.ID, "r2", "", t0.Add(time.Second)); err != nil || !ok {
			t.Fatalf("TakeLink r2: %v, %v", ok, err)
		}
		if d, _ := s.FindDevice(dev.ID); binds() || d.NumbersGrants {
			t.Fatal("a new link kept the last agent's capabilities")
		}
	})
}

// TestAuditPageFiltersAndPages: every filter narrows exactly, pages are
// newest first and continue where the last ended, and the counts of the
// last hour count calls and failures.
func TestAuditPageFiltersAndPages(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		var entries []AuditEntry
		for i := range 30 {
			e := AuditEntry{At: t0.Add(time.Duration(i) * time.Minute), Principal: []string{"alice", "bob", "admin:carol"}[i%3],
				Device: "box", Tool: []string{"process.start", "files.read"}[i%2], Outcome: AuditOK}
			if i%5 == 0 {
				e.Outcome, e.Code = AuditFailed, "not_found"
			}
			if i%10 == 0 {
				e.Job = "5fa7e0b2-8c1d-4e3f-9a6b-0d2c4e6f8a1b"
			}
			entries = append(entries, e)
		}
		if err := s.AppendAudit(entries, t0.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		page, err := s.AuditPage(AuditFilter{}, 7)
		if err != nil || len(page) != 7 || page[0].Seq != 30 || page[6].Seq != 24 {
			t.Fatalf("first page: %d entries, %v", len(page), err)
		}
		next, err := s.AuditPage(AuditFilter{Before: page[6].Seq}, 7)
		if err != nil || len(next) != 7 || next[0].Seq != 23 {
			t.Fatalf("second page: %+v, %v", next, err)
		}
		count := func(f AuditFilter) int {
			t.Helper()
			p, err := s.AuditPage(f, 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range p {
				if f.Principal != "" && e.Principal != f.Principal || f.Tool != "" && e.Tool != f.Tool ||
					f.Outcome != "" && e.Outcome != f.Outcome || f.Device != "" && e.Device != f.Device || f.Job != "" && e.Job != f.Job {
					t.Fatalf("filter %+v let %+v through", f, e)
				}
			}
			return len(p)
		}
		for f, want := range map[AuditFilter]int{
			{Principal: "admin:carol"}:                    10,
			{Tool: "files.read"}:                          15,
			{Outcome: AuditFailed}:                        6,
			{Principal: "alice", Tool: "process.start"}:   5,
			{Device: "box"}:                               30,
			{Device: "other"}:                             0,
			{Job: "5fa7e0b2-8c1d-4e3f-9a6b-0d2c4e6f8a1b"}: 3,
			{Principal: "bob", Before: 20}:                6,
			{Principal: "alice", Outcome: AuditFailed}:    2,
		} {
			if got := count(f); got != want {
				t.Errorf("filter %+v: %d entries, want %d", f, got, want)
			}
		}
		_, err = s.AuditPage(AuditFilter{}, 0)
		wantCode(t, err, errcode.InvalidArgument)
		calls, failed, err := s.AuditCounts(t0.Add(20 * time.Minute))
		if err != nil || calls != 10 || failed != 2 {
			t.Fatalf("AuditCounts since minute 20: %d calls, %d failed, %v; want 10, 2", calls, failed, err)
		}
	})
}

// TestUpdateOfferIsTheCurrentLinks: the version offered to a device's
// agent is recorded by the replica holding its link, refused when it is
// not printable, and forgotten by the next link until its relay offers
// again.
func TestUpdateOfferIsTheCurrentLinks(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		dev, _ := enrollT(t, s, "", "box")
		if err := s.JoinReplica(Replica{ID: "r1", Name: "r1", Address: "http://127.0.0.1:1", NATS: true}, t0); err != nil {
			t.Fatal(err)
		}
		offer := func() string {
			t.Helper()
			d, err := s.FindDevice(dev.ID)
			if err != nil {
				t.Fatal(err)
			}
			return d.UpdateOffer
		}
		if ok, err := s.TakeLink(dev.ID, "r1", "", t0); err != nil || !ok {
			t.Fatalf("TakeLink: %v, %v", ok, err)
		}
		if err := s.NoteAgent(dev.ID, "r1", AgentNote{Version: "1.0.0", Offered: "1.1.0"}); err != nil {
			t.Fatal(err)
		}
		if got := offer(); got != "1.1.0" {
			t.Fatalf("offer %q, want 1.1.0", got)
		}
		s.NoteAgent(dev.ID, "r1", AgentNote{Version: "1.0.0", Offered: "<b>\x1b"})
		if got := offer(); got != "" {
			t.Errorf("an unprintable offer was recorded: %q", got)
		}
		s.NoteAgent(dev.ID, "r1", AgentNote{Version: "1.0.0", Offered: "1.1.0"})
		if err := s.ReleaseLink(dev.ID, "r1", t0); err != nil {
			t.Fatal(err)
		}
		if got := offer(); got != "1.1.0" {
			t.Errorf("the last link's offer is gone once it ended: %q", got)
		}
		if ok, err := s.TakeLink(dev.ID, "r1", "", t0.Add(time.Second)); err != nil || !ok {
			t.Fatalf("TakeLink: %v, %v", ok, err)
		}
		if got := offer(); got != "" {
			t.Errorf("a new link kept the last one's offer: %q", got)
		}
	})
}

// TestIsolationIsTheCurrentLinksAgents: what an agent said of how its jobs
// are kept from it is kept while its link is held, words outside their
// sets as unknown, and a new link forgets it until its agent says it
// again, on both engines.
func TestIsolationIsTheCurrentLinksAgents(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		dev, _ := enrollT(t, s, "", "box")
		for _, id := range []string{"r1", "r2"} {
			if err := s.JoinReplica(Replica{ID: id, Name: id, Address: "http://127.0.0.1:1", NATS: true}, t0); err != nil {
				t.Fatal(err)
			}
		}
		said := func() isolation.Report {
			t.Helper()
			d, err := s.FindDevice(dev.ID)
			if err != nil {
				t.Fatal(err)
			}
			return d.Isolation
		}
		if ok, err := s.TakeLink(dev.ID, "r1", "", t0); err != nil || !ok {
			t.Fatalf("TakeLink: %v, %v", ok, err)
		}
		held := isolation.Report{AgentBinary: isolation.BinaryWritable, UserManager: isolation.ManagerCutRefused}
		if err := s.NoteAgent(dev.ID, "r2", AgentNote{Version: "1.0", Isolation: held}); err != nil {
			t.Fatal(err)
		}
		if got := said(); got != (isolation.Report{}) {
			t.Fatalf("a replica that does not hold the link recorded %+v", got)
		}
		if err := s.NoteAgent(dev.ID, "r1", AgentNote{Version: "1.0", Isolation: held}); err != nil {
			t.Fatal(err)
		}
		if got := said(); got != held {
			t.Fatalf("recorded %+v, want %+v", got, held)
		}
		if err := s.NoteAgent(dev.ID, "r1", AgentNote{Version: "1.0", Isolation: isolation.Report{AgentBinary: "<b>rw</b>", UserManager: isolation.ManagerCutOff}}); err != nil {
			t.Fatal(err)
		}
		if got := said(); got != (isolation.Report{UserManager: isolation.ManagerCutOff}) {
			t.Fatalf("a word outside its set recorded: %+v", got)
		}
		if ok, err := s.TakeLink(dev.ID, "r2", "r1", t0.Add(time.Second)); err != nil || !ok {
			t.Fatalf("TakeLink r2: %v, %v", ok, err)
		}
		if got := said(); got != (isolation.Report{}) {
			t.Fatalf("a new link kept the last agent's words: %+v", got)
		}
	})
}
