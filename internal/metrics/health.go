// Package metrics reads host metrics through prometheus/procfs, with the
// proc root as a parameter so tests can point it at fixture trees.
//
// Health is the cheap snapshot process.start returns (memory, PSI, disk
// free; never a GPU query). Metrics is system.metrics: CPU count, load and
// usage (cpu.go), memory and swap, real file systems (disks.go), PSI,
// uptime, boot ID, a health verdict from documented thresholds
// (verdict.go) and, only when asked, a bounded accelerator probe (gpu.go).
// Only /proc/uptime and the boot ID, which procfs has no reader for, are
// read by hand.
package metrics

import (
	"fmt"
	"os/exec"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// PSI is one resource's pressure: the share of time some (or all) tasks
// stalled, averaged over 10, 60 and 300 seconds, in percent.
type PSI struct {
	Some *PSIAverages `json:"some"`
	Full *PSIAverages `json:"full,omitempty"`
}

// PSIAverages are the averages of one PSI line.
type PSIAverages struct {
	Avg10  float64 `json:"avg10"`
	Avg60  float64 `json:"avg60"`
	Avg300 float64 `json:"avg300"`
}

// HostHealth is the snapshot process.start returns: cheap to take and
// never a GPU query. Its verdict uses system.metrics' thresholds on what
// the snapshot holds (memory, pressure, the job store's disk).
type HostHealth struct {
	Verdict string   `json:"verdict"`
	Reasons []Reason `json:"reasons,omitempty"`

	MemoryAvailableBytes *uint64 `json:"memory_available_bytes,omitempty"`
	MemoryTotalBytes     *uint64 `json:"memory_total_bytes,omitempty"`
	// PSI is keyed by resource (cpu, memory, io); nil when the kernel
	// does not expose pressure information.
	PSI           map[string]PSI `json:"psi,omitempty"`
	DiskFreeBytes *uint64        `json:"disk_free_bytes,omitempty"`
	// Errors names what could not be read; a snapshot never fails.
	Errors []string `json:"errors,omitempty"`
}

// StoreDisk is the subject a reason about the job store's disk names (never
// its path, which is the agent's state directory).
const StoreDisk = "job_store"

// Summary is the snapshot as a launch reports it: only the verdict when
// the host is healthy, everything when it is not.
func (h *HostHealth) Summary() *HostHealth {
	if h.Verdict == VerdictOK {
		return &HostHealth{Verdict: VerdictOK}
	}
	return h
}

// Source reads metrics from a proc file system. It is safe for concurrent
// use; it keeps the previous CPU sample (for usage since the last call), the
// set of mounts whose statfs is still stuck, and the briefly cached GPU probe.
type Source struct {
	fs       procfs.FS
	procRoot string

	// statfs reads one mounted file system; unix.Statfs unless a test
	// replaces it (WithStatfs).
	statfs func(path string, st *unix.Statfs_t) error
	// lookPath finds the accelerator tool; exec.LookPath unless replaced
	// (WithLookPath).
	lookPath func(file string) (string, error)

	// The CPU-usage timing (see cpu.go); fields so tests can shorten them.
	cpuSampleWindow time.Duration
	cpuMinWindow    time.Duration
	cpuMaxWindow    time.Duration
	cpu             cpuState

	mounts diskState
	gpu    gpuState
}

// Option configures a Source.
type Option func(*Source)

// WithStatfs replaces statfs(2) for the disk section, so tests can report
// fixed sizes for a fixture's mount table.
func WithStatfs(f func(path string, st *unix.Statfs_t) error) Option {
	return func(s *Source) { s.statfs = f }
}

// WithLookPath replaces the PATH lookup of the accelerator probe
// (exec.LookPath by default).
func WithLookPath(f func(file string) (string, error)) Option {
	return func(s *Source) { s.lookPath = f }
}

// NewSource returns a Source over the proc file system at procRoot. The disk
// section reads procRoot/self/mountinfo; the boot ID and uptime come from
// procRoot too, so a fixture tree stands in for the whole host.
func NewSource(procRoot string, opts ...Option) (*Source, error) {
	fs, err := procfs.NewFS(procRoot)
	if err != nil {
		return nil, fmt.Errorf("procfs: %w", err)
	}
	s := &Source{
		fs:              fs,
		procRoot:        procRoot,
		statfs:          unix.Statfs,
		lookPath:        exec.LookPath,
		cpuSampleWindow: CPUSampleWindow,
		cpuMinWindow:    CPUUsageMinWindow,
		cpuMaxWindow:    CPUUsageMaxWindow,
		gpu:             gpuState{lock: make(chan struct{}, 1)},
	}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Health takes a snapshot; diskPath names the file system whose free space
// matters (the job store's).
func (s *Source) Health(diskPath string) *HostHealth {
	h := &HostHealth{}
	if mi, err := s.fs.Meminfo(); err == nil {
		h.MemoryAvailableBytes = kib(mi.MemAvailable)
		h.MemoryTotalBytes = kib(mi.MemTotal)
	} else {
		h.Errors = append(h.Errors, "meminfo")
	}
	h.PSI = s.psi()
	judged := Metrics{PSI: Pressure{}}
	if h.MemoryAvailableBytes != nil && h.MemoryTotalBytes != nil && *h.MemoryTotalBytes > 0 {
		pct := float64(*h.MemoryAvailableBytes) / float64(*h.MemoryTotalBytes) * 100
		judged.Memory = &Memory{AvailablePercent: &pct}
	}
	for res, p := range h.PSI {
		p := p
		switch res {
		case "cpu":
			judged.PSI.CPU = &p
		case "memory":
			judged.PSI.Memory = &p
		case "io":
			judged.PSI.IO = &p
		}
	}
	var st unix.Statfs_t
	if err := s.statfs(diskPath, &st); err == nil {
		free := st.Bavail * uint64(st.Bsize)
		h.DiskFreeBytes = &free
		if used := st.Blocks - st.Bfree; used+st.Bavail > 0 {
			pct := float64(used) / float64(used+st.Bavail) * 100
			judged.Disks = []Disk{{MountPoint: StoreDisk, Status: "ok", UsedPercent: &pct}}
		}
	} else {
		h.Errors = append(h.Errors, "disk")
	}
	judged.Errors = h.Errors
	v := Evaluate(&judged)
	h.Verdict, h.Reasons = v.Verdict, v.Reasons
	return h
}

// psi reads cpu, memory and io pressure; nil when the kernel has none.
func (s *Source) psi() map[string]PSI {
	var out map[string]PSI
	for _, res := range []string{"cpu", "memory", "io"} {
		st, err := s.fs.PSIStatsForResource(res)
		if err != nil {
			continue
		}
		if out == nil {
			out = map[string]PSI{}
		}
		out[res] = PSI{Some: averages(st.Some), Full: averages(st.Full)}
	}
	return out
}

func averages(l *procfs.PSILine) *PSIAverages {
	if l == nil {
		return nil
	}
	return &PSIAverages{Avg10: l.Avg10, Avg60: l.Avg60, Avg300: l.Avg300}
}

// kib converts a meminfo value in KiB to bytes.
func kib(v *uint64) *uint64 {
	if v == nil {
		return nil
	}
	b := *v * 1024
	return &b
}
