package store

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/pgtest"
)

// The conformance suite: every test that opens its Store with openT on a
// place from newPlace runs once per engine (eachEngine), on SQLite in a
// temporary directory and on a database of its own in a real PostgreSQL
// server that TestMain starts.

var (
	cluster    *pgtest.Cluster
	clusterErr error
	databases  atomic.Int64
)

func TestMain(m *testing.M) {
	cluster, clusterErr = pgtest.Start()
	code := m.Run()
	if cluster != nil {
		cluster.Stop()
	}
	os.Exit(code)
}

// engineNames are the subtest names eachEngine runs a test under.
var engineNames = []string{"sqlite", "postgres"}

// eachEngine runs test once per engine.
func eachEngine(t *testing.T, test func(t *testing.T)) {
	for _, name := range engineNames {
		t.Run(name, func(t *testing.T) {
			if name == "postgres" {
				needPostgres(t)
			}
			test(t)
		})
	}
}

func needPostgres(t *testing.T) {
	t.Helper()
	if clusterErr != nil {
		pgtest.Unavailable(t, clusterErr)
	}
}

// newPlace is a new empty relay state for the engine t runs under: a
// directory, or a PostgreSQL database URL.
func newPlace(t *testing.T) string {
	t.Helper()
	parts := strings.Split(t.Name(), "/")
	if len(parts) < 2 || parts[1] != "postgres" {
		return t.TempDir()
	}
	return newPostgresDatabase(t)
}

// newPostgresDatabase is a new empty database's URL.
func newPostgresDatabase(t *testing.T) string {
	t.Helper()
	needPostgres(t)
	u, err := cluster.CreateDatabase(fmt.Sprintf("t%d", databases.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// openPlace opens the relay state at place on its engine.
func openPlace(place string) (*Store, error) {
	if strings.HasPrefix(place, "postgres://") {
		return OpenPostgres(place)
	}
	return Open(place)
}

func TestRebindNumbersPlaceholdersOutsideQuotes(t *testing.T) {
	for in, want := range map[string]string{
		`SELECT 1`:                             `SELECT 1`,
		`a = ? AND b = ?`:                      `a = $1 AND b = $2`,
		`x = '?' AND y = ? AND z = "a?b" OR ?`: `x = '?' AND y = $1 AND z = "a?b" OR $2`,
		`'it''s ?' , ?`:                        `'it''s ?' , $1`,
	} {
		if got := rebind(in); got != want {
			t.Errorf("rebind(%q) = %q, want %q", in, got, want)
		}
	}
}

// rawState is everything the relay state at place holds: the database
// files on SQLite, every row of every table as text on PostgreSQL.
func rawState(t *testing.T, place string) []byte {
	t.Helper()
	if !strings.HasPrefix(place, "postgres://") {
		var all []byte
		for _, name := range []string{File, File + "-wal", File + "-shm"} {
			b, _ := os.ReadFile(filepath.Join(place, name))
			all = append(all, b...)
		}
		return all
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, place)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = 'public'`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tables) == 0 {
		t.Fatalf("tables %v, %v", tables, err)
	}
	var all []byte
	for _, table := range tables {
		var dump *string
		q := `SELECT string_agg(t::text, E'\n') FROM ` + pgx.Identifier{table}.Sanitize() + ` t`
		if err := conn.QueryRow(ctx, q).Scan(&dump); err != nil {
			t.Fatal(err)
		}
		if dump != nil {
			all = append(all, *dump...)
		}
	}
	return all
}

// holds reports whether raw holds b as bytes or, as PostgreSQL prints a
// bytea, in hex.
func holds(raw, b []byte) bool {
	return bytes.Contains(raw, b) || bytes.Contains(raw, []byte(hex.EncodeToString(b)))
}

// TestPostgresSchemaIsVersionedAndForwardOnly: a new database gets the
// whole schema once, a reopen (a second replica) changes nothing, and a
// database a newer relay migrated is refused.
func TestPostgresSchemaIsVersionedAndForwardOnly(t *testing.T) {
	u := newPostgresDatabase(t)
	stores, errs := make([]*Store, 3), make([]error, 3)
	race(len(stores), func(i int) { stores[i], errs[i] = OpenPostgres(u) })
	for i, s := range stores {
		if errs[i] != nil {
			t.Fatalf("replicas opening a new database together: %v", errs[i])
		}
		s.Close()
	}
	s := openT(t, u)
	var version int
	if err := s.db.QueryRow(`SELECT version FROM schema_version`).Scan(&version); err != nil || version != SchemaVersion {
		t.Fatalf("schema version %d (%v), want %d", version, err, SchemaVersion)
	}
	if _, err := s.db.Exec(`UPDATE schema_version SET version = ?`, SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	_, err := OpenPostgres(u)
	wantCode(t, err, errcode.Internal)
	if !strings.Contains(err.Error(), fmt.Sprintf("schema %d; this relay knows only %d", SchemaVersion+1, SchemaVersion)) {
		t.Fatalf("a newer schema is refused with %q", err)
	}
}

// TestPostgresRefusalsSayWhyWithoutTheURL: a malformed URL and an
// unreachable server each fail at open with one clear message that never
// repeats the URL (it may hold a password).
func TestPostgresRefusalsSayWhyWithoutTheURL(t *testing.T) {
	for _, tc := range []struct {
		url  string
		code errcode.Code
		msg  string
	}{
		{"postgres://u:hunter2@[::1", errcode.InvalidArgument, "the relay state database URL is not a PostgreSQL URL"},
		{"postgres://u:hunter2@/db?host=" + t.TempDir() + "&connect_timeout=2", errcode.Unavailable, "cannot reach the relay state database"},
	} {
		_, err := OpenPostgres(tc.url)
		wantCode(t, err, tc.code)
		if msg := err.(*errcode.Error).Message; msg != tc.msg || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("OpenPostgres(%q) = %q, want %q", tc.url, err, tc.msg)
		}
	}
}
