package metrics

import (
	"cmp"
	"slices"
)

// The health verdict is "ok", "warning" or "critical": the most severe of
// its reasons, "ok" when there are none. Each reason is a stable word with
// the measured value and the threshold it crossed. The thresholds:
//
//	code                     severity  when
//	memory_available_low     warning   MemAvailable < 10 % of MemTotal
//	memory_available_low     critical  MemAvailable <  5 % of MemTotal
//	swap_used_high           warning   swap used ≥ 80 % (hosts with swap)
//	memory_pressure_high     warning   PSI memory some avg60 ≥ 10 %
//	memory_pressure_high     critical  PSI memory full avg60 ≥ 10 % (thrashing)
//	cpu_pressure_high        warning   PSI cpu some avg60 ≥ 50 %
//	io_pressure_high         warning   PSI io full avg60 ≥ 20 %
//	load_high                warning   5-minute load per CPU ≥ 2
//	disk_space_low           warning   a disk ≥ 90 % used (df's Use%)
//	disk_space_low           critical  a disk ≥ 95 % used
//	disk_inodes_low          warning   a disk's inodes ≥ 90 % used
//	disk_inodes_low          critical  a disk's inodes ≥ 95 % used
//	disk_unresponsive        warning   a disk's statfs timed out
//	metrics_incomplete       warning   a section could not be read (subject names it)
//
// Pressure uses avg60 rather than avg10 so one burst does not flip the
// verdict; a host without PSI is judged without those rows (load_high still
// covers CPU saturation there).
const (
	MemoryAvailableWarnPercent = 10.0
	MemoryAvailableCritPercent = 5.0
	SwapUsedWarnPercent        = 80.0
	MemoryPressureWarnPercent  = 10.0 // some avg60
	MemoryPressureCritPercent  = 10.0 // full avg60
	CPUPressureWarnPercent     = 50.0 // some avg60
	IOPressureWarnPercent      = 20.0 // full avg60
	LoadPerCPUWarn             = 2.0  // load5 / CPU count
	DiskUsedWarnPercent        = 90.0
	DiskUsedCritPercent        = 95.0
	InodesUsedWarnPercent      = 90.0
	InodesUsedCritPercent      = 95.0
)

// Verdicts and severities.
const (
	VerdictOK       = "ok"
	VerdictWarning  = "warning"
	VerdictCritical = "critical"
)

// Reason codes.
const (
	ReasonMemoryAvailableLow = "memory_available_low"
	ReasonSwapUsedHigh       = "swap_used_high"
	ReasonMemoryPressureHigh = "memory_pressure_high"
	ReasonCPUPressureHigh    = "cpu_pressure_high"
	ReasonIOPressureHigh     = "io_pressure_high"
	ReasonLoadHigh           = "load_high"
	ReasonDiskSpaceLow       = "disk_space_low"
	ReasonDiskInodesLow      = "disk_inodes_low"
	ReasonDiskUnresponsive   = "disk_unresponsive"
	ReasonMetricsIncomplete  = "metrics_incomplete"
)

// Health is the verdict with its reasons (an empty list when ok).
type Health struct {
	Verdict string   `json:"verdict"`
	Reasons []Reason `json:"reasons"`
}

// Reason is one crossed threshold.
type Reason struct {
	Code     string `json:"code"`
	Severity string `json:"severity"`
	// Subject narrows the reason: a mount point, or the section of
	// metrics_incomplete.
	Subject   string   `json:"subject,omitempty"`
	Value     *float64 `json:"value,omitempty"`
	Threshold *float64 `json:"threshold,omitempty"`
}

// Evaluate judges a Metrics snapshot by the thresholds above.
func Evaluate(m *Metrics) Health {
	var rs reasons
	rs.memory(m)
	rs.pressure(m)
	if l := m.CPU.Load; l != nil && m.CPU.Count > 0 {
		if per := l.Load5 / float64(m.CPU.Count); per >= LoadPerCPUWarn {
			rs.add(ReasonLoadHigh, VerdictWarning, "", per, LoadPerCPUWarn)
		}
	}
	rs.disks(m.Disks)
	for _, e := range m.Errors {
		rs = append(rs, Reason{Code: ReasonMetricsIncomplete, Severity: VerdictWarning, Subject: e})
	}
	return rs.health()
}

