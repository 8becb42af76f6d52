package install_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The relay's system unit and its example flags, as the packages install
// them (packaging/nfpm.yaml).
const (
	relayUnitFile = "../../install/commandcore-relay.service"
	relayEnvFile  = "../../install/relay.env"
)

// maxRelayExposure is the highest `systemd-analyze security` exposure the
// relay's unit may have (0 is fully locked down, 10 is none at all).
const maxRelayExposure = 2.0

// unitFile is a unit file's settings: section, then key, then every value
// the key was given, in order.
type unitFile map[string]map[string][]string

func parseUnit(t *testing.T, path string) unitFile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unitFile{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			section = line[1 : len(line)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
		default:
			key, value, ok := strings.Cut(line, "=")
			if !ok || section == "" || strings.HasSuffix(line, `\`) {
				t.Fatalf("%s:%d: not a setting this test reads: %q", path, n, line)
			}
			key = strings.TrimSpace(key)
			u[section][key] = append(u[section][key], strings.TrimSpace(value))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestRelayUnit pins what the relay's system unit promises: its own
// dynamic user with a private state directory, the flags from
// /etc/commandcore/relay.env, the one capability to bind port 443, and the
// sandbox around it, which nothing in the unit widens.
func TestRelayUnit(t *testing.T) {
	u := parseUnit(t, relayUnitFile)
	svc := u["Service"]
	for key, want := range map[string]string{
		"Type":                    "exec",
		"ExecStart":               "/usr/bin/commandcore relay serve --state-dir /var/lib/commandcore-relay $COMMANDCORE_RELAY_ARGS",
		"EnvironmentFile":         "/etc/commandcore/relay.env",
		"Restart":                 "on-failure",
		"DynamicUser":             "yes",
		"User":                    "commandcore-relay",
		"StateDirectory":          "commandcore-relay",
		"StateDirectoryMode":      "0700",
		"UMask":                   "0077",
		"AmbientCapabilities":     "CAP_NET_BIND_SERVICE",
		"CapabilityBoundingSet":   "CAP_NET_BIND_SERVICE",
		"NoNewPrivileges":         "yes",
		"ProtectSystem":           "strict",
		"ProtectHome":             "yes",
		"PrivateTmp":              "yes",
		"PrivateDevices":          "yes",
		"PrivateMounts":           "yes",
		"ProtectKernelTunables":   "yes",
		"ProtectKernelModules":    "yes",
		"ProtectKernelLogs":       "yes",
		"ProtectControlGroups":    "yes",
		"ProtectClock":            "yes",
		"ProtectHostname":         "yes",
		"ProtectProc":             "invisible",
		"ProcSubset":              "pid",
		"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
		"RestrictNamespaces":      "yes",
		"RestrictRealtime":        "yes",
		"RestrictSUIDSGID":        "yes",
		"LockPersonality":         "yes",
		"MemoryDenyWriteExecute":  "yes",
		"SystemCallArchitectures": "native",
	} {
		if got := svc[key]; !slices.Equal(got, []string{want}) {
			t.Errorf("[Service] %s=%q, want exactly %q", key, got, want)
		}
	}
	// Not PrivateUsers=: in a user namespace CAP_NET_BIND_SERVICE no
	// longer binds the host's port 443. Nothing else widens what the
	// dynamic user reaches: no groups, no writable paths beyond the state
	// directory, no command run as root.
	for _, key := range []string{
		"PrivateUsers", "SupplementaryGroups", "Group", "ReadWritePaths",
		"PermissionsStartOnly", "ExecStartPre", "ExecStartPost", "ExecStopPost",
		"RuntimeDirectory", "CacheDirectory", "LogsDirectory", "ConfigurationDirectory",
	} {
		if got, ok := svc[key]; ok {
			t.Errorf("[Service] %s=%q: the unit must not set it", key, got)
		}
	}
	// The filter is the allow list, then what it takes back.
	if got, want := svc["SystemCallFilter"], []string{"@system-service", "~@privileged @resources"}; !slices.Equal(got, want) {
		t.Errorf("[Service] SystemCallFilter=%q, want %q", got, want)
	}
	// Restart=on-failure gives up on a relay that cannot start.
	for key, want := range map[string]string{"StartLimitIntervalSec": "60", "StartLimitBurst": "5"} {
		if got := u["Unit"][key]; !slices.Equal(got, []string{want}) {
			t.Errorf("[Unit] %s=%q, want exactly %q", key, got, want)
		}
	}
	if got := u["Install"]["WantedBy"]; !slices.Equal(got, []string{"multi-user.target"}) {
		t.Errorf("[Install] WantedBy=%q, want multi-user.target", got)
	}
}

// TestRelayUnitExposure: systemd's own rating of the unit's sandbox stays
// at or below maxRelayExposure.
func TestRelayUnitExposure(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Fatal("systemd-analyze is needed to rate the relay's unit:", err)
	}
	path, err := filepath.Abs(relayUnitFile)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("systemd-analyze", "security", "--offline=yes", "--no-pager", path).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security --offline=yes %s: %v\n%s", path, err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for commandcore-relay\.service: ([0-9]+(?:\.[0-9]+)?)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no overall exposure level in:\n%s", out)
	}
	level, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	if level > maxRelayExposure {
		t.Fatalf("exposure %.1f, want at most %.1f:\n%s", level, maxRelayExposure, out)
	}
	t.Logf("systemd-analyze security: exposure %.1f", level)
}

// TestRelayEnv: the example flags default to the loopback listener a TLS
// proxy on the same machine forwards to, set nothing else, and every flag
// the file's comments suggest is one `relay serve` takes.
func TestRelayEnv(t *testing.T) {
	data, err := os.ReadFile(relayEnvFile)
	if err != nil {
		t.Fatal(err)
	}
	var set []string
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line != "" && line[0] != '#' {
			set = append(set, line)
		}
	}
	if want := []string{`COMMANDCORE_RELAY_ARGS="--listen 127.0.0.1:8440"`}; !slices.Equal(set, want) {
		t.Errorf("relay.env sets %q, want %q", set, want)
	}
	help, err := exec.Command(bin, "relay", "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("relay serve --help: %v\n%s", err, help)
	}
	flags := regexp.MustCompile(`--[a-z][a-z-]+`).FindAllString(string(data), -1)
	if len(flags) < 8 {
		t.Fatalf("relay.env names %d flags, want its examples' (--listen, --public-url, --tls-cert, --database, ...)", len(flags))
	}
	for _, f := range flags {
		if f == "--state-dir" || f == "--help" {
			continue
		}
		if !regexp.MustCompile(`(?m)^\s+(-[a-z], )?` + regexp.QuoteMeta(f) + `\b`).Match(help) {
			t.Errorf("relay.env names %s, which relay serve does not take", f)
		}
	}
}
