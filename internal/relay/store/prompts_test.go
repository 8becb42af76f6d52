package store

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
)

func promptT(t *testing.T, s *Store) string {
	t.Helper()
	id, err := s.CreateSecretPrompt(SecretPrompt{TokenID: "tok", Principal: "alice", Device: "dev", ProcessID: "job-1", Prompt: "Password:"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestSecretPromptLifecycle: a prompt is pending until its TTL, taken
// once, finished with the job's answer (its text forgotten), and unknown
// IDs, malformed ones and expired prompts are the one NotFound.
func TestSecretPromptLifecycle(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		id := promptT(t, s)
		if !validPromptID(id) {
			t.Fatalf("ID %q is not ccp_ and 43 base64url characters", id)
		}
		p, err := s.SecretPrompt(id, t0)
		if err != nil || p.State != PromptPending || p.Principal != "alice" || p.Device != "dev" || p.ProcessID != "job-1" ||
			p.TokenID != "tok" || p.Prompt != "Password:" || !p.ExpiresAt.Equal(t0.Add(limits.SecretPromptTTL)) {
			t.Fatalf("SecretPrompt = %+v, %v", p, err)
		}
		taken, err := s.TakeSecretPrompt(id, t0)
		if err != nil || taken.Prompt != "Password:" || taken.State != PromptPending {
			t.Fatalf("Take = %+v, %v (want the prompt as it was)", taken, err)
		}
		_, err = s.TakeSecretPrompt(id, t0)
		wantCode(t, err, errcode.NotFound)
		refusal := err.Error()
		if p, _ := s.SecretPrompt(id, t0); p.State != PromptTaken || p.Prompt != "Password:" {
			t.Fatalf("after Take: %+v", p)
		}
		answer := []byte(`{"structuredContent":{"accepted_bytes":9}}`)
		if err := s.FinishSecretPrompt(id, false, answer, t0); err != nil {
			t.Fatal(err)
		}
		p, err = s.SecretPrompt(id, t0.Add(limits.SecretPromptTTL+1))
		if err != nil || p.State != PromptDone || string(p.Result) != string(answer) || p.Prompt != "" {
			t.Fatalf("finished prompt = %+v, %v (want done, the answer, no text, still readable after its TTL)", p, err)
		}
		if err := s.FinishSecretPrompt(id, false, answer, t0); err == nil || err.Error() != refusal {
			t.Errorf("a second Finish: %v", err)
		}
		if err := s.FinishSecretPrompt(id, false, make([]byte, MaxPromptResultBytes+1), t0); !errcode.Is(err, errcode.Internal) {
			t.Errorf("an oversized answer: %v", err)
		}

		late := promptT(t, s)
		for name, try := range map[string]func() error{
			"read":           func() error { _, err := s.SecretPrompt(late, t0.Add(limits.SecretPromptTTL)); return err },
			"take":           func() error { _, err := s.TakeSecretPrompt(late, t0.Add(limits.SecretPromptTTL)); return err },
			"decline":        func() error { return s.DeclineSecretPrompt(late, t0.Add(limits.SecretPromptTTL)) },
			"unknown":        func() error { _, err := s.SecretPrompt(promptPrefix+strings.Repeat("A", 43), t0); return err },
			"shape":          func() error { _, err := s.TakeSecretPrompt("ccp_short", t0); return err },
			"finish pending": func() error { return s.FinishSecretPrompt(late, true, nil, t0) },
		} {
			if err := try(); err == nil || err.Error() != refusal {
				t.Errorf("%s: %v, want the uniform refusal %q", name, err, refusal)
			}
		}
		if _, err := s.TakeSecretPrompt(late, t0.Add(limits.SecretPromptTTL-1)); err != nil {
			t.Fatalf("a prompt just before its TTL: %v", err)
		}
		// Taken before its TTL, it may still finish after it: the input
		// reached the job.
		if err := s.FinishSecretPrompt(late, true, []byte(`{"isError":true}`), t0.Add(2*limits.SecretPromptTTL)); err != nil {
			t.Fatal(err)
		}
		if p, err := s.SecretPrompt(late, t0.Add(2*limits.SecretPromptTTL)); err != nil || p.State != PromptFailed {
			t.Fatalf("failed prompt = %+v, %v", p, err)
		}
	})
}

// TestSecretPromptDecline: a declined prompt can no longer be taken, and
// reads as declined.
func TestSecretPromptDecline(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		id := promptT(t, s)
		if err := s.DeclineSecretPrompt(id, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.TakeSecretPrompt(id, t0); !errcode.Is(err, errcode.NotFound) {
			t.Fatalf("Take after decline: %v", err)
		}
		if p, err := s.SecretPrompt(id, t0); err != nil || p.State != PromptDeclined || p.Prompt != "" {
			t.Fatalf("declined prompt = %+v, %v", p, err)
		}
	})
}

