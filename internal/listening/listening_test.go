package listening

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func prober(t *testing.T, root string) *Prober {
	t.Helper()
	p, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// freePort is a TCP port nothing listens on: one the kernel gave a
// listener that is closed again.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

func TestRealListeners(t *testing.T) {
	p := prober(t, "/proc")
	for _, network := range []string{"tcp4", "tcp6"} {
		addr := "127.0.0.1:0"
		if network == "tcp6" {
			addr = "[::1]:0"
		}
		l, err := net.Listen(network, addr)
		if err != nil {
			t.Logf("%s: %v (no such stack here)", network, err)
			continue
		}
		port := l.Addr().(*net.TCPAddr).Port
		if ok, err := p.TCP(port); err != nil || !ok {
			t.Fatalf("%s listener on %d: %v, %v; want listening", network, port, ok, err)
		}
		// A connected client's port is not a listener.
		c, err := net.Dial(network, l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		local := c.LocalAddr().(*net.TCPAddr).Port
		if ok, _ := p.TCP(local); ok {
			t.Fatalf("%s: the client's port %d reads as listening", network, local)
		}
		c.Close()
		l.Close()
		if ok, _ := p.TCP(port); ok {
			t.Fatalf("%s: port %d still listening after close", network, port)
		}
	}
	if ok, err := p.TCP(freePort(t)); err != nil || ok {
		t.Fatalf("a free port: %v, %v", ok, err)
	}
}

// table is a socket table in the kernel's format with one socket on
// port 0x1F90 (8080) in state st.
func table(st string) string {
	return "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		"   0: 0100007F:1F90 00000000:0000 " + st + " 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0\n"
}

func fixture(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "net"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(root, "net", name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestTables(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		port  int
		want  bool
		err   bool
	}{
		{name: "listening on tcp4", files: map[string]string{"tcp": table("0A")}, port: 8080, want: true},
		{name: "listening on tcp6 only", files: map[string]string{"tcp": table("01"), "tcp6": strings.Replace(table("0A"), "0100007F", "00000000000000000000000001000000", 1)}, port: 8080, want: true},
		{name: "established is not listening", files: map[string]string{"tcp": table("01"), "tcp6": ""}, port: 8080},
		{name: "time-wait is not listening", files: map[string]string{"tcp": table("06")}, port: 8080},
		{name: "another port", files: map[string]string{"tcp": table("0A")}, port: 8081},
		{name: "no tables (no network stack)", files: nil, port: 8080},
		{name: "a malformed table", files: map[string]string{"tcp": table("0A") + "   1: garbage\n"}, port: 8080, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, err := prober(t, fixture(t, tc.files)).TCP(tc.port)
			if (err != nil) != tc.err {
				t.Fatalf("error %v, want error %v", err, tc.err)
			}
			if err == nil && ok != tc.want {
				t.Fatalf("listening %v, want %v", ok, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "garbage") {
				t.Fatalf("the error repeats the table's content: %v", err)
			}
		})
	}
}

func TestNewRefusesAMissingRoot(t *testing.T) {
	if _, err := New(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Fatal("New on a missing root succeeded")
	}
}
