package panel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/uuidtext"
)

const (
	// devicePoll is how often the live device list reads the state: a
	// link that ends shows within it.
	devicePoll = 2 * time.Second
	// tailWaitMS is each long poll of a job's output, as a client's.
	tailWaitMS = 25000
	// tailMaxBytes is how much output one poll takes per stream.
	tailMaxBytes = 64 << 10
	// tailShown is how much of a job's output the page starts from: its
	// last bytes, a tail.
	tailShown = 16 << 10
	// sseRetryMS is how soon a browser reconnects an event stream.
	sseRetryMS = 2000
	// lastOutputReads bounds the reads that find a job's last output:
	// pages of tailMaxBytes walk a retained head and tail of 1 MiB in 22.
	lastOutputReads = 32
)

// job is what the panel shows of a job: the fields of process.jobs and
// process.status it reads (the relay links no job code, so it decodes
// them itself).
type job struct {
	ProcessID   string     `json:"process_id"`
	Name        string     `json:"name"`
	Owner       string     `json:"owner"`
	State       string     `json:"state"`
	Terminal    bool       `json:"terminal"`
	CreatedAt   time.Time  `json:"created_at"`
	StartedAt   *time.Time `json:"started_at"`
	CompletedAt *time.Time `json:"completed_at"`
	ExitCode    *int       `json:"exit_code"`
	Signal      string     `json:"signal"`
	StoppedBy   string     `json:"stopped_by"`
	// PTY is set for a job on a terminal.
	PTY *struct{} `json:"pty"`
}

// jobRow is a job as the Device page lists it: Path is its page, empty
// when the device gave an ID that is not a job's (a UUID), which the
// panel puts in no address.
type jobRow struct {
	job
	Ending ending
	Path   string
}

// deviceData is the Device page's.
type deviceData struct {
	Device  deviceRow
	Names   names
	Jobs    []jobRow
	Refused string
	Admin   string
}

// jobPath is the address of a job's page. Both IDs must be checked
// UUIDs: a device's ID is the relay's own, a job's comes from the request
// path or a device's answer, and either could otherwise aim a link or a
// form (Stop, with its CSRF token) at another of the panel's addresses.
func jobPath(device, job string) string {
	return Prefix + "devices/" + device + "/jobs/" + job
}

// pathJob is the job the request's path names, or an answer saying there
// is no such job: a job's ID is a UUID.
func (p *Panel) pathJob(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("job")
	if !uuidtext.Canonical(id) {
		p.fail(w, r, http.StatusNotFound, "There is no such job: a job's ID is a UUID.")
		return "", false
	}
	return id, true
}

// findDevice is the path's device, or an answer saying there is none.
func (p *Panel) findDevice(w http.ResponseWriter, r *http.Request) (*store.Device, bool) {
	dev, err := p.cfg.State.FindDevice(r.PathValue("device"))
	switch {
	case errcode.Is(err, errcode.NotFound):
		p.fail(w, r, http.StatusNotFound, "There is no such device.")
		return nil, false
	case err != nil:
		p.stateFailed(w, r, err)
		return nil, false
	}
	return dev, true
}

// callDevice calls tool on the device as the admin, audited like a
// client's call (naming job, the job it is about, if any), and decodes
// its structured result into out.
func (p *Panel) callDevice(ctx context.Context, s session, device, job, tool string, args any, out any) error {
	began := p.cfg.Now()
	err := p.call(ctx, s, device, tool, args, out)
	if ctx.Err() == nil {
		p.record(s, tool, device, job, began, err)
	}
	return err
}

// call calls tool on the device as the admin and decodes its structured
// result into out, unaudited: only callDevice and a watch, which audit
// what they do, use it.
func (p *Panel) call(ctx context.Context, s session, device, tool string, args any, out any) error {
	raw, err := json.Marshal(args)
	if err != nil {
		return err
	}
	res, err := p.cfg.Devices.CallAsAdmin(ctx, s.admin, device, tool, raw)
	if err == nil && out != nil && json.Unmarshal(res, out) != nil {
		err = errcode.New(errcode.Internal, "the device's result could not be read")
	}
	return err
}

