package metrics

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"golang.org/x/sys/unix"
)

// fakeDisks stands in for statfs(2) on a fixture's mount table.
type fakeDisks struct {
	stats map[string]unix.Statfs_t
	hang  map[string]bool // these block until the test ends
	done  chan struct{}

	mu    sync.Mutex
	calls map[string]int
}

func newFakeDisks(t *testing.T, stats map[string]unix.Statfs_t, hang ...string) *fakeDisks {
	f := &fakeDisks{stats: stats, hang: map[string]bool{}, done: make(chan struct{}), calls: map[string]int{}}
	for _, h := range hang {
		f.hang[h] = true
	}
	t.Cleanup(func() { close(f.done) })
	return f
}

func (f *fakeDisks) statfs(path string, st *unix.Statfs_t) error {
	f.mu.Lock()
	f.calls[path]++
	f.mu.Unlock()
	if f.hang[path] {
		<-f.done
		return unix.EIO
	}
	v, ok := f.stats[path]
	if !ok {
		return unix.ENOENT
	}
	*st = v
	return nil
}

func (f *fakeDisks) count(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[path]
}

func fs(blocks, bfree, bavail, files, ffree uint64) unix.Statfs_t {
	return unix.Statfs_t{Bsize: 4096, Frsize: 4096, Blocks: blocks, Bfree: bfree, Bavail: bavail, Files: files, Ffree: ffree}
}

// healthyDisks answers for every real mount of the fixture table.
func healthyDisks() map[string]unix.Statfs_t {
	return map[string]unix.Statfs_t{
		"/":            fs(1000, 400, 350, 1000, 900),
		"/boot":        fs(100, 50, 50, 100, 90),
		"/data":        fs(1000, 500, 500, 0, 0), // btrfs: no inode table
		"/mnt/my disk": fs(10, 10, 10, 10, 10),
		"/mnt/nfs":     fs(1000, 1000, 1000, 1000, 1000),
	}
}

func newFixture(t *testing.T, root string, disks *fakeDisks) *Source {
	t.Helper()
	s, err := NewSource(root, WithStatfs(disks.statfs))
	if err != nil {
		t.Fatal(err)
	}
	s.cpuSampleWindow = 10 * time.Millisecond
	return s
}

