package cluster

import "testing"

// FuzzOpen: whatever reaches a replica from NATS, open never panics, and
// nothing opens but what the key sealed for that subject.
func FuzzOpen(f *testing.F) {
	s, err := newSealer(testKey)
	if err != nil {
		f.Fatal(err)
	}
	sealed := s.seal("commandcore.replica.r1.call", &head{Call: "c", Part: 1, Tool: "process.jobs"}, []byte(`{"a":1}`))
	f.Add("commandcore.replica.r1.call", sealed)
	f.Add("commandcore.replica.r2.call", sealed)
	f.Add("x", []byte{sealVersion})
	f.Add("x", []byte{})
	f.Fuzz(func(t *testing.T, subject string, body []byte) {
		h, data, err := s.open(subject, body)
		if err != nil {
			return
		}
		// The seed is sealed again in each fuzzing process (another nonce),
		// so what opens is judged by what it says, not by its bytes.
		if subject != "commandcore.replica.r1.call" {
			t.Fatalf("opened a message the key sealed for another subject as %q: %+v %q", subject, h, data)
		}
		if h.Call != "c" || h.Part != 1 || h.Tool != "process.jobs" || string(data) != `{"a":1}` {
			t.Fatalf("opened the sealed message as %+v %q", h, data)
		}
	})
}
