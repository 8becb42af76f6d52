package panel

import (
	"context"
	"net/http"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/relaystate"
)

// SecretPath is where a secret prompt's one-time page lives: the relay
// sends the person to SecretPath + the prompt's ID.
const SecretPath = Prefix + "secret/"

// Secrets hands a person's input for a secret prompt to its job, once;
// it returns how many bytes the job took.
type Secrets interface {
	SubmitSecret(ctx context.Context, id string, input []byte) (int, error)
}

// secretData is the secret prompt page's.
type secretData struct {
	ID     string
	Prompt *relaystate.SecretPrompt
	Device string
	// Open: the prompt still takes the input.
	Open bool
	// Sent is the byte count the job took, once the input is sent.
	Sent int
	Done bool
}

// secretPage shows a prompt and, while it is pending, the form to type
// the input in.
func (p *Panel) secretPage(w http.ResponseWriter, r *http.Request, s session) {
	d, ok := p.secretPrompt(w, r)
	if !ok {
		return
	}
	p.show(w, s, "secret", "Secret input", d)
}

// secretPrompt reads the prompt a request's path names; an unknown, used
// or expired one is answered with the one refusal.
func (p *Panel) secretPrompt(w http.ResponseWriter, r *http.Request) (secretData, bool) {
	id := r.PathValue("id")
	pr, err := p.cfg.State.SecretPrompt(id, p.cfg.Now())
	if errcode.Is(err, errcode.NotFound) {
		p.fail(w, r, http.StatusNotFound, "This secret prompt is unknown, used or expired.")
		return secretData{}, false
	}
	if err != nil {
		p.stateFailed(w, r, err)
		return secretData{}, false
	}
	d := secretData{ID: id, Prompt: pr, Device: pr.Device, Open: pr.State == relaystate.PromptPending}
	if dev, err := p.cfg.State.FindDevice(pr.Device); err == nil {
		d.Device = dev.Name
	}
	return d, true
}

// submitSecret sends the typed input (and, unless unticked, Enter) to the
// job. The input is in this request's memory only: it is not logged,
// audited or shown, and the page that answers does not carry it.
func (p *Panel) submitSecret(w http.ResponseWriter, r *http.Request, s session) {
	d, ok := p.secretPrompt(w, r)
	if !ok {
		return
	}
	if p.cfg.Secrets == nil {
		p.fail(w, r, http.StatusNotFound, "This relay takes no secret input.")
		return
	}
	input := []byte(r.PostFormValue("secret"))
	defer clear(input)
	if r.PostFormValue("enter") != "" {
		input = append(input, '\n')
	}
	began := p.cfg.Now()
	n, err := p.cfg.Secrets.SubmitSecret(r.Context(), d.ID, input)
	p.audit(s, "secret_input", d.Prompt.Device, began, err)
	switch {
	case errcode.Is(err, errcode.NotFound):
		p.fail(w, r, http.StatusNotFound, "This secret prompt is unknown, used or expired.")
		return
	case err != nil:
		e := errcode.From(err)
		p.fail(w, r, http.StatusBadGateway, "The input did not reach the job: "+e.Message+" ("+string(e.Code)+").")
		return
	}
	d.Open, d.Done, d.Sent = false, true, n
	p.show(w, s, "secret", "Secret input", d)
}