// reader is how lastOutput reads a job's output: an audited call, or a
// watch's.
type reader func(ctx context.Context, args, out any) error

// watch is a live page's reads of one job: its stream is audited as one
// thing, an entry when it opens and one when it closes saying how long it
// was open, not an entry per long poll (an open page would fill the log).
type watch struct {
	p           *Panel
	s           session
	device, job string
	began       time.Time
}

// read is one of the watch's reads of the job's output, unaudited.
func (w *watch) read(ctx context.Context, args, out any) error {
	return w.p.call(ctx, w.s, w.device, "process.output", args, out)
}

// status reads the job's record, unaudited: the stream's last read, so
// the page shows how the job ended without a reload. false: the device
// did not answer, or answered for another job.
func (w *watch) status(ctx context.Context, id string) (job, bool) {
	var j job
	err := w.p.call(ctx, w.s, w.device, "process.status", map[string]string{"process_id": id}, &j)
	return j, err == nil && j.ProcessID == id
}

// opened audits the stream's start: err is its first read's.
func (w *watch) opened(err error) { w.p.audit(w.s, "tail_open", w.device, w.job, w.began, err) }

// closed audits the stream's end, with its whole duration: err is the read
// that ended it, nil when the job ended or the page went away.
func (w *watch) closed(err error) { w.p.audit(w.s, "tail_close", w.device, w.job, w.began, err) }

// refusal says, for a person, why a device call gave no jobs.
func refusal(err error) string {
	switch errcode.From(err).Code {
	case errcode.AdminRefused:
		return "This device does not allow admin views (its owner's permissions.json says \"admin\": false)."
	case errcode.DeviceOffline:
		return "The device is not connected, so its jobs cannot be listed now."
	case errcode.DeviceTimeout, errcode.Unavailable:
		return "The device did not answer in time; try again shortly."
	}
	return "The device refused to list its jobs (" + string(errcode.From(err).Code) + ")."
}

func (p *Panel) device(w http.ResponseWriter, r *http.Request, s session) {
	dev, ok := p.findDevice(w, r)
	if !ok {
		return
	}
	rows, _, err := p.deviceRows(p.cfg.Now())
	if err != nil {
		p.stateFailed(w, r, err)
		return
	}
	d := deviceData{Device: deviceRow{Device: *dev}, Admin: s.admin, Names: p.names()}
	for _, row := range rows {
		if row.ID == dev.ID {
			d.Device = row
		}
	}
	var list struct {
		Jobs []job `json:"jobs"`
	}
	if err := p.callDevice(r.Context(), s, dev.ID, "", "process.jobs", struct{}{}, &list); err != nil {
		d.Refused = refusal(err)
	}
	for _, j := range list.Jobs {
		row := jobRow{job: j, Ending: j.ending(p.cfg.Now())}
		if uuidtext.Canonical(j.ProcessID) {
			row.Path = jobPath(dev.ID, j.ProcessID)
		}
		d.Jobs = append(d.Jobs, row)
	}
	p.show(w, s, "device", dev.Name, d)
}

// jobData is a job page's: Path is the job's address, made from the
// request's checked IDs.
type jobData struct {
	Device store.Device
	Job    job
	Ending ending
	Names  names
	Path   string
	// Audit is the Audit page of the job's entries.
	Audit string
	// Refused says why the job could not be read.
	Refused string
}

func (p *Panel) job(w http.ResponseWriter, r *http.Request, s session) {
	dev, ok := p.findDevice(w, r)
	if !ok {
		return
	}
	id, ok := p.pathJob(w, r)
	if !ok {
		return
	}
	d := jobData{Device: *dev, Path: jobPath(dev.ID, id), Names: p.names(), Audit: Prefix + "audit?job=" + id}
	if err := p.callDevice(r.Context(), s, dev.ID, id, "process.status", map[string]string{"process_id": id}, &d.Job); err != nil {
		d.Refused = refusal(err)
	} else if d.Job.ProcessID != id {
		d.Refused = "The device answered with another job than the one asked for, so its answer is not shown."
	}
	d.Ending = d.Job.ending(p.cfg.Now())
	p.show(w, s, "job", "Job", d)
}