func TestMetricsFromFixture(t *testing.T) {
	s := newFixture(t, "testdata/psi/proc", newFakeDisks(t, healthyDisks()))
	m, err := s.Metrics(context.Background(), MetricsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if m.CPU.Count != 4 || m.CPU.Load == nil || *m.CPU.Load != (LoadAverage{0.5, 0.75, 1}) {
		t.Fatalf("cpu: %+v load %+v", m.CPU, m.CPU.Load)
	}
	if m.CPU.Usage != nil {
		t.Fatalf("a static /proc/stat has no usage: %+v", m.CPU.Usage)
	}
	if m.Memory == nil || m.Memory.TotalBytes != 16384000*1024 || *m.Memory.AvailableBytes != 8192000*1024 ||
		*m.Memory.AvailablePercent != 50 || *m.Memory.UsedBytes != 8192000*1024 || *m.Memory.FreeBytes != 1000000*1024 {
		t.Fatalf("memory: %+v", m.Memory)
	}
	if m.Swap == nil || m.Swap.TotalBytes != 2048000*1024 || m.Swap.UsedBytes != 1024000*1024 || *m.Swap.UsedPercent != 50 {
		t.Fatalf("swap: %+v", m.Swap)
	}
	if m.PSI.Status != PSIStatusOK || m.PSI.CPU.Some.Avg60 != 2.25 || m.PSI.Memory.Full.Avg300 != 0.1 || m.PSI.IO.Full.Avg10 != 1 {
		t.Fatalf("psi: %+v", m.PSI)
	}
	if m.UptimeSeconds == nil || *m.UptimeSeconds != 12345.67 || m.BootID != "0b6b7a3c-1f5e-4c2d-9a8b-1234567890ab" {
		t.Fatalf("uptime %v boot %q", m.UptimeSeconds, m.BootID)
	}

	var mps []string
	for _, d := range m.Disks {
		mps = append(mps, d.MountPoint)
	}
	// Pseudo file systems, /proc /sys /dev, snaps, container storage and
	// the bind mount of / are gone; the escaped space is decoded.
	if want := []string{"/", "/boot", "/data", "/mnt/my disk", "/mnt/nfs"}; !slices.Equal(mps, want) {
		t.Fatalf("disks %q, want %q", mps, want)
	}
	root := m.Disks[0]
	if root.Device != "/dev/sda1" || root.FSType != "ext4" || root.ReadOnly || root.Status != "ok" ||
		*root.SizeBytes != 1000*4096 || *root.UsedBytes != 600*4096 || *root.AvailableBytes != 350*4096 ||
		*root.FreeBytes != 400*4096 || *root.UsedPercent != 63.16 || *root.InodesUsedPercent != 10 {
		t.Fatalf("root disk: %+v", root)
	}
	if !m.Disks[1].ReadOnly {
		t.Fatal("/boot is mounted read-only")
	}
	if d := m.Disks[2]; d.InodesTotal == nil || *d.InodesTotal != 0 || d.InodesUsedPercent != nil {
		t.Fatalf("btrfs inodes: %+v", d)
	}
	if m.Health.Verdict != VerdictOK || len(m.Health.Reasons) != 0 || len(m.Errors) != 0 {
		t.Fatalf("health %+v errors %v", m.Health, m.Errors)
	}
	if m.GPU != nil {
		t.Fatal("GPU data without asking")
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"reasons":[]`, `"verdict":"ok"`, `"boot_id":`, `"psi":{"status":"ok"`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("JSON lacks %s: %s", key, b)
		}
	}
}

func TestMetricsWithoutPSI(t *testing.T) {
	s := newFixture(t, "testdata/nopsi/proc", newFakeDisks(t, healthyDisks()))
	m, err := s.Metrics(context.Background(), MetricsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if m.PSI.Status != PSIStatusUnavailable || m.PSI.CPU != nil || m.PSI.Memory != nil || m.PSI.IO != nil {
		t.Fatalf("psi on a host without it: %+v", m.PSI)
	}
	if len(m.Errors) != 0 || m.Health.Verdict != VerdictOK {
		t.Fatalf("a host without PSI is not an error: %v %+v", m.Errors, m.Health)
	}
	b, _ := json.Marshal(m.PSI)
	if string(b) != `{"status":"unavailable"}` {
		t.Fatalf("psi JSON %s", b)
	}
}

func TestMetricsStressedVerdict(t *testing.T) {
	disks := newFakeDisks(t, map[string]unix.Statfs_t{
		"/":     fs(1000, 40, 30, 1000, 900),   // 96.97 % used
		"/boot": fs(100, 50, 50, 1000, 80),     // 92 % of inodes
		"/data": fs(1000, 500, 500, 1000, 500), // fine
		// "/mnt/my disk" is unreadable (ENOENT)
	}, "/mnt/nfs")
	s := newFixture(t, "testdata/stressed/proc", disks)
	m, err := s.Metrics(context.Background(), MetricsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	type r struct {
		code, sev, subject string
		value, threshold   float64
	}
	var got []r
	for _, x := range m.Health.Reasons {
		v, th := -1.0, -1.0
		if x.Value != nil {
			v, th = *x.Value, *x.Threshold
		}
		got = append(got, r{x.Code, x.Severity, x.Subject, v, th})
	}
	want := []r{
		{ReasonDiskSpaceLow, VerdictCritical, "/", 96.97, DiskUsedCritPercent},
		{ReasonMemoryAvailableLow, VerdictCritical, "", 3, MemoryAvailableCritPercent},
		{ReasonMemoryPressureHigh, VerdictCritical, "full", 15, MemoryPressureCritPercent},
		{ReasonCPUPressureHigh, VerdictWarning, "some", 60, CPUPressureWarnPercent},
		{ReasonDiskInodesLow, VerdictWarning, "/boot", 92, InodesUsedWarnPercent},
		{ReasonDiskUnresponsive, VerdictWarning, "/mnt/nfs", -1, -1},
		{ReasonIOPressureHigh, VerdictWarning, "full", 25, IOPressureWarnPercent},
		{ReasonLoadHigh, VerdictWarning, "", 2.5, LoadPerCPUWarn},
		{ReasonSwapUsedHigh, VerdictWarning, "", 90, SwapUsedWarnPercent},
	}
	if m.Health.Verdict != VerdictCritical || !slices.Equal(got, want) {
		t.Fatalf("verdict %s reasons\n got %+v\nwant %+v", m.Health.Verdict, got, want)
	}
	statuses := map[string]string{}
	for _, d := range m.Disks {
		statuses[d.MountPoint] = d.Status
	}
	if statuses["/mnt/nfs"] != "timeout" || statuses["/mnt/my disk"] != "unreadable" || statuses["/"] != "ok" {
		t.Fatalf("disk statuses %v", statuses)
	}

	// The stuck statfs is not asked again while it hangs, so the next call
	// does not wait for it.
	start := time.Now()
	m, err = s.Metrics(context.Background(), MetricsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el >= DiskStatTimeout {
		t.Fatalf("second call waited %v for a known-stuck mount", el)
	}
	if n := disks.count("/mnt/nfs"); n != 1 {
		t.Fatalf("stuck mount asked %d times", n)
	}
	if m.Disks[len(m.Disks)-1].Status != "timeout" {
		t.Fatalf("stuck mount: %+v", m.Disks[len(m.Disks)-1])
	}
}

func TestMetricsMissingSections(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "meminfo"), []byte("MemTotal: 1000 kB\nMemAvailable: 20 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newFixture(t, root, newFakeDisks(t, nil))
	m, err := s.Metrics(context.Background(), MetricsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"cpu", "load", "disks", "uptime", "boot_id"}; !slices.Equal(m.Errors, want) {
		t.Fatalf("errors %v, want %v", m.Errors, want)
	}
	if m.Health.Verdict != VerdictCritical || m.Health.Reasons[0].Code != ReasonMemoryAvailableLow {
		t.Fatalf("health %+v", m.Health)
	}
	var incomplete []string
	for _, r := range m.Health.Reasons {
		if r.Code == ReasonMetricsIncomplete {
			incomplete = append(incomplete, r.Subject)
		}
	}
	if want := []string{"boot_id", "cpu", "disks", "load", "uptime"}; !slices.Equal(incomplete, want) {
		t.Fatalf("metrics_incomplete subjects %v", incomplete)
	}
	if m.Disks == nil || m.Memory.AvailableBytes == nil || m.Swap.TotalBytes != 0 || m.Swap.UsedPercent != nil {
		t.Fatalf("disks %v memory %+v swap %+v", m.Disks, m.Memory, m.Swap)
	}
}

// writeStat rewrites a copied fixture's /proc/stat with a cpu line.
func writeStat(t *testing.T, root, cpu string) {
	t.Helper()
	body := cpu + "\ncpu0 0 0 0 0 0 0 0 0 0 0\nbtime 1700000000\n"
	if err := os.WriteFile(filepath.Join(root, "stat"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCPUUsageSinceLastCall(t *testing.T) {
	root := t.TempDir()
	if err := os.CopyFS(root, os.DirFS("testdata/psi/proc")); err != nil {
		t.Fatal(err)
	}
	writeStat(t, root, "cpu  1000 0 500 8000 200 0 100 0 0 0")
	s := newFixture(t, root, newFakeDisks(t, healthyDisks()))
	ctx := context.Background()

	// First call: a short sample of a static file has no ticks, no usage.
	m, err := s.Metrics(ctx, MetricsRequest{})
	if err != nil || m.CPU.Usage != nil {
		t.Fatalf("first call: %+v %v", m.CPU.Usage, err)
	}

	// 1000 ticks later: 300 user, 100 system, 500 idle, 100 iowait.
	writeStat(t, root, "cpu  1300 0 600 8500 300 0 100 0 0 0")
	s.cpuMinWindow = 0
	m, err = s.Metrics(ctx, MetricsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	u := m.CPU.Usage
	if u == nil || u.BusyPercent != 40 || u.UserPercent != 30 || u.SystemPercent != 10 || u.IowaitPercent != 10 || u.StealPercent != 0 || u.WindowSeconds <= 0 {
		t.Fatalf("usage since last call: %+v", u)
	}

	// Within the minimum window the last usage is repeated, same window.
	writeStat(t, root, "cpu  9999 0 600 8500 300 0 100 0 0 0")
	s.cpuMinWindow = time.Hour
	m, err = s.Metrics(ctx, MetricsRequest{})
	if err != nil || m.CPU.Usage == nil || *m.CPU.Usage != *u {
		t.Fatalf("repeated usage: %+v (want %+v) %v", m.CPU.Usage, u, err)
	}

	// A base older than the maximum window is replaced by a fresh sample.
	s.cpuMinWindow, s.cpuMaxWindow = 0, 0
	start := time.Now()
	if _, err := s.Metrics(ctx, MetricsRequest{}); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < s.cpuSampleWindow {
		t.Fatalf("a stale base did not take a fresh sample (%v)", el)
	}

	// A cancelled first sample is the one error Metrics returns.
	s2 := newFixture(t, root, newFakeDisks(t, healthyDisks()))
	s2.cpuSampleWindow = time.Hour
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := s2.Metrics(cctx, MetricsRequest{}); err == nil {
		t.Fatal("a cancelled sample returned no error")
	}
}

func TestRealMounts(t *testing.T) {
	for in, want := range map[string]string{
		`/mnt/a\040b`:   "/mnt/a b",
		`/x\134y`:       `/x\y`,
		`/tab\011`:      "/tab\t",
		`/plain`:        "/plain",
		`/bad\04`:       `/bad\04`,
		`/not\999octal`: `/not\999octal`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescape %q = %q, want %q", in, got, want)
		}
	}
	for mp, skip := range map[string]bool{"/proc": true, "/proc/sys/fs/binfmt_misc": true, "/sys": true, "/dev/shm": true,
		"/devices": false, "/snap/core/1": true, "/snapshots": false, "/var/lib/docker/x": true, "/var/lib/dockerish": false, "/": false} {
		if skippedMount(mp) != skip {
			t.Errorf("skippedMount(%q) = %v", mp, !skip)
		}
	}
}

func TestMetricsOfThisHost(t *testing.T) {
	s, err := NewSource("/proc")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m, err := s.Metrics(ctx, MetricsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Errors) != 0 {
		t.Fatalf("errors on this host: %v", m.Errors)
	}
	if m.CPU.Count < 1 || m.CPU.Load == nil || m.CPU.Usage == nil || m.CPU.Usage.WindowSeconds < CPUSampleWindow.Seconds()*0.9 {
		t.Fatalf("cpu %+v usage %+v", m.CPU, m.CPU.Usage)
	}
	if m.Memory == nil || m.Memory.TotalBytes == 0 || m.Memory.AvailableBytes == nil || m.Swap == nil {
		t.Fatalf("memory %+v", m.Memory)
	}
	id, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil || m.BootID != strings.TrimSpace(string(id)) {
		t.Fatalf("boot id %q vs %q (%v)", m.BootID, id, err)
	}
	if m.UptimeSeconds == nil || *m.UptimeSeconds <= 0 {
		t.Fatalf("uptime %v", m.UptimeSeconds)
	}
	if _, err := os.Stat("/proc/pressure/cpu"); err == nil && m.PSI.Status != PSIStatusOK {
		t.Fatalf("this host has PSI: %+v", m.PSI)
	}
	for _, d := range m.Disks {
		if pseudoFSTypes[d.FSType] || d.Status != "ok" || d.SizeBytes == nil {
			t.Errorf("disk %+v", d)
		}
	}
	// The root file system is listed whenever it is a real one.
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err == nil && st.Type != unix.OVERLAYFS_SUPER_MAGIC && st.Type != unix.TMPFS_MAGIC {
		if !slices.ContainsFunc(m.Disks, func(d Disk) bool { return d.MountPoint == "/" }) {
			t.Errorf("/ not among %+v", m.Disks)
		}
	}
	switch m.Health.Verdict {
	case VerdictOK, VerdictWarning, VerdictCritical:
	default:
		t.Fatalf("verdict %q", m.Health.Verdict)
	}
	t.Logf("verdict %s reasons %+v", m.Health.Verdict, m.Health.Reasons)

	// The next call reuses the previous read: no new sample, usage since then.
	time.Sleep(CPUUsageMinWindow)
	start := time.Now()
	m2, err := s.Metrics(ctx, MetricsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second call %v", time.Since(start))
	if m2.CPU.Usage == nil || !m2.CPU.Usage.MeasuredAt.After(m.CPU.Usage.MeasuredAt) {
		t.Fatalf("second usage %+v after %+v", m2.CPU.Usage, m.CPU.Usage)
	}
}

func TestMetricsRequestSchema(t *testing.T) {
	s, err := jsonschema.For[MetricsRequest](nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := s.Properties["gpu"]; !ok || p.Description == "" || p.Type != "boolean" || len(s.Required) != 0 {
		t.Fatalf("schema %+v", s)
	}
}
