package jobs

import (
	"context"
	"testing"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/principal"
)

// TestSecretPromptMustBeUTF8: a prompt for a person to read that is not
// UTF-8 is invalid_argument, as a job's name is; JSON arguments cannot
// carry one (the decoder replaces the bytes), a caller in Go can.
func TestSecretPromptMustBeUTF8(t *testing.T) {
	for prompt, want := range map[string]errcode.Code{
		"Password:\xff": errcode.InvalidArgument,
		"\xc3":          errcode.InvalidArgument,
		"Passwort für:": errcode.ElicitationUnsupported,
	} {
		_, err := (&Service{}).Input(context.Background(), principal.Local, InputRequest{ProcessID: "p", SecretPrompt: prompt})
		if !errcode.Is(err, want) {
			t.Errorf("secret_prompt %q: %v, want %s", prompt, err, want)
		}
	}
}
