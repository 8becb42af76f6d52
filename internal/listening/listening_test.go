package listening

import (
	"errors"
	"net"
	"os"
	"os/exec"
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

// self is the pids of this process alone; others, of a process that holds
// no socket.
func self() ([]int, error) { return []int{os.Getpid()}, nil }

func others(t *testing.T) func() ([]int, error) {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return func() ([]int, error) { return []int{os.Getpid() + 1<<22, cmd.Process.Pid}, nil }
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
		if ok, err := p.TCP(port, self); err != nil || !ok {
			t.Fatalf("%s listener on %d: %v, %v; want listening", network, port, ok, err)
		}
		// Another program's listener is not theirs.
		if ok, err := p.TCP(port, others(t)); err != nil || ok {
			t.Fatalf("%s listener on %d held by another process: %v, %v; want not theirs", network, port, ok, err)
		}
		// A connected client's port is not a listener.
		c, err := net.Dial(network, l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		local := c.LocalAddr().(*net.TCPAddr).Port
		if ok, _ := p.TCP(local, self); ok {
			t.Fatalf("%s: the client's port %d reads as listening", network, local)
		}
		c.Close()
		l.Close()
		if ok, _ := p.TCP(port, self); ok {
			t.Fatalf("%s: port %d still listening after close", network, port)
		}
	}
	asked := false
	if ok, err := p.TCP(freePort(t), func() ([]int, error) { asked = true; return nil, nil }); err != nil || ok || asked {
		t.Fatalf("a free port: %v, %v; processes asked for: %v", ok, err, asked)
	}
}

// TestTheProcessesCannotBeListed: the caller's failure to say which
// processes are theirs is the answer's error.
func TestTheProcessesCannotBeListed(t *testing.T) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	boom := errors.New("boom")
	if _, err := prober(t, "/proc").TCP(l.Addr().(*net.TCPAddr).Port, func() ([]int, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("%v, want the caller's error", err)
	}
}

// table is a socket table in the kernel's format with one socket on
// port 0x1F90 (8080) in state st.
func table(st string) string {
	return "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		"   0: 0100007F:1F90 00000000:0000 " + st + " 00000000:00000000 00:00000000 00000000     0        0 12345 1 0000000000000000 100 0 0 10 0\n"
}

// fixture is a proc root with the socket tables files and process 100,
// whose descriptors are a pipe, a socket of another inode and, when holds,
// socket 12345.
func fixture(t *testing.T, files map[string]string, holds bool) string {
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
	fd := filepath.Join(root, "100", "fd")
	if err := os.MkdirAll(fd, 0o700); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{"0": "pipe:[12345]", "1": "socket:[99]", "2": "socket:[x]"}
	if holds {
		links["3"] = "socket:[12345]"
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(fd, name)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func pids(ps ...int) func() ([]int, error) { return func() ([]int, error) { return ps, nil } }

func TestTables(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		port  int
		want  bool
		err   bool
	}{
		{name: "listening on tcp4", files: map[string]string{"tcp": table("0A")}, port: 8080, want: true},
		{name: "listening on tcp6 only", files: map[string]string{"tcp": table("01"), "tcp6": tcp6(table("0A"))}, port: 8080, want: true},
		{name: "no tcp4 table, listening on tcp6", files: map[string]string{"tcp6": tcp6(table("0A"))}, port: 8080, want: true},
		{name: "established is not listening", files: map[string]string{"tcp": table("01"), "tcp6": ""}, port: 8080},
		{name: "time-wait is not listening", files: map[string]string{"tcp": table("06")}, port: 8080},
		{name: "another port", files: map[string]string{"tcp": table("0A")}, port: 8081},
		{name: "no tables (no network stack)", files: nil, port: 8080},
		{name: "a malformed table", files: map[string]string{"tcp": table("0A") + "   1: garbage\n"}, port: 8080, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := prober(t, fixture(t, tc.files, true))
			ok, err := p.TCP(tc.port, pids(100))
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

func tcp6(table string) string {
	return strings.Replace(table, "0100007F", "00000000000000000000000001000000", 1)
}

// TestOnlyTheirOwnListener: a listener is theirs only when one of their
// processes holds its socket; processes that are gone hold none.
func TestOnlyTheirOwnListener(t *testing.T) {
	files := map[string]string{"tcp": table("0A")}
	for _, tc := range []struct {
		name  string
		holds bool
		pids  []int
		want  bool
	}{
		{"held by their process", true, []int{100}, true},
		{"held after a process that is gone", true, []int{7, 100}, true},
		{"their process holds other sockets", false, []int{100}, false},
		{"no process of theirs", true, nil, false},
		{"only processes that are gone", true, []int{7}, false},
	} {
		ok, err := prober(t, fixture(t, files, tc.holds)).TCP(8080, pids(tc.pids...))
		if err != nil || ok != tc.want {
			t.Errorf("%s: %v, %v; want %v", tc.name, ok, err, tc.want)
		}
	}
}

func TestNewRefusesAMissingRoot(t *testing.T) {
	if _, err := New(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Fatal("New on a missing root succeeded")
	}
}
