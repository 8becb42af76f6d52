package install

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"

	"github.com/commandcore/commandcore/internal/atomicfile"
)

// Install writes the unit file for o (atomically, 0644), reloads the user
// manager, enables the unit and starts it, or restarts it if it runs
// already so that a reinstall picks up a new binary. It returns once the
// start job is done: the unit is Type=notify, so that means the agent sent
// READY=1. The agent's state directory is never touched.
func Install(ctx context.Context, o Options) error {
	r, err := o.resolve()
	if err != nil {
		return err
	}
	if err := checkExecutable(r.Exe); err != nil {
		return err
	}
	unit, err := r.render()
	if err != nil {
		return err
	}
	conn, err := connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := checkSearchPath(conn, r.UnitDir); err != nil {
		return err
	}
	if err := writeFileAtomic(r.UnitPath(), unit, 0o644); err != nil {
		return fmt.Errorf("write unit file: %w", err)
	}
	if err := conn.ReloadContext(ctx); err != nil {
		return fmt.Errorf("reload the user manager: %w", err)
	}
	if err := checkLoaded(ctx, conn, r); err != nil {
		return err
	}
	if _, _, err := conn.EnableUnitFilesContext(ctx, []string{r.Service}, false, true); err != nil {
		return fmt.Errorf("enable %s: %w", r.Service, err)
	}
	// As `systemctl enable` does: make the manager see the new symlinks.
	if err := conn.ReloadContext(ctx); err != nil {
		return fmt.Errorf("reload the user manager: %w", err)
	}
	// A unit that failed, perhaps at its start limit, starts again only
	// once reset; for any other unit this just clears the start counter.
	if err := conn.ResetFailedUnitContext(ctx, r.Service); err != nil {
		return fmt.Errorf("reset %s: %w", r.Service, err)
	}
	// RestartUnit starts a unit that is not running.
	done := make(chan string, 1)
	if _, err := conn.RestartUnitContext(ctx, r.Service, "replace", done); err != nil {
		return fmt.Errorf("start %s: %w", r.Service, err)
	}
	if err := waitJob(ctx, done); err != nil {
		return fmt.Errorf("start %s: %w%s", r.Service, err, failureDetail(ctx, conn, r.Service))
	}
	return nil
}

// Uninstalled says what Uninstall found and did.
type Uninstalled struct {
	// Found: there was an installation to take away (a unit file, its
	// enable link, or a unit the user manager still had loaded or running).
	Found bool
	// Removed are the files Uninstall removed.
	Removed []string
	// Stopped: the user manager stopped the agent's unit.
	Stopped bool
}

// ErrManagerUnreachable reports a user manager Uninstall could not reach:
// the files are gone, but the unit was neither stopped nor disabled.
var ErrManagerUnreachable = errors.New("the systemd user manager is not reachable")

// Uninstall stops and disables the unit, removes its file and reloads the
// user manager. Without a reachable manager it still removes the files it
// owns (the unit file and the enable link in default.target.wants/) and
// returns ErrManagerUnreachable, saying that the unit was not stopped. The
// state directory (identity, jobs, journal) and any drop-ins the owner
// wrote in <unit>.d/ stay.
func Uninstall(ctx context.Context, o Options) (*Uninstalled, error) {
	r, err := o.resolve()
	if err != nil {
		return nil, err
	}
	res := &Uninstalled{}
	conn, cerr := connect(ctx)
	if cerr != nil {
		if err := res.removeFiles(r); err != nil {
			return res, err
		}
		if !res.Found {
			// Nothing on disk is installed; whether the manager still runs
			// a unit of that name cannot be asked.
			return res, nil
		}
		return res, fmt.Errorf("could not stop or disable %s (%w: %v); once it is reachable, run `systemctl --user stop %s` and `systemctl --user daemon-reload`",
			r.Service, ErrManagerUnreachable, cerr, r.Service)
	}
	defer conn.Close()
	props, err := conn.GetUnitPropertiesContext(ctx, r.Service)
	if err != nil {
		return res, fmt.Errorf("look up %s: %w", r.Service, err)
	}
	load, _ := props["LoadState"].(string)
	active, _ := props["ActiveState"].(string)
	if load != "not-found" || (active != "inactive" && active != "failed") {
		res.Found = true
		done := make(chan string, 1)
		if _, err := conn.StopUnitContext(ctx, r.Service, "replace", done); err != nil {
			return res, fmt.Errorf("stop %s: %w", r.Service, err)
		}
		if err := waitJob(ctx, done); err != nil {
			return res, fmt.Errorf("stop %s: %w", r.Service, err)
		}
		res.Stopped = true
	}
	if _, err := conn.DisableUnitFilesContext(ctx, []string{r.Service}, false); err != nil && !isDBusError(err, "org.freedesktop.systemd1.NoSuchUnit") {
		return res, fmt.Errorf("disable %s: %w", r.Service, err)
	}
	if err := res.removeFiles(r); err != nil {
		return res, err
	}
	if err := conn.ReloadContext(ctx); err != nil {
		return res, fmt.Errorf("reload the user manager: %w", err)
	}
	// Forget a failed state so the name is clean; nothing to do otherwise.
	_ = conn.ResetFailedUnitContext(ctx, r.Service)
	return res, nil
}

