// Package capture keeps the on-disk output capture of one stream (stdout or
// stderr) of a managed job (README; docs/limits.md).
//
// A capture retains the first limits.CaptureHeadBytes and the last
// limits.CaptureTailBytes of the stream; the middle is discarded without ever
// blocking the producer. One process (the job's supervisor) writes the file
// with a Writer while any number of other processes page it with ReadPage.
//
// File layout (little endian):
//
//	[0, 4096)                 header: magic, version, sizes, counters, flags, CRC32
//	[4096, +Head)             stream positions [0, Head)
//	[4096+Head, +Tail+Chunk)  ring: position p >= Head lives at slot (p-Head) mod ring
//
// The writer stores data first and publishes the header after it, with one
// pwrite, so a reader — or the file left behind by a SIGKILLed writer — never
// sees a header that claims bytes not yet on disk. The ring is
// limits.CaptureRingSlack larger than the tail, and the writer never stores
// more than that past the published end, so those bytes never touch the
// published tail window; a reader re-reads the header after reading ring
// bytes and drops any the writer may have lapped since.
//
// Write publishes before it returns. Drain, the supervisor's copy loop,
// publishes at a bounded rate instead: before it would store more than the
// slack past the published end, and within limits.CapturePublishInterval of
// any output, even when the producer then goes quiet. It moves a pipe
// with no user-space buffer: spliced into the file until the ring
// has been stored once, then read straight into a shared mapping of the
// ring. Every byte is stored, even those the ring overwrites before the
// stream ends: the slack rule leaves no way to skip them (see reserve).
package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"time"

	"github.com/commandcore/commandcore/internal/limits"
)

var (
	// ErrCorrupt reports a capture file that is truncated, garbled or of an
	// unknown format.
	ErrCorrupt = errors.New("capture: corrupt capture file")
	// ErrInvalid reports an invalid argument (negative offset, non-positive max).
	ErrInvalid = errors.New("capture: invalid argument")
	// ErrOffsetBeyondEnd reports an offset past the end of a complete stream.
	ErrOffsetBeyondEnd = errors.New("capture: offset beyond end of stream")
)

const (
	headBytes  = limits.CaptureHeadBytes
	tailBytes  = limits.CaptureTailBytes
	slackBytes = limits.CaptureRingSlack
	ringBytes  = tailBytes + slackBytes
	readBytes  = limits.CaptureReadBytes

	headerSize    = 4096
	ringOffset    = headerSize + headBytes
	formatVersion = 1
	// headerRetries bounds re-reads of a header torn by a concurrent pwrite.
	headerRetries = 5
)

// headerRetryDelay paces the later header re-reads, for a writer descheduled
// mid-pwrite; fuzz tests zero it so corrupt inputs fail fast.
var headerRetryDelay = 200 * time.Microsecond

// Header field offsets; the CRC covers [0, offCRC).
const (
	offMagic      = 0
	offVersion    = 8
	offFlags      = 12
	offHeadBytes  = 16
	offTailBytes  = 20
	offSlackBytes = 24
	offHeaderSize = 28
	offObserved   = 32
	offStored     = 40
	offLastOutput = 48
	offCRC        = 56
	fieldsLen     = 60
)

const (
	flagComplete   uint32 = 1 << iota // sealed after EOF
	flagWriteError                    // a disk write failed; retention stopped there
	knownFlags     = flagComplete | flagWriteError
)

var magic = [8]byte{'C', 'C', 'C', 'A', 'P', 'T', 'U', 'R'}

// errChecksum is the only header error worth retrying: a read that raced the
// writer's header pwrite.
var errChecksum = fmt.Errorf("%w: header checksum mismatch", ErrCorrupt)

// Meta is the capture metadata of one stream.
type Meta struct {
	ObservedBytes int64 // bytes the stream produced
	RetainedBytes int64 // bytes kept on disk
	DroppedBytes  int64 // ObservedBytes - RetainedBytes
	Truncated     bool  // DroppedBytes > 0
	Complete      bool  // the capture reached EOF and was sealed
	WriteError    bool  // a disk write failed; later bytes were dropped
	LastOutputAt  time.Time
}

// header is the decoded header. stored is the stream position up to which
// bytes were written to disk; it equals observed unless a write failed.
type header struct {
	observed int64
	stored   int64
	lastNano int64
	flags    uint32
}

