package secretmask

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/commandcore/commandcore/internal/limits"
)

// set returns a Set that keeps secrets.
func set(t testing.TB, secrets ...string) *Set {
	t.Helper()
	s := &Set{}
	for _, k := range secrets {
		if err := s.Add([]byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// pieces is a reader that returns one piece a Read, then EOF.
type pieces struct{ p []string }

func (r *pieces) Read(b []byte) (int, error) {
	if len(r.p) == 0 {
		return 0, io.EOF
	}
	n := copy(b, r.p[0])
	if r.p[0] = r.p[0][n:]; r.p[0] == "" {
		r.p = r.p[1:]
	}
	return n, nil
}

// reads returns what each Read of r hands on, until EOF.
func reads(t *testing.T, r io.Reader) []string {
	t.Helper()
	var got []string
	buf := make([]byte, 1<<20)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			got = append(got, string(buf[:n]))
		}
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestMaskReplacesEveryOccurrence(t *testing.T) {
	for _, tc := range []struct {
		secrets []string
		in, out string
	}{
		{nil, "hunter2", "hunter2"},
		{[]string{"hunter2"}, "pw hunter2\n", "pw ***\n"},
		{[]string{"hunter2"}, "hunter2hunter2 hunter2", "****** ***"},
		{[]string{"hunter2"}, "hunter hunter22", "hunter ***2"},
		// Overlapping occurrences: the leftmost is masked, and what it
		// covered is gone.
		{[]string{"abab"}, "ababab", "***ab"},
		// At one position the longest secret wins.
		{[]string{"ab", "abcd"}, "xabcdy", "x***y"},
		{[]string{"abcd", "ab"}, "xabcdy abz", "x***y ***z"},
		{[]string{"bc", "abc"}, "abcd", "***d"},
		{[]string{"a"}, "banana", "b***n***n***"},
	} {
		got := reads(t, set(t, tc.secrets...).Reader(strings.NewReader(tc.in)))
		if strings.Join(got, "") != tc.out {
			t.Errorf("%q masked for %q: %q, want %q", tc.in, tc.secrets, got, tc.out)
		}
	}
}

// TestMaskAcrossReads: a secret the job wrote in two pieces, split at
// every byte, is masked, and what surrounds it is handed on whole.
func TestMaskAcrossReads(t *testing.T) {
	secret := "s3cr3t-p4ss"
	line := "password is " + secret + "!\n"
	start := strings.Index(line, secret)
	for cut := start; cut <= start+len(secret); cut++ {
		r := set(t, secret).Reader(&pieces{p: []string{line[:cut], line[cut:]}})
		if got := strings.Join(reads(t, r), ""); got != "password is ***!\n" {
			t.Errorf("split at %d: %q", cut, got)
		}
	}
}

// TestHeldBackOnlyWhileItCanMatch: the end of a read that begins a secret
// waits for the next read; it is handed on as soon as the next bytes show
// it is not the secret, and at the stream's end.
func TestHeldBackOnlyWhileItCanMatch(t *testing.T) {
	got := reads(t, set(t, "secret").Reader(&pieces{p: []string{"a sec", "ond; sec", "re"}}))
	want := []string{"a ", "second; ", "secre"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("reads %q, want %q", got, want)
	}
	// A held end that turns out to be the start of a longer secret.
	got = reads(t, set(t, "ab", "abcd").Reader(&pieces{p: []string{"xab", "cdy", "ab", "z"}}))
	want = []string{"x", "***y", "***z"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("reads %q, want %q", got, want)
	}
}

// TestSecretAddedWhileReading: a Reader made before a secret was kept
// masks it in what it reads after.
func TestSecretAddedWhileReading(t *testing.T) {
	s := &Set{}
	pr, pw := io.Pipe()
	r := s.Reader(pr)
	go func() {
		pw.Write([]byte("before\n"))
		s.Add([]byte("hunter2"))
		pw.Write([]byte("hunter2\n"))
		pw.Close()
	}()
	all, err := io.ReadAll(r)
	if err != nil || string(all) != "before\n***\n" {
		t.Fatalf("%q, %v", all, err)
	}
}

// TestReaderPassesErrorsOn: the source's error comes after its last bytes,
// masked, and again on every later Read.
func TestReaderPassesErrorsOn(t *testing.T) {
	boom := errors.New("boom")
	r := set(t, "secret").Reader(io.MultiReader(strings.NewReader("x secr"), iotest.ErrReader(boom)))
	all, err := io.ReadAll(r)
	if string(all) != "x secr" || !errors.Is(err, boom) {
		t.Fatalf("%q, %v", all, err)
	}
	if n, err := r.Read(make([]byte, 8)); n != 0 || !errors.Is(err, boom) {
		t.Fatalf("after the error: %d, %v", n, err)
	}
	// A small buffer takes a long masked read in turns.
	r = set(t, "a").Reader(strings.NewReader("aaaa"))
	if err := iotest.TestReader(r, []byte("************")); err != nil {
		t.Fatal(err)
	}
}

func TestSetBounds(t *testing.T) {
	s := &Set{}
	for _, bad := range [][]byte{nil, bytes.Repeat([]byte("x"), limits.SecretMaxBytes+1)} {
		if s.Add(bad) == nil {
			t.Errorf("a secret of %d bytes was kept", len(bad))
		}
	}
	if err := s.Add(bytes.Repeat([]byte("x"), limits.SecretMaxBytes)); err != nil {
		t.Fatalf("a secret of %d bytes: %v", limits.SecretMaxBytes, err)
	}
	for i := 1; i < limits.SecretsPerJob; i++ {
		if err := s.Add([]byte{'a', byte(i)}); err != nil {
			t.Fatalf("secret %d: %v", i+1, err)
		}
	}
	// Full: a secret kept already is fine, a new one is refused.
	if err := s.Add([]byte{'a', 1}); err != nil {
		t.Fatalf("a secret kept already: %v", err)
	}
	if err := s.Add([]byte("new")); !errors.Is(err, ErrFull) {
		t.Fatalf("secret %d: %v, want ErrFull", limits.SecretsPerJob+1, err)
	}
	if len(s.snapshot()) != limits.SecretsPerJob {
		t.Fatalf("%d secrets kept", len(s.snapshot()))
	}
	// The Set keeps its own copy.
	k := []byte("mine")
	s = &Set{}
	s.Add(k)
	k[0] = 'X'
	if got := strings.Join(reads(t, s.Reader(strings.NewReader("mine"))), ""); got != "***" {
		t.Fatalf("after the caller's buffer changed: %q", got)
	}
}

// TestAWholeSecretEndingARead is masked at once, not held back.
func TestAWholeSecretEndingARead(t *testing.T) {
	got := reads(t, set(t, "secret").Reader(&pieces{p: []string{"xx secret", "yy"}}))
	if strings.Join(got, "|") != "xx ***|yy" {
		t.Fatalf("reads %q", got)
	}
}

// TestOverlapIsTheLongestBeginning: for secrets that repeat themselves,
// the end of a read that begins the secret is found as a look at every
// length would find it.
func TestOverlapIsTheLongestBeginning(t *testing.T) {
	brute := func(k, text []byte) int {
		for q := len(text); q > 0; q-- {
			if bytes.HasPrefix(k, text[len(text)-q:]) {
				return q
			}
		}
		return 0
	}
	rng := rand.New(rand.NewPCG(1, 2))
	word := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = "ab"[rng.IntN(2)]
		}
		return b
	}
	for range 5000 {
		k := newSecret(word(1 + rng.IntN(8)))
		text := word(rng.IntN(len(k.b)))
		if got, want := k.overlap(text), brute(k.b, text); got != want {
			t.Fatalf("secret %q, text %q: %d, want %d", k.b, text, got, want)
		}
	}
}

func TestLine(t *testing.T) {
	long := strings.Repeat("x", limits.SecretMaxBytes)
	for data, want := range map[string]string{
		"pw\n": "pw", "\n": "", " ~\x80\xff\n": " ~\x80\xff", long + "\n": long,
	} {
		if got, err := Line([]byte(data)); err != nil || string(got) != want {
			t.Errorf("%q: %q, %v; want %q", data, got, err, want)
		}
	}
	for _, data := range []string{"pw", "", "a\nb\n", "\x1f\n", "\x00\n", "\x7f\n", "x\r\n", long + "x\n"} {
		if _, err := Line([]byte(data)); !errors.Is(err, ErrNotOneLine) {
			t.Errorf("%q: %v, want ErrNotOneLine", data, err)
		}
	}
}