func (p *Panel) stopJob(w http.ResponseWriter, r *http.Request, s session) {
	dev, ok := p.findDevice(w, r)
	if !ok {
		return
	}
	id, ok := p.pathJob(w, r)
	if !ok {
		return
	}
	if err := p.callDevice(r.Context(), s, dev.ID, id, "process.stop", map[string]string{"process_id": id}, nil); err != nil {
		p.fail(w, r, http.StatusBadGateway, "The job was not stopped: "+refusal(err))
		return
	}
	http.Redirect(w, r, jobPath(dev.ID, id), http.StatusSeeOther)
}

// output is an output event: a chunk of one stream, and whether it is of
// what the job printed before the page opened.
type output struct {
	Stream   string `json:"stream"`
	Data     string `json:"data"`
	Encoding string `json:"encoding"`
	History  bool   `json:"history,omitempty"`
}

// outputPage is the part of process.output the tail reads.
type outputPage struct {
	State    string `json:"state"`
	Terminal bool   `json:"terminal"`
	Stdout   stream `json:"stdout"`
	Stderr   stream `json:"stderr"`
}

type stream struct {
	Data       string `json:"data"`
	Encoding   string `json:"encoding"`
	Offset     int64  `json:"offset"`
	NextOffset int64  `json:"next_offset"`
	EOF        bool   `json:"eof"`
}

// lastOutput reads the last n bytes of each of a job's streams, walking
// forward from where a first read finds them: process.output pages from
// an offset, and the streams' ends are known only once read.
func lastOutput(ctx context.Context, read reader, job string, n int64) (outputPage, error) {
	args := map[string]any{"process_id": job, "max_bytes": tailMaxBytes}
	for range lastOutputReads {
		var pg outputPage
		if err := read(ctx, args, &pg); err != nil {
			return pg, err
		}
		out, errOff := max(0, pg.Stdout.NextOffset-n), max(0, pg.Stderr.NextOffset-n)
		if pg.Stdout.Offset == out && pg.Stderr.Offset == errOff {
			return pg, nil
		}
		args["stdout_offset"], args["stderr_offset"] = out, errOff
	}
	return outputPage{}, errcode.New(errcode.Internal, "the device's output pages do not reach the end of its output")
}

// errSignedOut ends a live page whose session ended.
var errSignedOut = errors.New("the panel session ended")

// whileSignedIn is r's context, ended as well once s's session ends:
// signed out, expired, or its admin revoked. It re-checks the session
// every limits.PanelLiveRecheck without counting as its use; a state it
// cannot read ends the page too, which the browser then opens again.
func (p *Panel) whileSignedIn(r *http.Request, s session) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(r.Context())
	go func() {
		tick := time.NewTicker(limits.PanelLiveRecheck)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if err := p.cfg.State.SessionLive(s.secret, p.cfg.Now()); err != nil {
					cancel(errSignedOut)
					return
				}
			}
		}
	}()
	return ctx, func() { cancel(nil) }
}

// signedOut tells a live page that its session ended, when it did.
func signedOut(ctx context.Context, w http.ResponseWriter, fl http.Flusher) {
	if errors.Is(context.Cause(ctx), errSignedOut) {
		event(w, "signed_out", map[string]string{"message": "Your session ended; sign in again to follow this page."})
		fl.Flush()
	}
}

// tail streams a job's output to the page as server-sent events: the
// last tailShown bytes of each stream, then what follows, read with the
// same long poll a client uses (process.output with wait_ms), until the
// job ends, the page goes away or its session ends.
func (p *Panel) tail(w http.ResponseWriter, r *http.Request, s session) {
	dev, ok := p.findDevice(w, r)
	if !ok {
		return
	}
	job, ok := p.pathJob(w, r)
	if !ok {
		return
	}
	fl, ok := startEvents(w)
	if !ok {
		return
	}
	ctx, stop := p.whileSignedIn(r, s)
	defer stop()
	defer signedOut(ctx, w, fl)
	wt := &watch{p: p, s: s, device: dev.ID, job: job, began: p.cfg.Now()}
	pg, err := lastOutput(ctx, wt.read, job, tailShown)
	if ctx.Err() != nil {
		return
	}
	wt.opened(err)
	if err == nil {
		err = p.follow(ctx, w, fl, wt, job, pg, true)
		wt.closed(err)
	}
	if err != nil && ctx.Err() == nil {
		event(w, "refused", map[string]string{"message": refusal(err)})
		fl.Flush()
	}
}

