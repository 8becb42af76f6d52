package jobs

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/principal"
)

// recheckInterval is how often a wait derives each pending job's full
// record. Between rechecks it only looks for the supervisor's terminal
// record, one stat a job, so waiting on 32 jobs costs little; the full
// record also sees the ends no supervisor published (a lost supervisor,
// a failed launch, a unit killed by the service manager).
const recheckInterval = time.Second

// Wait modes.
const (
	WaitAny = "any"
	WaitAll = "all"
)

// WaitRequest is process.wait's input.
type WaitRequest struct {
	ProcessIDs []string `json:"process_ids" jsonschema:"1-32 distinct process_ids of jobs to wait for"`
	Mode       string   `json:"mode,omitempty" jsonschema:"any (default): return when one of the jobs is terminal; all: when every one is"`
	TimeoutMS  *int     `json:"timeout_ms,omitempty" jsonschema:"0-600000, default 60000: return at this point with the live jobs as pending; 0 looks once"`
	Until      *Until   `json:"until,omitempty" jsonschema:"with exactly one job: also return as soon as this holds (output text, a listening port, a path); instead of polling process.output"`
}

// WaitResult is process.wait's result.
type WaitResult struct {
	// Ended are the full records of the terminal jobs, in request order.
	Ended []*jobmeta.Record `json:"ended" jsonschema:"the records of the jobs that have ended, in request order"`
	// Pending are the jobs still live, in request order.
	Pending []string `json:"pending" jsonschema:"the IDs of the jobs still live"`
	Met     string   `json:"met" jsonschema:"what ended the wait: ended (the jobs, as mode asks), output, port, path (an until condition) or timeout"`
	// Stream and Offset say where until.output's text was found.
	Stream string `json:"stream,omitempty" jsonschema:"with met output: the stream the text was found in"`
	Offset *int64 `json:"offset,omitempty" jsonschema:"with met output: the offset in that stream where the text begins"`
	// Line is the line the text was found in, bounded (lineAround).
	Line string `json:"line,omitempty" jsonschema:"with met output: the line the text is in, at most 200 bytes of it around the text, ... where it was cut or goes on"`
}

func met(mode string, ended, total int) bool {
	if mode == WaitAll {
		return ended == total
	}
	return ended > 0
}

// validate checks a wait request and returns its mode and timeout.
func (req *WaitRequest) validate() (string, time.Duration, error) {
	if n := len(req.ProcessIDs); n < 1 || n > limits.WaitMaxJobs {
		return "", 0, errcode.New(errcode.InvalidArgument, "process_ids must name between 1 and %d jobs", limits.WaitMaxJobs)
	}
	seen := make(map[string]bool, len(req.ProcessIDs))
	for _, id := range req.ProcessIDs {
		if seen[id] {
			return "", 0, errcode.New(errcode.InvalidArgument, "process_ids names a job twice")
		}
		seen[id] = true
	}
	if req.Until != nil {
		if err := req.Until.validate(req.ProcessIDs); err != nil {
			return "", 0, err
		}
	}
	mode := req.Mode
	switch mode {
	case "":
		mode = WaitAny
	case WaitAny, WaitAll:
	default:
		return "", 0, errcode.New(errcode.InvalidArgument, "mode must be %q or %q", WaitAny, WaitAll)
	}
	timeout := limits.WaitTimeoutDefault
	if req.TimeoutMS != nil {
		ms := *req.TimeoutMS
		timeout = time.Duration(ms) * time.Millisecond
		if ms < 0 || timeout > limits.WaitTimeoutMax {
			return "", 0, errcode.New(errcode.InvalidArgument, "timeout_ms must be between 0 and %d", limits.WaitTimeoutMax.Milliseconds())
		}
	}
	return mode, timeout, nil
}

// Wait returns when one (mode all: every) job of req is terminal, when an
// until condition holds, at the timeout, or as soon as ctx ends, with what
// it saw last. A job who may not see answers not_found, as one that does
// not exist; so does a job forgotten while the wait ran. exists looks for
// until.path; nil looks anywhere.
func (s *Service) Wait(ctx context.Context, who principal.Principal, req WaitRequest, exists PathProbe) (*WaitResult, error) {
	mode, timeout, err := req.validate()
	if err != nil {
		return nil, err
	}
	conds, err := s.newConditions(req.Until, req.ProcessIDs[0], exists)
	if err != nil {
		return nil, err
	}
	ended := make(map[string]*jobmeta.Record, len(req.ProcessIDs))
	check := func(id string) error {
		rec, err := s.get(who, id)
		if err != nil {
			return err
		}
		if rec.Terminal {
			ended[id] = rec
		}
		return nil
	}
	for _, id := range req.ProcessIDs {
		if err := check(id); err != nil {
			return nil, err
		}
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	lastFull := time.Now()
	for {
		// A condition is checked before the end it may precede: output
		// written just before the job ended is what the caller waited for.
		if conds != nil {
			what, m, err := conds.check(ctx, s)
			if err != nil {
				return nil, err
			}
			if what != "" {
				res := waitResult(req.ProcessIDs, ended, what)
				if what == MetOutput {
					res.Stream, res.Offset, res.Line = m.stream, &m.at, m.line
				}
				return res, nil
			}
		}
		if met(mode, len(ended), len(req.ProcessIDs)) {
			return waitResult(req.ProcessIDs, ended, MetEnded), nil
		}
		select {
		case <-ctx.Done():
			return waitResult(req.ProcessIDs, ended, MetTimeout), nil
		case <-deadline.C:
			return waitResult(req.ProcessIDs, ended, MetTimeout), nil
		case <-tick.C:
		}
		full := time.Since(lastFull) >= recheckInterval
		if full {
			lastFull = time.Now()
		}
		for _, id := range req.ProcessIDs {
			if ended[id] != nil || !full && !s.published(id) {
				continue
			}
			if err := check(id); err != nil {
				return nil, err
			}
		}
	}
}

// published reports whether job id's supervisor has published its terminal
// record.
func (s *Service) published(id string) bool {
	_, err := os.Stat(filepath.Join(s.store.Dir(id), jobmeta.ResultFile))
	return err == nil
}

func waitResult(ids []string, ended map[string]*jobmeta.Record, met string) *WaitResult {
	res := &WaitResult{Ended: []*jobmeta.Record{}, Pending: []string{}, Met: met}
	for _, id := range ids {
		if rec := ended[id]; rec != nil {
			res.Ended = append(res.Ended, rec)
		} else {
			res.Pending = append(res.Pending, id)
		}
	}
	return res
}
