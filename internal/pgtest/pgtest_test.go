package pgtest

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestClusterServesRestartsAndGoes starts a real server, makes a
// database, stops and restarts the server with its data kept, and removes
// it all on Stop.
func TestClusterServesRestartsAndGoes(t *testing.T) {
	c, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	dir := c.dir
	defer c.Stop()
	u, err := c.CreateDatabase("t1")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	exec := func(sql string) error {
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := exec("CREATE TABLE kept (n int); INSERT INTO kept VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	c.StopServer()
	if err := exec("SELECT 1"); err == nil {
		t.Fatal("a stopped server answered")
	}
	if err := c.StartServer(); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT n FROM kept").Scan(&n); err != nil || n != 7 {
		t.Fatalf("after a restart the row reads %d, %v; want 7", n, err)
	}
	conn.Close(ctx)
	c.Stop()
	if _, err := pgx.Connect(ctx, u); err == nil {
		t.Fatal("a stopped cluster answered")
	}
	if fileExists(dir) {
		t.Fatalf("Stop left %s", dir)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
