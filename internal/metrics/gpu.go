package metrics

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/procgroup"
	"github.com/commandcore/commandcore/internal/procid"
)

// The accelerator probe runs only when a system.metrics request asks for it
// (never at launch). It runs
//
//	nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used,memory.total,temperature.gpu --format=csv,noheader,nounits
//
// in its own process group under limits.GPUProbeTimeout: at
// GPUProbeTimeout-gpuKillGrace the whole group is killed with SIGKILL, and
// the call stops waiting for the pipes gpuWaitDelay later even if a
// descendant that left the group still holds them (gpuWaitDelay is shorter
// than gpuKillGrace, so the whole probe ends inside the bound). A missing tool, a failing
// tool (no driver, no device) or a timeout is a status, never an error. The
// answer is cached for GPUCacheTTL, so a client polling metrics does not
// start a process per call.
const (
	// GPUTool is the probed command, looked up on PATH.
	GPUTool = "nvidia-smi"
	// GPUCacheTTL is how long one probe's answer is reused.
	GPUCacheTTL = 5 * time.Second
	// gpuKillGrace is the part of the bound reserved for killing the
	// process group and collecting it.
	gpuKillGrace = 300 * time.Millisecond
	// gpuWaitDelay is how long Wait still waits for the output pipe after
	// the kill (cmd.WaitDelay).
	gpuWaitDelay = 200 * time.Millisecond
	// gpuMaxOutput bounds what is read from the tool.
	gpuMaxOutput = 64 << 10
	// gpuMaxDevices bounds the devices listed.
	gpuMaxDevices = 64
)

var gpuArgs = []string{
	"--query-gpu=index,name,utilization.gpu,memory.used,memory.total,temperature.gpu",
	"--format=csv,noheader,nounits",
}

// GPU statuses and reasons.
const (
	GPUStatusOK          = "ok"
	GPUStatusUnavailable = "unavailable"

	GPUReasonNotInstalled = "not_installed" // no nvidia-smi on PATH
	GPUReasonFailed       = "failed"        // it exited non-zero or answered nonsense
	GPUReasonTimeout      = "timeout"       // it did not answer within the bound
)

// GPUReport is the accelerator section.
type GPUReport struct {
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	Tool   string `json:"tool"`
	GPUs   []GPU  `json:"gpus,omitempty"`
	// ProbedAt is when the (possibly cached) answer was taken.
	ProbedAt time.Time `json:"probed_at"`
}

// GPU is one device. A field the driver does not support is absent.
type GPU struct {
	Index              int      `json:"index"`
	Name               string   `json:"name"`
	UtilizationPercent *float64 `json:"utilization_percent,omitempty"`
	MemoryUsedBytes    *uint64  `json:"memory_used_bytes,omitempty"`
	MemoryTotalBytes   *uint64  `json:"memory_total_bytes,omitempty"`
	TemperatureCelsius *float64 `json:"temperature_celsius,omitempty"`
}

type gpuState struct {
	// lock is a one-slot semaphore (a channel so waiting honours ctx):
	// concurrent callers wait for the probe in flight and share its answer.
	lock   chan struct{}
	cached *GPUReport
	at     time.Time
}

// GPU returns the accelerator report, probing at most once per GPUCacheTTL.
// It never fails: a cancelled ctx reports a timeout (not cached).
func (s *Source) GPU(ctx context.Context) *GPUReport {
	g := &s.gpu
	select {
	case g.lock <- struct{}{}:
	case <-ctx.Done():
		return &GPUReport{Status: GPUStatusUnavailable, Reason: GPUReasonTimeout, Tool: GPUTool, ProbedAt: time.Now().UTC()}
	}
	defer func() { <-g.lock }()
	if g.cached != nil && time.Since(g.at) < GPUCacheTTL {
		return copyGPU(g.cached)
	}
	r, cacheable := s.probeGPU(ctx)
	if cacheable {
		g.cached, g.at = r, time.Now()
	}
	return copyGPU(r)
}