// reasons collects what a snapshot crosses.
type reasons []Reason

func (rs *reasons) add(code, sev, subject string, value, threshold float64) {
	v, t := round2(value), threshold
	*rs = append(*rs, Reason{Code: code, Severity: sev, Subject: subject, Value: &v, Threshold: &t})
}

// below and above add the reason at the most severe level crossed.
func (rs *reasons) below(code, subject string, v, warn, crit float64) {
	switch {
	case v < crit:
		rs.add(code, VerdictCritical, subject, v, crit)
	case v < warn:
		rs.add(code, VerdictWarning, subject, v, warn)
	}
}

func (rs *reasons) above(code, subject string, v, warn, crit float64) {
	switch {
	case v >= crit:
		rs.add(code, VerdictCritical, subject, v, crit)
	case v >= warn:
		rs.add(code, VerdictWarning, subject, v, warn)
	}
}

// memory judges available memory and swap.
func (rs *reasons) memory(m *Metrics) {
	if mem := m.Memory; mem != nil && mem.AvailablePercent != nil {
		rs.below(ReasonMemoryAvailableLow, "", *mem.AvailablePercent, MemoryAvailableWarnPercent, MemoryAvailableCritPercent)
	}
	if sw := m.Swap; sw != nil && sw.UsedPercent != nil && *sw.UsedPercent >= SwapUsedWarnPercent {
		rs.add(ReasonSwapUsedHigh, VerdictWarning, "", *sw.UsedPercent, SwapUsedWarnPercent)
	}
}

// pressure judges the PSI averages over a minute.
func (rs *reasons) pressure(m *Metrics) {
	if p := m.PSI.Memory; p != nil {
		switch {
		case p.Full != nil && p.Full.Avg60 >= MemoryPressureCritPercent:
			rs.add(ReasonMemoryPressureHigh, VerdictCritical, "full", p.Full.Avg60, MemoryPressureCritPercent)
		case p.Some != nil && p.Some.Avg60 >= MemoryPressureWarnPercent:
			rs.add(ReasonMemoryPressureHigh, VerdictWarning, "some", p.Some.Avg60, MemoryPressureWarnPercent)
		}
	}
	if p := m.PSI.CPU; p != nil && p.Some != nil && p.Some.Avg60 >= CPUPressureWarnPercent {
		rs.add(ReasonCPUPressureHigh, VerdictWarning, "some", p.Some.Avg60, CPUPressureWarnPercent)
	}
	if p := m.PSI.IO; p != nil && p.Full != nil && p.Full.Avg60 >= IOPressureWarnPercent {
		rs.add(ReasonIOPressureHigh, VerdictWarning, "full", p.Full.Avg60, IOPressureWarnPercent)
	}
}

// disks judges each answering file system's space and inodes; one that
// did not answer in time is a reason of its own.
func (rs *reasons) disks(disks []Disk) {
	for _, d := range disks {
		switch d.Status {
		case "timeout":
			*rs = append(*rs, Reason{Code: ReasonDiskUnresponsive, Severity: VerdictWarning, Subject: d.MountPoint})
			continue
		case "ok":
		default:
			continue
		}
		if d.UsedPercent != nil {
			rs.above(ReasonDiskSpaceLow, d.MountPoint, *d.UsedPercent, DiskUsedWarnPercent, DiskUsedCritPercent)
		}
		if d.InodesUsedPercent != nil {
			rs.above(ReasonDiskInodesLow, d.MountPoint, *d.InodesUsedPercent, InodesUsedWarnPercent, InodesUsedCritPercent)
		}
	}
}

// health is the verdict of the most severe reason, with every reason,
// most severe first, then by code and subject.
func (rs reasons) health() Health {
	h := Health{Verdict: VerdictOK, Reasons: []Reason{}}
	if len(rs) == 0 {
		return h
	}
	rank := func(sev string) int {
		if sev == VerdictCritical {
			return 2
		}
		return 1
	}
	slices.SortStableFunc(rs, func(a, b Reason) int {
		return cmp.Or(cmp.Compare(rank(b.Severity), rank(a.Severity)), cmp.Compare(a.Code, b.Code), cmp.Compare(a.Subject, b.Subject))
	})
	h.Reasons, h.Verdict = rs, rs[0].Severity
	return h
}
