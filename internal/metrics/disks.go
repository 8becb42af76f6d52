package metrics

import (
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// Disks are the host's real file systems, read from procRoot/self/mountinfo
// (procfs parses it) and measured with statfs(2). The rule, after
// node_exporter's filesystem collector:
//
//   - A mount is skipped when its type is a pseudo or memory file system
//     (pseudoFSTypes: proc, sysfs, cgroup, tmpfs, devtmpfs, overlay,
//     squashfs, nsfs, …) — these have no storage of their own, or (overlay)
//     report the storage of a file system that is listed itself.
//   - A mount is skipped when its mount point lies under /proc, /sys, /dev,
//     /run/credentials, /snap, or a container runtime's storage
//     (/var/lib/docker, /var/lib/containers/storage) — kernel interfaces,
//     snap images and per-container bind mounts.
//   - A device (major:minor) mounted several times (bind mounts) is listed
//     once: at the mount of its root when there is one, else at its first
//     mount in mountinfo order.
//   - Network file systems (nfs, cifs, …) are real and listed. A statfs that
//     hangs (a dead server) is abandoned after DiskStatTimeout and reported
//     as "timeout"; while that call is still stuck the mount is not asked
//     again, so stuck calls never pile up.
//
// At most MaxDisks file systems are listed, sorted by mount point.
const (
	// MaxDisks bounds the disk list; disks_truncated says when it cut.
	MaxDisks = 64
	// DiskStatTimeout bounds the statfs calls of one system.metrics call
	// (they run in parallel).
	DiskStatTimeout = 500 * time.Millisecond
)

// pseudoFSTypes have no storage of their own (or mirror one listed itself).
var pseudoFSTypes = map[string]bool{
	"autofs": true, "binfmt_misc": true, "bpf": true, "cgroup": true, "cgroup2": true,
	"configfs": true, "debugfs": true, "devpts": true, "devtmpfs": true, "efivarfs": true,
	"fusectl": true, "fuse.lxcfs": true, "fuse.gvfsd-fuse": true, "fuse.portal": true,
	"fuse.snapfuse": true, "hugetlbfs": true, "iso9660": true, "mqueue": true, "nsfs": true,
	"overlay": true, "proc": true, "procfs": true, "pstore": true, "ramfs": true,
	"rpc_pipefs": true, "nfsd": true, "securityfs": true, "selinuxfs": true, "squashfs": true,
	"erofs": true, "sysfs": true, "tmpfs": true, "tracefs": true, "aufs": true, "shm": true,
}

// skippedMountPrefixes are mount points (and everything under them) that are
// never real storage worth listing.
var skippedMountPrefixes = []string{
	"/proc", "/sys", "/dev", "/run/credentials", "/snap",
	"/var/lib/docker", "/var/lib/containers/storage",
}

// Disk is one real file system. The sizes are absent when its statfs failed
// or timed out (status says which).
type Disk struct {
	MountPoint string `json:"mount_point"`
	Device     string `json:"device"`
	FSType     string `json:"fstype"`
	ReadOnly   bool   `json:"read_only"`
	// Status is "ok", "timeout" (statfs did not answer within
	// DiskStatTimeout) or "unreadable".
	Status         string  `json:"status"`
	SizeBytes      *uint64 `json:"size_bytes,omitempty"`
	UsedBytes      *uint64 `json:"used_bytes,omitempty"`
	AvailableBytes *uint64 `json:"available_bytes,omitempty"` // to unprivileged users
	FreeBytes      *uint64 `json:"free_bytes,omitempty"`      // including the root reserve
	// UsedPercent is used / (used + available), as df(1) computes it.
	UsedPercent *float64 `json:"used_percent,omitempty"`
	InodesTotal *uint64  `json:"inodes_total,omitempty"`
	InodesFree  *uint64  `json:"inodes_free,omitempty"`
	// InodesUsedPercent is absent for file systems without a fixed inode
	// table (they report zero inodes, e.g. btrfs).
	InodesUsedPercent *float64 `json:"inodes_used_percent,omitempty"`
}

type diskState struct {
	mu    sync.Mutex
	stuck map[string]bool // mount points whose statfs is still running
}

// realMounts applies the rule above to a parsed mount table.
func realMounts(mounts []*procfs.MountInfo) []*procfs.MountInfo {
	byDev := map[string]int{}
	var out []*procfs.MountInfo
	for _, m := range mounts {
		mp := unescapeMount(m.MountPoint)
		if pseudoFSTypes[m.FSType] || skippedMount(mp) {
			continue
		}
		c := *m
		c.MountPoint = mp
		c.Source = unescapeMount(m.Source)
		if i, ok := byDev[m.MajorMinorVer]; ok {
			if out[i].Root != "/" && m.Root == "/" {
				out[i] = &c
			}
			continue
		}
		byDev[m.MajorMinorVer] = len(out)
		out = append(out, &c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].MountPoint < out[j].MountPoint })
	return out
}

