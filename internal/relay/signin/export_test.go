package signin

import (
	"context"

	"golang.org/x/oauth2"
)

// VerifyIDToken is verifyIDToken for the tests: it checks the ID token
// of tok as the SSO callback does, after discovering the provider.
func (s *SignIn) VerifyIDToken(ctx context.Context, tok *oauth2.Token, nonce string) (string, error) {
	p, err := s.oidc.discover(ctx)
	if err != nil {
		return "", err
	}
	return s.verifyIDToken(s.oidc.context(ctx), p, tok, nonce)
}
