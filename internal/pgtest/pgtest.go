// Package pgtest runs a throw-away PostgreSQL server for tests: initdb into
// a temporary directory, the server on a private Unix socket there (no TCP
// port), as the postgres user when the tests run as root (PostgreSQL
// refuses to run as root), killed with its test process and removed on
// Stop. It takes the binaries of Debian's postgresql package
// (/usr/lib/postgresql/N/bin, newest N) or those on PATH; no system service
// is assumed.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoPostgres is returned when no PostgreSQL server binaries are found.
var ErrNoPostgres = errors.New("pgtest: no PostgreSQL server binaries (install Debian's postgresql package)")

// readyWithin bounds how long a start waits for the server to accept
// connections.
const readyWithin = 30 * time.Second

// Cluster is one running throw-away server.
type Cluster struct {
	dir  string // holds data/ and the socket
	bin  string
	cred *syscall.Credential
	cmd  *exec.Cmd
	done chan struct{}
}

// BinDir returns the directory of the newest PostgreSQL server binaries.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return majorOf(b) - majorOf(a) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", ErrNoPostgres
}

func majorOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// Start makes a new cluster and starts its server.
func Start() (*Cluster, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin}
	if os.Geteuid() == 0 {
		if c.cred, err = postgresUser(); err != nil {
			return nil, err
		}
	}
	// Not under the test's TempDir: its parents are owner-only, and the
	// postgres user must reach the directory.
	if c.dir, err = os.MkdirTemp("", "pgtest-"); err != nil {
		return nil, err
	}
	if err := c.own(c.dir); err != nil {
		c.remove()
		return nil, err
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", c.data(), "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	if out, err := c.run(initdb); err != nil {
		c.remove()
		return nil, fmt.Errorf("pgtest: initdb: %w: %s", err, out)
	}
	if err := c.StartServer(); err != nil {
		c.remove()
		return nil, err
	}
	return c, nil
}

// StartServer starts the server of a stopped cluster and waits until it
// accepts connections.
func (c *Cluster) StartServer() error {
	c.cmd = exec.Command(filepath.Join(c.bin, "postgres"), "-D", c.data(),
		"-c", "listen_addresses=", "-c", "unix_socket_directories="+c.dir,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=300", "-c", "shared_buffers=16MB")
	// SIGQUIT is PostgreSQL's immediate shutdown: a test binary that dies
	// takes its server with it.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGQUIT}
	log, err := os.Create(filepath.Join(c.dir, "server.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	c.cmd.Stdout, c.cmd.Stderr = log, log
	if err := c.cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	c.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(c.cmd, c.done)
	deadline := time.Now().Add(readyWithin)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err == nil {
			conn.Close(ctx)
			cancel()
			return nil
		}
		cancel()
		select {
		case <-c.done:
			return fmt.Errorf("pgtest: postgres exited: %s", c.Log())
		default:
		}
		if time.Now().After(deadline) {
			c.StopServer()
			return fmt.Errorf("pgtest: postgres not ready after %s: %w", readyWithin, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// StopServer shuts the server down (fast: open sessions are ended) and
// waits for it; the cluster's data stays for StartServer.
func (c *Cluster) StopServer() {
	if c.cmd == nil {
		return
	}
	c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.done:
	case <-time.After(readyWithin):
		c.cmd.Process.Kill()
		<-c.done
	}
	c.cmd = nil
}

// Stop stops the server and removes the cluster.
func (c *Cluster) Stop() {
	c.StopServer()
	c.remove()
}

// URL is the connection URL of database name on this server.
func (c *Cluster) URL(name string) string {
	q := url.Values{"host": {c.dir}, "user": {"postgres"}, "sslmode": {"disable"}}
	return (&url.URL{Scheme: "postgres", Path: "/" + name, RawQuery: q.Encode()}).String()
}

// CreateDatabase makes a new empty database and returns its URL.
func (c *Cluster) CreateDatabase(name string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), readyWithin)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("pgtest: create database: %w", err)
	}
	return c.URL(name), nil
}

// Log is what the server printed.
func (c *Cluster) Log() string {
	b, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
	return strings.TrimSpace(string(b))
}

func (c *Cluster) data() string { return filepath.Join(c.dir, "data") }

func (c *Cluster) remove() { os.RemoveAll(c.dir) }

// own gives path to the user the server runs as.
func (c *Cluster) own(path string) error {
	if c.cred == nil {
		return nil
	}
	return os.Chown(path, int(c.cred.Uid), int(c.cred.Gid))
}

func (c *Cluster) run(cmd *exec.Cmd) ([]byte, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGKILL}
	cmd.Dir = c.dir
	return cmd.CombinedOutput()
}

func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root needs the postgres user: %w", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// RequireEnv, set to anything (CI sets it), makes a missing PostgreSQL a
// test failure instead of a skip.
const RequireEnv = "COMMANDCORE_REQUIRE_ENGINES"

// Unavailable ends tb for err, a failure of Start: a skip when the server
// binaries are missing (unless RequireEnv is set), else a failure.
func Unavailable(tb testing.TB, err error) {
	tb.Helper()
	if errors.Is(err, ErrNoPostgres) && os.Getenv(RequireEnv) == "" {
		tb.Skip(err)
	}
	tb.Fatal(err)
}

// StartT starts a cluster for tb and stops it when tb ends.
func StartT(tb testing.TB) *Cluster {
	tb.Helper()
	c, err := Start()
	if err != nil {
		Unavailable(tb, err)
	}
	tb.Cleanup(c.Stop)
	return c
}