// TestSecretPromptRefusesBadText: the prompt and the job's ID are
// printable, bounded and present.
func TestSecretPromptRefusesBadText(t *testing.T) {
	s := openT(t, t.TempDir())
	for name, p := range map[string]SecretPrompt{
		"empty prompt":   {ProcessID: "j", Prompt: ""},
		"long prompt":    {ProcessID: "j", Prompt: strings.Repeat("x", limits.SecretPromptMaxBytes+1)},
		"control prompt": {ProcessID: "j", Prompt: "a\x1b[2Jb"},
		"bidi prompt":    {ProcessID: "j", Prompt: "Password for \u202egnp.exe"},
		"isolate prompt": {ProcessID: "j", Prompt: "a\u2066b\u2069"},
		"zero width":     {ProcessID: "j", Prompt: "pass\u200bword"},
		"empty job":      {ProcessID: "", Prompt: "p"},
		"long job":       {ProcessID: strings.Repeat("j", MaxProcessIDBytes+1), Prompt: "p"},
		"newline job":    {ProcessID: "j\n", Prompt: "p"},
	} {
		if _, err := s.CreateSecretPrompt(p, t0); !errcode.Is(err, errcode.InvalidArgument) {
			t.Errorf("%s: %v, want invalid_argument", name, err)
		}
	}
	if _, err := s.CreateSecretPrompt(SecretPrompt{ProcessID: strings.Repeat("j", MaxProcessIDBytes), Prompt: strings.Repeat("x", limits.SecretPromptMaxBytes)}, t0); err != nil {
		t.Errorf("at both bounds: %v", err)
	}
}

// TestSecretPromptTakenOnce: of many submitting at once, on two stores,
// exactly one takes the prompt.
func TestSecretPromptTakenOnce(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		place := newPlace(t)
		a, b := openT(t, place), openT(t, place)
		for round := 0; round < 5; round++ {
			id := promptT(t, a)
			var (
				wg   sync.WaitGroup
				mu   sync.Mutex
				wins int
			)
			for i := 0; i < 8; i++ {
				s := a
				if i%2 == 1 {
					s = b
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := s.TakeSecretPrompt(id, t0); err == nil {
						mu.Lock()
						wins++
						mu.Unlock()
					} else if !errcode.Is(err, errcode.NotFound) {
						t.Errorf("a losing Take: %v", err)
					}
				}()
			}
			wg.Wait()
			if wins != 1 {
				t.Fatalf("round %d: %d takes won, want 1", round, wins)
			}
		}
	})
}

// TestSecretPromptsPerTokenAreBounded: a token may have
// limits.SecretPromptsPerToken prompts waiting; the next is refused with
// rate_limited and says why, another token is not, and one answered,
// declined or expired makes room again.
func TestSecretPromptsPerTokenAreBounded(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		ask := func(tok string, at time.Time) (string, error) {
			return s.CreateSecretPrompt(SecretPrompt{TokenID: tok, Principal: "alice", Device: "dev", ProcessID: "job-1", Prompt: "Password:"}, at)
		}
		var ids []string
		for range limits.SecretPromptsPerToken {
			id, err := ask("tok", t0)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		_, err := ask("tok", t0)
		if !errcode.Is(err, errcode.RateLimited) || !strings.Contains(err.Error(), "waiting for a person") {
			t.Fatalf("one prompt past the bound: %v, want rate_limited", err)
		}
		if _, err := ask("other", t0); err != nil {
			t.Fatalf("another token's prompt: %v", err)
		}
		if err := s.DeclineSecretPrompt(ids[0], t0); err != nil {
			t.Fatal(err)
		}
		if _, err := ask("tok", t0); err != nil {
			t.Fatalf("after one was declined: %v", err)
		}
		if _, err := ask("tok", t0); !errcode.Is(err, errcode.RateLimited) {
			t.Fatalf("full again: %v", err)
		}
		if _, err := ask("tok", t0.Add(limits.SecretPromptTTL)); err != nil {
			t.Fatalf("once the waiting ones expired: %v", err)
		}
	})
}
