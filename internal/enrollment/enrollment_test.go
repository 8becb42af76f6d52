package enrollment

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/limits"
)

func sample(t testing.TB) *Credential {
	key, err := authz.NewGrantKey()
	if err != nil {
		t.Fatal(err)
	}
	return &Credential{
		Schema: Schema, Server: "http://127.0.0.1:8440", DeviceID: "2f1c0f9e-8a43-4a55-9d0b-0c3c4b7c9a11",
		Name: "dev1", Token: "ccd_token-marker", Secret: []byte("0123456789abcdef0123456789abcdef"),
		GrantKey: authz.EncodeGrantKey(key.Public().(ed25519.PublicKey)), EnrolledAt: time.Unix(1700000000, 0).UTC(),
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "config")
	if _, err := Load(dir); !errors.Is(err, ErrNotEnrolled) {
		t.Fatalf("no identity: %v", err)
	}
	want := sample(t)
	if err := Save(dir, want); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(Path(dir))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("identity mode: %v %v", fi.Mode(), err)
	}
	if di, _ := os.Stat(dir); di.Mode().Perm() != 0o700 {
		t.Fatalf("config dir mode: %v", di.Mode())
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Token != want.Token || got.DeviceID != want.DeviceID || string(got.Secret) != string(want.Secret) || !got.EnrolledAt.Equal(want.EnrolledAt) {
		t.Fatalf("round trip: %+v", got)
	}
	if _, err := got.PublicKey(); err != nil {
		t.Fatal(err)
	}
}

func TestLoadRefusesSharedFiles(t *testing.T) {
	dir := t.TempDir()
	if err := Save(dir, sample(t)); err != nil {
		t.Fatal(err)
	}
	os.Chmod(Path(dir), 0o640)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "other users") {
		t.Fatalf("group-readable identity: %v", err)
	}
	os.Chmod(Path(dir), 0o600)
	link := t.TempDir()
	os.Symlink(Path(dir), Path(link))
	if _, err := Load(link); err == nil || errors.Is(err, ErrNotEnrolled) {
		t.Fatalf("symlinked identity: %v", err)
	}
}

func TestDecodeIsStrict(t *testing.T) {
	for name, data := range map[string]string{
		"empty":          ``,
		"not an object":  `[]`,
		"unknown field":  `{"schema_version":1,"extra":1}`,
		"wrong schema":   `{"schema_version":2,"server":"s","device_id":"d","token":"t","secret":"MDEyMzQ1Njc4OWFiY2RlZg==","grant_key":"AAAA"}`,
		"missing token":  `{"schema_version":1,"server":"s","device_id":"d","secret":"MDEyMzQ1Njc4OWFiY2RlZg=="}`,
		"bad grant key":  `{"schema_version":1,"server":"s","device_id":"d","token":"t","secret":"MDEyMzQ1Njc4OWFiY2RlZg==","grant_key":"AAAA"}`,
		"trailing data":  `{"schema_version":1} {}`,
		"short secret":   `{"schema_version":1,"server":"s","device_id":"d","token":"t","secret":"AAAA"}`,
		"secret as text": `{"schema_version":1,"server":"s","device_id":"d","token":"t","secret":"not base64!"}`,
	} {
		if _, err := Decode([]byte(data)); err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), "MDEy") {
			t.Errorf("%s: error echoes content: %v", name, err)
		}
	}
	if _, err := Decode([]byte(strings.Repeat(" ", maxBytes+1))); err == nil {
		t.Error("oversized identity accepted")
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"schema_version":1}`))
	f.Add([]byte(`{"schema_version":1,"server":"s","device_id":"d","token":"t","secret":"MDEyMzQ1Njc4OWFiY2RlZg==","grant_key":"AAAA"}`))
	f.Add([]byte(`{"schema_version":1,"server":"s","device_id":"d","token":"t","previous_token":"p","secret":"MDEyMzQ1Njc4OWFiY2RlZg==","grant_key":"AAAA"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		id, err := Decode(data)
		if err != nil {
			return
		}
		if id.Schema != Schema || id.Token == "" || len(id.Secret) < 16 {
			t.Fatalf("accepted an incomplete identity: %+v", id)
		}
		if _, err := id.PublicKey(); err != nil {
			t.Fatal("accepted an identity with an unusable grant key")
		}
	})
}

// TestSaveTokenKeepsTheRestAndRefusesAnotherDevice: a rotated token and
// its predecessor are stored owner-only and the rest of the identity stays;
// after a new enrollment the old device's rotation changes nothing.
func TestSaveTokenKeepsTheRestAndRefusesAnotherDevice(t *testing.T) {
	dir := t.TempDir()
	want := sample(t)
	if err := Save(dir, want); err != nil {
		t.Fatal(err)
	}
	if err := SaveToken(dir, want.DeviceID, "ccd_next", want.Token); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Token != "ccd_next" || got.PreviousToken != want.Token || got.Server != want.Server ||
		got.Name != want.Name || string(got.Secret) != string(want.Secret) || got.GrantKey != want.GrantKey {
		t.Fatalf("after SaveToken: %+v", got)
	}
	if fi, err := os.Stat(Path(dir)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("identity mode after SaveToken: %v %v", fi.Mode(), err)
	}
	before, _ := os.ReadFile(Path(dir))
	if err := SaveToken(dir, "another-device", "ccd_other", "ccd_next"); !errors.Is(err, ErrReplaced) {
		t.Fatalf("SaveToken for another device: %v", err)
	}
	if after, _ := os.ReadFile(Path(dir)); string(after) != string(before) {
		t.Fatal("a refused SaveToken changed the identity")
	}
	if err := SaveToken(t.TempDir(), want.DeviceID, "ccd_x", "ccd_y"); !errors.Is(err, ErrNotEnrolled) {
		t.Fatalf("SaveToken without an identity: %v", err)
	}
}

// TestServersOfAReplicatedServer: a credential names every replica, its
// server first, and the agent takes them all; one that names only its
// server takes that; a list that does not start with the server, or is
// longer than the bound, is refused.
func TestServersOfAReplicatedServer(t *testing.T) {
	one := sample(t)
	if got := one.ServerList(); len(got) != 1 || got[0] != one.Server {
		t.Fatalf("ServerList of one server = %v", got)
	}
	dir := t.TempDir()
	many := sample(t)
	many.Servers = []string{many.Server, "http://127.0.0.1:8441"}
	if err := Save(dir, many); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil || len(got.ServerList()) != 2 || got.ServerList()[1] != "http://127.0.0.1:8441" {
		t.Fatalf("Load of two servers = %+v, %v", got, err)
	}
	for name, servers := range map[string][]string{
		"another first": {"http://127.0.0.1:8441", many.Server},
		"too many":      append([]string{many.Server}, make([]string, limits.MaxServers)...),
	} {
		bad := sample(t)
		bad.Servers = servers
		data, _ := json.Marshal(bad)
		if _, err := Decode(data); err == nil || err.Error() != "identity: servers do not start with its server" {
			t.Errorf("%s: Decode = %v", name, err)
		}
	}
}