func hasOption(opts map[string]string, name string) bool {
	_, ok := opts[name]
	return ok
}

func skippedMount(mp string) bool {
	for _, p := range skippedMountPrefixes {
		if mp == p || strings.HasPrefix(mp, p+"/") {
			return true
		}
	}
	return false
}

// unescapeMount undoes the kernel's octal escapes in mountinfo (\040 for a
// space, \011, \012, \134); procfs returns the fields raw.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// disks lists and measures the real file systems; truncated reports a cut at
// MaxDisks.
func (s *Source) disks() (disks []Disk, truncated bool, err error) {
	mounts, err := s.fs.GetMounts()
	if err != nil {
		return nil, false, err
	}
	real := realMounts(mounts)
	if len(real) > MaxDisks {
		real, truncated = real[:MaxDisks], true
	}
	disks = make([]Disk, len(real))
	type result struct {
		i   int
		st  unix.Statfs_t
		err error
	}
	results := make(chan result, len(real))
	pending := 0
	for i, m := range real {
		disks[i] = Disk{
			MountPoint: m.MountPoint, Device: m.Source, FSType: m.FSType,
			ReadOnly: hasOption(m.Options, "ro") || hasOption(m.SuperOptions, "ro"),
			Status:   "timeout",
		}
		if !s.startStatfs(m.MountPoint) {
			continue // the previous call is still stuck
		}
		pending++
		go func(i int, mp string) {
			var st unix.Statfs_t
			err := s.statfs(mp, &st)
			s.endStatfs(mp)
			results <- result{i, st, err}
		}(i, m.MountPoint)
	}
	deadline := time.NewTimer(DiskStatTimeout)
	defer deadline.Stop()
	for ; pending > 0; pending-- {
		select {
		case r := <-results:
			if r.err != nil {
				disks[r.i].Status = "unreadable"
				continue
			}
			fillDisk(&disks[r.i], &r.st)
		case <-deadline.C:
			return disks, truncated, nil
		}
	}
	return disks, truncated, nil
}

// startStatfs marks a statfs of mp as running; false when one still is.
func (s *Source) startStatfs(mp string) bool {
	s.mounts.mu.Lock()
	defer s.mounts.mu.Unlock()
	if s.mounts.stuck[mp] {
		return false
	}
	if s.mounts.stuck == nil {
		s.mounts.stuck = map[string]bool{}
	}
	s.mounts.stuck[mp] = true
	return true
}

func (s *Source) endStatfs(mp string) {
	s.mounts.mu.Lock()
	defer s.mounts.mu.Unlock()
	delete(s.mounts.stuck, mp)
}

func fillDisk(d *Disk, st *unix.Statfs_t) {
	bs := uint64(st.Bsize)
	if st.Frsize > 0 {
		bs = uint64(st.Frsize)
	}
	size := st.Blocks * bs
	free := st.Bfree * bs
	avail := st.Bavail * bs
	used := size - free
	if free > size {
		used = 0
	}
	d.Status = "ok"
	d.SizeBytes, d.FreeBytes, d.AvailableBytes, d.UsedBytes = &size, &free, &avail, &used
	if used+avail > 0 {
		p := round2(float64(used) / float64(used+avail) * 100)
		d.UsedPercent = &p
	}
	files, ffree := st.Files, st.Ffree
	d.InodesTotal, d.InodesFree = &files, &ffree
	if files > 0 && ffree <= files {
		p := round2(float64(files-ffree) / float64(files) * 100)
		d.InodesUsedPercent = &p
	}
}