// follow sends pg and what follows it until the job ends (nil) or a read
// fails (its error; a page that went away is no failure). history marks
// pg as what the job printed before the page opened: each stream's last
// part as kept, in an order between the two that the capture does not
// record, which the page says.
func (p *Panel) follow(ctx context.Context, w http.ResponseWriter, fl http.Flusher, wt *watch, id string, pg outputPage, history bool) error {
	for {
		for _, st := range []struct {
			name string
			s    stream
		}{{"stdout", pg.Stdout}, {"stderr", pg.Stderr}} {
			if st.s.Data != "" {
				event(w, "output", output{Stream: st.name, Data: st.s.Data, Encoding: st.s.Encoding, History: history})
			}
		}
		history = false
		event(w, "state", map[string]string{"state": pg.State, "tone": tone(pg.State)})
		fl.Flush()
		// Both streams sealed is not yet the end: the supervisor seals
		// them before it exits, and the job is stopping until it has.
		if pg.Stdout.EOF && pg.Stderr.EOF && pg.Terminal {
			end := job{State: pg.State}.ending(p.cfg.Now())
			if j, ok := wt.status(ctx, id); ok {
				end = j.ending(p.cfg.Now())
			}
			event(w, "end", end)
			fl.Flush()
			return nil
		}
		args := map[string]any{"process_id": id, "max_bytes": tailMaxBytes,
			"stdout_offset": pg.Stdout.NextOffset, "stderr_offset": pg.Stderr.NextOffset, "wait_ms": tailWaitMS}
		pg = outputPage{}
		if err := wt.read(ctx, args, &pg); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// startEvents begins an event stream, telling the browser how soon to
// reconnect; false when w cannot stream (then it has answered).
func startEvents(w http.ResponseWriter) (http.Flusher, bool) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return nil, false
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprintf(w, "retry: %d\n\n", sseRetryMS)
	fl.Flush()
	return fl, true
}

// event writes one server-sent event whose data is v as JSON (one line:
// JSON escapes every newline).
func event(w http.ResponseWriter, name string, v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
}

// liveDevice is a device's row as the live list sends it.
type liveDevice struct {
	ID        string `json:"id"`
	Connected bool   `json:"connected"`
	Standing  string `json:"standing"`
	// StandingTone is the standing's badge.
	StandingTone string `json:"standing_tone"`
	Seen         string `json:"seen"`
	SeenAt       string `json:"seen_at"`
	Replica      string `json:"replica"`
}

// deviceEvents streams the devices' connection states to the Overview and
// Devices pages: every devicePoll it reads them, and sends them when they
// changed, until the page goes away or its session ends.
func (p *Panel) deviceEvents(w http.ResponseWriter, r *http.Request, s session) {
	fl, ok := startEvents(w)
	if !ok {
		return
	}
	ctx, stop := p.whileSignedIn(r, s)
	defer stop()
	defer signedOut(ctx, w, fl)
	var last []liveDevice
	tick := time.NewTicker(devicePoll)
	defer tick.Stop()
	for {
		rows, _, err := p.deviceRows(p.cfg.Now())
		if err == nil {
			now, key := make([]liveDevice, len(rows)), make([]liveDevice, len(rows))
			for i, d := range rows {
				seen := at(d.LastSeen, p.cfg.Now())
				key[i] = liveDevice{ID: d.ID, Connected: d.Connected, Standing: d.Standing, StandingTone: tone(d.Standing), SeenAt: seen.Abs, Replica: d.ReplicaName}
				now[i] = key[i]
				now[i].Seen = seen.Rel
			}
			// Sent when a device changed, not as "3 min ago" turns "4 min ago".
			if !slices.Equal(key, last) {
				event(w, "devices", now)
				fl.Flush()
				last = key
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