func (h *header) encode(b []byte) {
	le := binary.LittleEndian
	copy(b[offMagic:], magic[:])
	le.PutUint32(b[offVersion:], formatVersion)
	le.PutUint32(b[offFlags:], h.flags)
	le.PutUint32(b[offHeadBytes:], headBytes)
	le.PutUint32(b[offTailBytes:], tailBytes)
	le.PutUint32(b[offSlackBytes:], slackBytes)
	le.PutUint32(b[offHeaderSize:], headerSize)
	le.PutUint64(b[offObserved:], uint64(h.observed))
	le.PutUint64(b[offStored:], uint64(h.stored))
	le.PutUint64(b[offLastOutput:], uint64(h.lastNano))
	le.PutUint32(b[offCRC:], crc32.ChecksumIEEE(b[:offCRC]))
}

func decodeHeader(b []byte) (header, error) {
	le := binary.LittleEndian
	if len(b) < fieldsLen || [8]byte(b[offMagic:]) != magic {
		return header{}, fmt.Errorf("%w: bad magic", ErrCorrupt)
	}
	if v := le.Uint32(b[offVersion:]); v != formatVersion {
		return header{}, fmt.Errorf("%w: unknown format version %d", ErrCorrupt, v)
	}
	if crc32.ChecksumIEEE(b[:offCRC]) != le.Uint32(b[offCRC:]) {
		return header{}, errChecksum
	}
	if le.Uint32(b[offHeadBytes:]) != headBytes || le.Uint32(b[offTailBytes:]) != tailBytes ||
		le.Uint32(b[offSlackBytes:]) != slackBytes || le.Uint32(b[offHeaderSize:]) != headerSize {
		return header{}, fmt.Errorf("%w: unexpected layout sizes", ErrCorrupt)
	}
	observed, stored := le.Uint64(b[offObserved:]), le.Uint64(b[offStored:])
	h := header{
		observed: int64(observed),
		stored:   int64(stored),
		lastNano: int64(le.Uint64(b[offLastOutput:])),
		flags:    le.Uint32(b[offFlags:]),
	}
	switch {
	case observed > math.MaxInt64 || stored > observed:
		return header{}, fmt.Errorf("%w: impossible counters", ErrCorrupt)
	case h.lastNano < 0:
		return header{}, fmt.Errorf("%w: negative output time", ErrCorrupt)
	case h.flags&^knownFlags != 0:
		return header{}, fmt.Errorf("%w: unknown flags %#x", ErrCorrupt, h.flags)
	case h.stored != h.observed && h.flags&flagWriteError == 0:
		return header{}, fmt.Errorf("%w: bytes dropped without a write error", ErrCorrupt)
	}
	return h, nil
}

// layout returns the retained ranges [0, headEnd) and [tailStart, stored)
// when stream bytes [0, stored) were written; they touch when
// stored <= Head+Tail.
func layout(stored int64) (headEnd, tailStart int64) {
	return min(stored, headBytes), max(headBytes, stored-tailBytes)
}

// minFileSize is the smallest file that holds every byte the header claims.
func (h header) minFileSize() int64 {
	size := int64(headerSize) + min(h.stored, headBytes)
	if h.stored > headBytes {
		size = ringOffset + min(h.stored-headBytes, ringBytes)
	}
	return size
}

func (h header) meta() Meta {
	headEnd, tailStart := layout(h.stored)
	retained := headEnd + max(0, h.stored-tailStart)
	m := Meta{
		ObservedBytes: h.observed,
		RetainedBytes: retained,
		DroppedBytes:  h.observed - retained,
		Truncated:     h.observed > retained,
		Complete:      h.flags&flagComplete != 0,
		WriteError:    h.flags&flagWriteError != 0,
	}
	if h.lastNano != 0 {
		m.LastOutputAt = time.Unix(0, h.lastNano)
	}
	return m
}

// locate maps stream position pos to its file offset and returns how many of
// the following n bytes are contiguous on disk there.
func locate(pos int64, n int) (off int64, k int) {
	if pos < headBytes {
		return headerSize + pos, int(min(int64(n), headBytes-pos))
	}
	slot := (pos - headBytes) % ringBytes
	return ringOffset + slot, int(min(int64(n), ringBytes-slot))
}
