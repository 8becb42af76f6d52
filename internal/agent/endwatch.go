package agent

import (
	"github.com/commandcore/commandcore/internal/activity"
	"github.com/commandcore/commandcore/internal/jobs"
	"github.com/commandcore/commandcore/internal/principal"
)

// endWatch journals each job's end once: a job the agent saw live and now
// sees terminal.
type endWatch struct {
	live map[string]bool
}

func (w *endWatch) observe(svc *jobs.Service) {
	recs, err := svc.List(principal.Local)
	if err != nil {
		return
	}
	now := make(map[string]bool, len(recs))
	for _, r := range recs {
		switch {
		case r.State.Live():
			now[r.ProcessID] = true
		case r.Terminal && w.live[r.ProcessID]:
			svc.Journal().Record(activity.JobEndEvent(r.ProcessID, r.State))
		}
	}
	w.live = now
}