func copyGPU(r *GPUReport) *GPUReport {
	c := *r
	c.GPUs = append([]GPU(nil), r.GPUs...)
	return &c
}

// probeGPU runs the tool once; cacheable is false when the caller's ctx,
// not the tool, ended the probe.
func (s *Source) probeGPU(ctx context.Context) (_ *GPUReport, cacheable bool) {
	r := &GPUReport{Status: GPUStatusUnavailable, Tool: GPUTool, ProbedAt: time.Now().UTC()}
	path, err := s.lookPath(GPUTool)
	if err != nil {
		r.Reason = GPUReasonNotInstalled
		return r, true
	}
	pctx, cancel := context.WithTimeout(ctx, limits.GPUProbeTimeout-gpuKillGrace)
	defer cancel()
	cmd := exec.CommandContext(pctx, path, gpuArgs...)
	out := &boundedBuffer{max: gpuMaxOutput}
	cmd.Stdout = out
	cmd.Stderr = nil // discarded: it never reaches a result
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The child is a real process even when the Source reads a fixture tree.
	procs := procid.Default()
	var group atomic.Pointer[procgroup.Group]
	cmd.Cancel = func() error {
		// The whole group: a wrapper script's children die with it.
		group.Load().Signal(unix.SIGKILL)
		return nil
	}
	cmd.WaitDelay = gpuWaitDelay
	if err = cmd.Start(); err == nil {
		if g, err := procgroup.Of(procs, cmd.Process.Pid); err == nil {
			group.Store(g)
		}
		err = cmd.Wait()
	}
	switch {
	case pctx.Err() != nil:
		r.Reason = GPUReasonTimeout
		return r, ctx.Err() == nil
	case err != nil && errors.Is(err, exec.ErrNotFound):
		r.Reason = GPUReasonNotInstalled
		return r, true
	case err != nil || out.overflow:
		r.Reason = GPUReasonFailed
		return r, true
	}
	gpus, ok := parseGPUs(out.Bytes())
	if !ok {
		r.Reason = GPUReasonFailed
		return r, true
	}
	r.Status, r.GPUs = GPUStatusOK, gpus
	return r, true
}

// parseGPUs reads nvidia-smi's CSV: one device a line, fields in gpuArgs
// order, "[N/A]" or "[Not Supported]" for what a device lacks.
func parseGPUs(b []byte) ([]GPU, bool) {
	rd := csv.NewReader(bytes.NewReader(b))
	rd.TrimLeadingSpace = true
	rd.FieldsPerRecord = 6
	recs, err := rd.ReadAll()
	if err != nil || len(recs) > gpuMaxDevices {
		return nil, false
	}
	gpus := make([]GPU, 0, len(recs))
	for _, f := range recs {
		idx, err := strconv.Atoi(strings.TrimSpace(f[0]))
		if err != nil {
			return nil, false
		}
		g := GPU{Index: idx, Name: strings.TrimSpace(f[1])}
		g.UtilizationPercent = gpuFloat(f[2])
		if v := gpuFloat(f[3]); v != nil && *v >= 0 {
			b := uint64(*v) << 20 // MiB
			g.MemoryUsedBytes = &b
		}
		if v := gpuFloat(f[4]); v != nil && *v >= 0 {
			b := uint64(*v) << 20
			g.MemoryTotalBytes = &b
		}
		g.TemperatureCelsius = gpuFloat(f[5])
		gpus = append(gpus, g)
	}
	return gpus, true
}

func gpuFloat(s string) *float64 {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return nil // [N/A], [Not Supported], …
	}
	return &v
}

// boundedBuffer keeps the first max bytes and notes an overflow; it never
// fails a write, so the child is not killed by EPIPE mid-line.
type boundedBuffer struct {
	bytes.Buffer
	max      int
	overflow bool
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room < len(p) {
		b.overflow = true
		if room > 0 {
			b.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return b.Buffer.Write(p)
}
