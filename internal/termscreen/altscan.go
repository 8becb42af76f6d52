package termscreen

import "bytes"

// altScan finds, in bytes that are not fed to the emulator, the last
// switch to or from the alternate screen: a DEC private mode set ('h') or
// reset ('l') of 1049, 1047 or 47, alone or among other modes.
type altScan struct {
	// last is 'h' or 'l' for the last switch seen, 0 for none.
	last byte
	// carry is the end of the bytes scanned, where a sequence the next
	// bytes complete may begin.
	carry []byte
}

// maxModeSeq bounds the private mode sequences looked for ("\x1b[?" and a
// few parameters).
const maxModeSeq = 32

// scan looks through data, which follows what was scanned before unless
// gap says bytes were lost between.
func (a *altScan) scan(data []byte, gap bool) {
	if gap {
		a.carry = a.carry[:0]
	}
	buf := append(a.carry, data...)
	for i := 0; ; {
		j := bytes.Index(buf[i:], []byte("\x1b[?"))
		if j < 0 {
			break
		}
		start := i + j
		final, end, complete := modeSeq(buf[start+3:])
		if !complete {
			// It runs to the end of buf: carried when the next bytes
			// may finish it, else given up.
			if len(buf)-start <= maxModeSeq {
				a.carry = append(a.carry[:0], buf[start:]...)
				return
			}
			break
		}
		if final != 0 {
			a.last = final
		}
		i = start + 3 + end
	}
	keep := min(len(buf), 2)
	a.carry = append(a.carry[:0], buf[len(buf)-keep:]...)
}

// modeSeq parses the parameters and final byte of a private mode sequence
// after its "\x1b[?": final is 'h' or 'l' when the sequence switches the
// alternate screen, 0 otherwise; end is where the parameters end (at the
// final byte, or at a byte no mode sequence has), where the scan goes on:
// no sequence begins there; complete is false when p ends before it does.
func modeSeq(p []byte) (final byte, end int, complete bool) {
	n, alt := 0, false
	for i, c := range p {
		if c >= '0' && c <= '9' {
			n = min(n*10+int(c-'0'), 1<<20)
			continue
		}
		if c == ';' {
			alt = alt || altMode(n)
			n = 0
			continue
		}
		if (c == 'h' || c == 'l') && (alt || altMode(n)) {
			return c, i, true
		}
		return 0, i, true
	}
	return 0, len(p), false
}

// altMode reports whether private mode n is an alternate screen's.
func altMode(n int) bool { return n == 1049 || n == 1047 || n == 47 }