// removeFiles removes the unit's enable link and its file, where present.
func (res *Uninstalled) removeFiles(r *resolved) error {
	link := filepath.Join(r.UnitDir, "default.target.wants", r.Service)
	if fi, err := os.Lstat(link); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		if err := os.Remove(link); err != nil {
			return fmt.Errorf("remove the enable link: %w", err)
		}
		res.Found, res.Removed = true, append(res.Removed, link)
	}
	if err := os.Remove(r.UnitPath()); err == nil {
		res.Found, res.Removed = true, append(res.Removed, r.UnitPath())
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove unit file: %w", err)
	}
	return nil
}

// UnitPath returns where Install writes the unit file for o.
func UnitPath(o Options) (string, error) {
	r, err := o.resolve()
	if err != nil {
		return "", err
	}
	return r.UnitPath(), nil
}

// connect opens a connection to the user manager. go-systemd ties the
// connection to ctx; it is closed by the caller.
func connect(ctx context.Context) (*sdbus.Conn, error) {
	if os.Getenv("DBUS_SESSION_BUS_ADDRESS") == "" && os.Getenv("XDG_RUNTIME_DIR") == "" {
		return nil, errors.New("no systemd user manager: neither DBUS_SESSION_BUS_ADDRESS nor XDG_RUNTIME_DIR is set (run this in the user's own login session)")
	}
	conn, err := sdbus.NewUserConnectionContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect to the systemd user manager: %w", err)
	}
	return conn, nil
}

// checkExecutable makes sure the unit would start a real program.
func checkExecutable(exe string) error {
	fi, err := os.Stat(exe)
	if err != nil {
		return fmt.Errorf("executable: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("executable %s is not an executable file", exe)
	}
	return nil
}

// checkSearchPath makes sure the manager loads units from dir, before
// anything is written there.
func checkSearchPath(conn *sdbus.Conn, dir string) error {
	// go-systemd returns the property in GVariant text form.
	text, err := conn.GetManagerProperty("UnitPath")
	if err != nil {
		return fmt.Errorf("ask the user manager for its unit search path: %w", err)
	}
	v, err := dbus.ParseVariant(text, dbus.SignatureOf([]string{}))
	if err != nil {
		return fmt.Errorf("user manager unit search path: %w", err)
	}
	paths, _ := v.Value().([]string)
	if slices.ContainsFunc(paths, func(p string) bool { return sameDir(p, dir) }) {
		return nil
	}
	return fmt.Errorf("the systemd user manager does not load units from %s", dir)
}

// sameDir reports whether a and b name the same directory: the same clean
// path, or, where both exist, the same inode (a symlinked home).
func sameDir(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// checkLoaded makes sure the manager loaded the unit from the file just
// written, not from a file of the same name that takes precedence, and that
// it parsed.
func checkLoaded(ctx context.Context, conn *sdbus.Conn, r *resolved) error {
	props, err := conn.GetUnitPropertiesContext(ctx, r.Service)
	if err != nil {
		return fmt.Errorf("look up %s: %w", r.Service, err)
	}
	load, _ := props["LoadState"].(string)
	if load != "loaded" {
		detail := ""
		if le, ok := props["LoadError"].([]any); ok && len(le) == 2 {
			if msg, _ := le[1].(string); msg != "" {
				detail = ": " + msg
			}
		}
		return fmt.Errorf("the user manager could not load %s (%s)%s", r.Service, load, detail)
	}
	frag, _ := props["FragmentPath"].(string)
	fa, errA := os.Stat(frag)
	fb, errB := os.Stat(r.UnitPath())
	if errA != nil || errB != nil || !os.SameFile(fa, fb) {
		return fmt.Errorf("the user manager loads %s from %s, which takes precedence over %s", r.Service, frag, r.UnitPath())
	}
	return nil
}

// waitJob waits for a job's result and reports anything but "done".
func waitJob(ctx context.Context, done <-chan string) error {
	select {
	case res := <-done:
		if res != "done" {
			return fmt.Errorf("job %s", res)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the job: %w", ctx.Err())
	}
}

// failureDetail describes why a unit did not start, for an error message.
func failureDetail(ctx context.Context, conn *sdbus.Conn, name string) string {
	props, err := conn.GetUnitTypePropertiesContext(ctx, name, "Service")
	if err != nil {
		return ""
	}
	s := ""
	if res, _ := props["Result"].(string); res != "" && res != "success" {
		s += " (result " + res
		if st, ok := props["ExecMainStatus"].(int32); ok && res == "exit-code" {
			s += fmt.Sprintf(", exit status %d", st)
		}
		s += ")"
	}
	return s + fmt.Sprintf("; see `systemctl --user status %s` and `journalctl --user -u %s`", name, name)
}

// isDBusError reports whether err is the D-Bus error called name.
func isDBusError(err error, name string) bool {
	var e dbus.Error
	if errors.As(err, &e) {
		return e.Name == name
	}
	var pe *dbus.Error
	return errors.As(err, &pe) && pe.Name == name
}

// writeFileAtomic writes data to path atomically, creating its directory
// (0755) if missing.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, data, perm)
}

// lingerDir is where systemd-logind records `loginctl enable-linger`.
var lingerDir = "/var/lib/systemd/linger"

// Lingering reports whether the current user's systemd manager is kept
// running without a login session (`loginctl enable-linger`), so that the
// agent keeps running after logout and starts at boot.
func Lingering() (bool, error) {
	u, err := user.Current()
	if err != nil {
		return false, fmt.Errorf("current user: %w", err)
	}
	_, err = os.Stat(filepath.Join(lingerDir, u.Username))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("linger state: %w", err)
}
