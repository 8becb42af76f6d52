package panel

import (
	"fmt"
	"html/template"
	"slices"
	"strings"
	"time"

	"github.com/commandcore/commandcore/internal/authz"
	"github.com/commandcore/commandcore/internal/humantime"
	"github.com/commandcore/commandcore/internal/relay/store"
)

// moment is a time as a page shows it: how long ago (or how soon), with
// the absolute time for a title and a datetime attribute.
type moment struct {
	Rel, Abs, ISO string
}

// funcs are the templates' functions; the panel's own bind its clock.
func (p *Panel) funcs() template.FuncMap {
	return template.FuncMap{
		"short": func(id string) string { return id[:min(len(id), 8)] },
		"join":  strings.Join,
		"at":    func(t any) moment { return at(t, p.cfg.Now()) },
		"took":  func(us int64) string { return took(time.Duration(us) * time.Microsecond) },
		"tone":  tone,
		"tools": summarize,
	}
}

// toolList is a scope's tools as a table cell shows them: Short always,
// and All, the tools one by one, when Short does not name them.
type toolList struct {
	Short string
	All   []string
}

// summarize names tools briefly, so that a connection's sixteen tools do
// not widen the Tokens table past the screen: every tool, the presets
// whose tools they are exactly, up to three tools by name, else how many.
func summarize(tools []string) toolList {
	if slices.Equal(tools, []string{authz.ScopeAll}) {
		return toolList{Short: "all tools"}
	}
	if names := presetsOf(tools); names != nil {
		return toolList{Short: strings.Join(names, ", "), All: tools}
	}
	if len(tools) <= 3 {
		return toolList{Short: strings.Join(tools, ", ")}
	}
	return toolList{Short: fmt.Sprintf("%d tools", len(tools)), All: tools}
}

// presetsOf is the fewest presets (of read, run and write) whose tools are
// exactly tools, or nil.
func presetsOf(tools []string) []string {
	want := slices.Sorted(slices.Values(tools))
	var best []string
	named := authz.Presets[:len(authz.Presets)-1]
	for mask := 1; mask < 1<<len(named); mask++ {
		var names []string
		for i, pr := range named {
			if mask&(1<<i) != 0 {
				names = append(names, pr.Name)
			}
		}
		got, _ := authz.PresetTools(names)
		if slices.Equal(slices.Sorted(slices.Values(got)), want) && (best == nil || len(names) < len(best)) {
			best = names
		}
	}
	return best
}

// at shows a time (or a *time.Time; "—" when unset) relative to now,
// with its absolute form in UTC.
func at(t any, now time.Time) moment {
	var v time.Time
	switch x := t.(type) {
	case time.Time:
		v = x
	case *time.Time:
		if x != nil {
			v = *x
		}
	}
	if v.IsZero() {
		return moment{Rel: "—"}
	}
	return moment{Rel: relative(now.Sub(v)), Abs: when(v), ISO: v.UTC().Format(time.RFC3339)}
}

// relative says how long ago d was ("3 min ago"), or, for a d below zero,
// how soon ("in 29 days"), to the largest whole unit; within 10 s either
// way, "just now".
func relative(d time.Duration) string {
	switch {
	case d <= -10*time.Second:
		return "in " + span(-d)
	case d < 10*time.Second:
		return "just now"
	}
	return span(d) + " ago"
}

// span is d (10 s or more) in its largest whole unit.
func span(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%d s", d/time.Second)
	case d < time.Hour:
		return fmt.Sprintf("%d min", d/time.Minute)
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h", d/time.Hour)
	}
	return fmt.Sprintf("%d days", d/(24*time.Hour))
}

// ttlText is a lifetime as a form takes it (humantime.ParseTTL): whole
// days, hours or minutes in their own unit (30d, 12h, 15m), anything finer
// as a Go duration.
func ttlText(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}

// when shows a time in UTC.
func when(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

// took shows a duration as the CLI does, under a millisecond included.
func took(d time.Duration) string {
	if d < time.Millisecond {
		return "< 1ms"
	}
	return humantime.Duration(d)
}

// tone is how a state's badge looks: live while it runs, ok, off (ended
// as asked or offline), or bad.
func tone(state string) string {
	switch state {
	case "starting", "running", "stopping":
		return "live"
	case "exited", "active", "connected", store.AuditOK:
		return "ok"
	case "stopped_by_request", "offline", "expired", "revoked", "removed":
		return "off"
	}
	return "bad"
}

// ending is what a page shows of how a job ended, or runs: the job page
// draws it and its tail sends it again once the job ends.
type ending struct {
	State    string `json:"state"`
	Tone     string `json:"tone"`
	Ended    string `json:"ended"`
	EndedAbs string `json:"ended_abs"`
	How      string `json:"how"`
	Took     string `json:"took"`
}

// ending is how j ended (or runs), at now.
func (j job) ending(now time.Time) ending {
	e := ending{State: j.State, Tone: j.tone(), Ended: "—", How: "—", Took: j.took(now)}
	if j.CompletedAt != nil {
		m := at(j.CompletedAt, now)
		e.Ended, e.EndedAbs = m.Rel, m.Abs
	}
	switch {
	case j.Signal != "":
		e.How = "signal " + j.Signal
	case j.ExitCode != nil:
		e.How = fmt.Sprintf("exit %d", *j.ExitCode)
	}
	if j.StoppedBy != "" {
		e.How += ", stopped by " + j.StoppedBy
	}
	return e
}

// tone is the job's badge: an exit other than 0 is bad.
func (j job) tone() string {
	if j.State == "exited" && j.ExitCode != nil && *j.ExitCode != 0 {
		return "bad"
	}
	return tone(j.State)
}

// took is how long the job ran, from its start (its admission when the
// device did not say) to its end, or until now while it runs.
func (j job) took(now time.Time) string {
	from := j.CreatedAt
	if j.StartedAt != nil {
		from = *j.StartedAt
	}
	switch {
	case from.IsZero():
		return "—"
	case j.CompletedAt != nil:
		return took(j.CompletedAt.Sub(from))
	case j.Terminal:
		return "—"
	}
	return took(now.Sub(from)) + " so far"
}

// names shows principals as people chose them: a principal that is a
// token's own ID (a token made without --principal) by the token's name.
type names map[string]string

// names reads the tokens' names; without them (the state cannot be read)
// principals show as they are.
func (p *Panel) names() names {
	toks, _ := p.cfg.State.Tokens()
	n := names{}
	for _, t := range toks {
		n[t.ID] = t.Name
	}
	return n
}

// who is a principal, or a token, as a page shows it: its name, a note
// beside it (the token's name, for a principal that is a token's own ID),
// and what it stands for in a title.
type who struct {
	Name, Note, Title string
}

// Of is the principal as a page shows it: as the CLI shows it, with the
// name of the token whose own ID it is beside it.
func (n names) Of(principal string) who {
	if name, ok := n[principal]; ok && name != principal {
		return who{Name: principal, Note: "token " + name, Title: "the principal of token " + name + ", its own ID"}
	}
	return who{Name: principal, Title: "principal " + principal}
}

// Token is a token as a page shows it: its name, its ID in the title.
func (n names) Token(id string) who {
	if name, ok := n[id]; ok {
		return who{Name: name, Title: "token " + id}
	}
	return who{Name: id, Title: "token " + id}
}
