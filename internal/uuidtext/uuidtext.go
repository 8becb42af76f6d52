// Package uuidtext tells whether a string is a UUID in its canonical text
// form (8-4-4-4-12 hexadecimal digits). Job and device IDs are such
// strings, and only such strings are ever joined into a path or taken for
// an ID rather than a name. A loop, not a regular expression: a listing
// checks every job directory's name.
package uuidtext

// Canonical reports whether s is a UUID in canonical lowercase form.
func Canonical(s string) bool { return shaped(s, false) }

// AnyCase reports whether s is a UUID in canonical form, in any letter
// case.
func AnyCase(s string) bool { return shaped(s, true) }

func shaped(s string, upper bool) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || upper && 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}
