package testkit

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
)

// AccessACL is an access ACL in the kernel's extended attribute format
// (system.posix_acl_access), as setfacl would write it: owner rw-, the
// user uid r--, group r--, mask r--, others ---.
func AccessACL(uid uint32) []byte {
	entry := func(b []byte, tag, perm uint16, id uint32) []byte {
		b = binary.LittleEndian.AppendUint16(b, tag)
		b = binary.LittleEndian.AppendUint16(b, perm)
		return binary.LittleEndian.AppendUint32(b, id)
	}
	const none = 0xffffffff
	b := binary.LittleEndian.AppendUint32(nil, 2)
	b = entry(b, 0x01, 6, none)
	b = entry(b, 0x02, 4, uid)
	b = entry(b, 0x04, 4, none)
	b = entry(b, 0x10, 4, none)
	return entry(b, 0x20, 0, none)
}

// Xattr is path's extended attribute name; a missing one fails the test
// and reads as nil.
func Xattr(tb testing.TB, path, name string) []byte {
	tb.Helper()
	buf := make([]byte, 4096)
	n, err := unix.Getxattr(path, name, buf)
	if err != nil {
		tb.Errorf("getxattr %s: %v", name, err)
		return nil
	}
	return buf[:n]
}
