package metrics

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// MetricsRequest is the input of system.metrics.
type MetricsRequest struct {
	GPU bool `json:"gpu,omitempty" jsonschema:"also probe accelerators with nvidia-smi (bounded to 2 s, answer cached 5 s); a missing tool or driver reports unavailable and never fails the call"`
}

// Metrics is the result of system.metrics. A section that could not be read
// is absent (null) and named in Errors; the call itself does not fail.
type Metrics struct {
	CollectedAt time.Time  `json:"collected_at"`
	CPU         CPUMetrics `json:"cpu"`
	Memory      *Memory    `json:"memory"`
	Swap        *Swap      `json:"swap"`
	Disks       []Disk     `json:"disks"`
	// DisksTruncated says the list stopped at MaxDisks.
	DisksTruncated bool     `json:"disks_truncated,omitempty"`
	PSI            Pressure `json:"psi"`
	UptimeSeconds  *float64 `json:"uptime_seconds"`
	BootID         string   `json:"boot_id,omitempty"`
	Health         Health   `json:"health"`
	// GPU is present only when the request asked for it.
	GPU *GPUReport `json:"gpu,omitempty"`
	// Errors names the sections that could not be read (cpu, cpu_usage,
	// load, memory, disks, uptime, boot_id).
	Errors []string `json:"errors,omitempty"`
}

// CPUMetrics is the CPU section.
type CPUMetrics struct {
	// Count is the number of online CPUs (the cpuN lines of /proc/stat).
	Count int          `json:"count"`
	Load  *LoadAverage `json:"load"`
	// Usage is null when no usage could be computed yet (no clock tick
	// passed in the sample).
	Usage *CPUUsage `json:"usage"`
}

// LoadAverage is /proc/loadavg.
type LoadAverage struct {
	Load1  float64 `json:"load1"`
	Load5  float64 `json:"load5"`
	Load15 float64 `json:"load15"`
}

// Memory is the memory section, in bytes.
type Memory struct {
	TotalBytes uint64 `json:"total_bytes"`
	// AvailableBytes is the kernel's estimate of memory available to new
	// work without swapping (MemAvailable).
	AvailableBytes   *uint64  `json:"available_bytes"`
	AvailablePercent *float64 `json:"available_percent"`
	// UsedBytes is total minus available.
	UsedBytes    *uint64 `json:"used_bytes"`
	FreeBytes    *uint64 `json:"free_bytes"`
	BuffersBytes *uint64 `json:"buffers_bytes"`
	CachedBytes  *uint64 `json:"cached_bytes"`
}

// Swap is the swap section, in bytes; a host without swap reports zeros.
type Swap struct {
	TotalBytes uint64 `json:"total_bytes"`
	FreeBytes  uint64 `json:"free_bytes"`
	UsedBytes  uint64 `json:"used_bytes"`
	// UsedPercent is absent without swap.
	UsedPercent *float64 `json:"used_percent,omitempty"`
}

// Pressure is the PSI section. Status is "ok" when the kernel exposes
// pressure information and "unavailable" otherwise (a kernel built without
// PSI or booted with psi=0); unavailable is not an error.
type Pressure struct {
	Status string `json:"status"`
	CPU    *PSI   `json:"cpu,omitempty"`
	Memory *PSI   `json:"memory,omitempty"`
	IO     *PSI   `json:"io,omitempty"`
}

// PSI statuses.
const (
	PSIStatusOK          = "ok"
	PSIStatusUnavailable = "unavailable"
)

