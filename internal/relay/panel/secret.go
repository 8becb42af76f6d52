package panel

import (
	"context"
	"encoding/base64"
	"net/http"
	"strings"
	"unicode"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/namechars"
	"github.com/commandcore/commandcore/internal/relay/store"
)

// SecretPath is where a secret prompt's one-time page lives: the relay
// sends the person to SecretPath + the prompt's ID.
const SecretPath = Prefix + "secret/"

// Secrets hands a person's input for a secret prompt to its job, once;
// it returns how many bytes the job took.
type Secrets interface {
	SubmitSecret(ctx context.Context, id string, input []byte) (int, error)
}

// secretShown is how much of each of a job's streams the secret page
// shows: what it last printed, so the person sees what is asking.
const secretShown = 2 << 10

// secretData is the secret prompt page's.
type secretData struct {
	ID     string
	Names  names
	Prompt *store.SecretPrompt
	Device string
	// Open: the prompt still takes the input.
	Open bool
	// Sent is the byte count the job took, once the input is sent.
	Sent int
	Done bool
	// Job is what the device says of the job, and Printed what it last
	// printed (its screen, on a terminal); Unread says why they are not
	// shown.
	Job     job
	Printed string
	Unread  string
}

// secretPage shows a prompt, the job that asks and what it last printed,
// and, while the prompt is pending, the form to type the input in.
func (p *Panel) secretPage(w http.ResponseWriter, r *http.Request, s session) {
	d, ok := p.secretPrompt(w, r)
	if !ok {
		return
	}
	if d.Open {
		p.readAsker(r.Context(), s, &d)
	}
	p.show(w, s, "secret", "Secret input", d)
}

// readAsker reads, as the admin, the job a prompt is for: its name, its
// owner and what it last printed. The agent hides an earlier secret from
// what it printed; the page shows the rest as text only.
func (p *Panel) readAsker(ctx context.Context, s session, d *secretData) {
	dev, job := d.Prompt.Device, d.Prompt.ProcessID
	err := p.callDevice(ctx, s, dev, job, "process.status", map[string]string{"process_id": job}, &d.Job)
	switch {
	case err != nil:
	case d.Job.PTY != nil:
		var scr struct {
			Lines []string `json:"lines"`
		}
		if err = p.callDevice(ctx, s, dev, job, "process.screen", map[string]string{"process_id": job}, &scr); err == nil {
			d.Printed = strings.TrimRight(strings.Join(scr.Lines, "\n"), "\n")
		}
	default:
		var pg outputPage
		read := func(ctx context.Context, args, out any) error {
			return p.callDevice(ctx, s, dev, job, "process.output", args, out)
		}
		if pg, err = lastOutput(ctx, read, job, secretShown); err == nil {
			d.Printed = strings.TrimRight(decoded(pg.Stdout)+decoded(pg.Stderr), "\n")
		}
	}
	if err != nil {
		d.Unread = refusal(err)
	}
	d.Printed = strings.Map(shown, d.Printed)
}

// decoded is a page's bytes as text.
func decoded(st stream) string {
	if st.Encoding != "base64" {
		return st.Data
	}
	b, _ := base64.StdEncoding.DecodeString(st.Data)
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// shown keeps a printed character that reads as itself, lines and tabs
// included, and replaces any other (a terminal's escape, a bidi override).
func shown(r rune) rune {
	if r == '\n' || r == '\t' || !namechars.Hidden(r) {
		return r
	}
	return '\uFFFD'
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
	d := secretData{ID: id, Prompt: pr, Device: pr.Device, Open: pr.State == store.PromptPending, Names: p.names()}
	if dev, err := p.cfg.State.FindDevice(pr.Device); err == nil {
		d.Device = dev.Name
	}
	return d, true
}

// submitSecret sends the typed input (and, unless unticked, Enter) to the
// job. The input is one line: a newline or another control character in
// it is refused, and the prompt keeps waiting. The input is in this
// request's memory only: it is not logged, audited or shown, and the page
// that answers does not carry it.
func (p *Panel) submitSecret(w http.ResponseWriter, r *http.Request, s session) {
	d, ok := p.secretPrompt(w, r)
	if !ok {
		return
	}
	if p.cfg.Secrets == nil {
		p.fail(w, r, http.StatusNotFound, "This relay takes no secret input.")
		return
	}
	if strings.IndexFunc(r.PostFormValue("secret"), unicode.IsControl) >= 0 {
		p.readAsker(r.Context(), s, &d)
		p.render(w, http.StatusBadRequest, "secret.html", page{Title: "Secret input", Tab: "secret", Admin: s.admin, CSRF: s.csrf(), Data: d,
			Notice: "Nothing was sent: the input is one line, without a newline, carriage return or other control character. The prompt still waits."})
		return
	}
	input := []byte(r.PostFormValue("secret"))
	defer clear(input)
	if r.PostFormValue("enter") != "" {
		input = append(input, '\n')
	}
	began := p.cfg.Now()
	n, err := p.cfg.Secrets.SubmitSecret(r.Context(), d.ID, input)
	p.audit(s, "secret_input", d.Prompt.Device, d.Prompt.ProcessID, began, err)
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