// Metrics reads every section; with req.GPU it also probes accelerators
// (bounded, concurrently with the rest). The only error is ctx ending
// during the short CPU sample of a first call.
func (s *Source) Metrics(ctx context.Context, req MetricsRequest) (*Metrics, error) {
	m := &Metrics{CollectedAt: time.Now().UTC()}
	var gpu chan *GPUReport
	if req.GPU {
		gpu = make(chan *GPUReport, 1)
		go func() { gpu <- s.GPU(ctx) }()
	}
	fail := func(section string) { m.Errors = append(m.Errors, section) }

	if st, err := s.fs.Stat(); err != nil {
		fail("cpu")
	} else {
		m.CPU.Count = len(st.CPU)
		u, err := s.cpuUsage(ctx, cpuSample{at: time.Now(), stat: st.CPUTotal})
		if err != nil {
			if ctx.Err() != nil {
				if gpu != nil {
					<-gpu
				}
				return nil, ctx.Err()
			}
			fail("cpu_usage")
		}
		m.CPU.Usage = u
	}
	if la, err := s.fs.LoadAvg(); err != nil {
		fail("load")
	} else {
		m.CPU.Load = &LoadAverage{Load1: la.Load1, Load5: la.Load5, Load15: la.Load15}
	}

	if mi, err := s.fs.Meminfo(); err != nil || mi.MemTotal == nil {
		fail("memory")
	} else {
		m.Memory, m.Swap = memory(mi.MemTotal, mi.MemAvailable, mi.MemFree, mi.Buffers, mi.Cached), swap(mi.SwapTotal, mi.SwapFree)
	}

	if d, truncated, err := s.disks(); err != nil {
		fail("disks")
	} else {
		m.Disks, m.DisksTruncated = d, truncated
	}
	if m.Disks == nil {
		m.Disks = []Disk{}
	}

	m.PSI = Pressure{Status: PSIStatusUnavailable}
	if p := s.psi(); p != nil {
		m.PSI.Status = PSIStatusOK
		for res, v := range p {
			switch res {
			case "cpu":
				m.PSI.CPU = &v
			case "memory":
				m.PSI.Memory = &v
			case "io":
				m.PSI.IO = &v
			}
		}
	}

	if up, err := s.uptime(); err != nil {
		fail("uptime")
	} else {
		m.UptimeSeconds = &up
	}
	if id, err := s.bootID(); err != nil {
		fail("boot_id")
	} else {
		m.BootID = id
	}

	m.Health = Evaluate(m)
	if gpu != nil {
		m.GPU = <-gpu
	}
	return m, nil
}

func memory(total, avail, free, buffers, cached *uint64) *Memory {
	m := &Memory{TotalBytes: *total * 1024, AvailableBytes: kib(avail), FreeBytes: kib(free), BuffersBytes: kib(buffers), CachedBytes: kib(cached)}
	if m.AvailableBytes != nil && m.TotalBytes > 0 {
		a := min(*m.AvailableBytes, m.TotalBytes)
		used := m.TotalBytes - a
		p := round2(float64(a) / float64(m.TotalBytes) * 100)
		m.UsedBytes, m.AvailablePercent = &used, &p
	}
	return m
}

func swap(total, free *uint64) *Swap {
	sw := &Swap{}
	if total != nil {
		sw.TotalBytes = *total * 1024
	}
	if free != nil {
		sw.FreeBytes = min(*free*1024, sw.TotalBytes)
	}
	sw.UsedBytes = sw.TotalBytes - sw.FreeBytes
	if sw.TotalBytes > 0 {
		p := round2(float64(sw.UsedBytes) / float64(sw.TotalBytes) * 100)
		sw.UsedPercent = &p
	}
	return sw
}

// uptime reads procRoot/uptime, whose first field is the seconds since boot
// (procfs has no reader for this one-number file).
func (s *Source) uptime() (float64, error) {
	b, err := os.ReadFile(filepath.Join(s.procRoot, "uptime"))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, strconv.ErrSyntax
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, strconv.ErrSyntax
	}
	return v, nil
}

// bootID reads procRoot/sys/kernel/random/boot_id (procfs has no reader).
func (s *Source) bootID() (string, error) {
	b, err := os.ReadFile(filepath.Join(s.procRoot, "sys", "kernel", "random", "boot_id"))
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(b))
	if id == "" || len(id) > 64 {
		return "", strconv.ErrSyntax
	}
	return id, nil
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }
func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
