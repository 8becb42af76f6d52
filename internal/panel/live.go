package panel

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/relaystate"
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
	CompletedAt *time.Time `json:"completed_at"`
	ExitCode    *int       `json:"exit_code"`
}

// deviceData is the Device page's.
type deviceData struct {
	Device  deviceRow
	Jobs    []job
	Refused string
}

// findDevice is the path's device, or an answer saying there is none.
func (p *Panel) findDevice(w http.ResponseWriter, r *http.Request) (*relaystate.Device, bool) {
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
// client's call, and decodes its structured result into out.
func (p *Panel) callDevice(ctx context.Context, s session, device, tool string, args any, out any) error {
	began := p.cfg.Now()
	raw, err := json.Marshal(args)
	if err == nil {
		var res json.RawMessage
		if res, err = p.cfg.Devices.CallAsAdmin(ctx, s.admin, device, tool, raw); err == nil && out != nil {
			if json.Unmarshal(res, out) != nil {
				err = errcode.New(errcode.Internal, "the device's result could not be read")
			}
		}
	}
	if ctx.Err() == nil {
		p.record(s, tool, device, began, err)
	}
	return err
}

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
	d := deviceData{Device: deviceRow{Device: *dev}}
	for _, row := range rows {
		if row.ID == dev.ID {
			d.Device = row
		}
	}
	var list struct {
		Jobs []job `json:"jobs"`
	}
	if err := p.callDevice(r.Context(), s, dev.ID, "process.jobs", struct{}{}, &list); err != nil {
		d.Refused = refusal(err)
	}
	d.Jobs = list.Jobs
	p.show(w, s, "device", dev.Name, d)
}

// jobData is a job page's.
type jobData struct {
	Device relaystate.Device
	Job    job
	// Refused says why the job could not be read.
	Refused string
}

func (p *Panel) job(w http.ResponseWriter, r *http.Request, s session) {
	dev, ok := p.findDevice(w, r)
	if !ok {
		return
	}
	d := jobData{Device: *dev}
	if err := p.callDevice(r.Context(), s, dev.ID, "process.status", map[string]string{"process_id": r.PathValue("job")}, &d.Job); err != nil {
		d.Refused = refusal(err)
	}
	p.show(w, s, "job", "Job", d)
}

func (p *Panel) stopJob(w http.ResponseWriter, r *http.Request, s session) {
	dev, ok := p.findDevice(w, r)
	if !ok {
		return
	}
	job := r.PathValue("job")
	if err := p.callDevice(r.Context(), s, dev.ID, "process.stop", map[string]string{"process_id": job}, nil); err != nil {
		p.fail(w, r, http.StatusBadGateway, "The job was not stopped: "+refusal(err))
		return
	}
	http.Redirect(w, r, Prefix+"devices/"+dev.ID+"/jobs/"+job, http.StatusSeeOther)
}

// outputPage is the part of process.output the tail reads.
type outputPage struct {
	State  string `json:"state"`
	Stdout stream `json:"stdout"`
	Stderr stream `json:"stderr"`
}

type stream struct {
	Data       string `json:"data"`
	Encoding   string `json:"encoding"`
	Offset     int64  `json:"offset"`
	NextOffset int64  `json:"next_offset"`
	EOF        bool   `json:"eof"`
}

// tail streams a job's output to the page as server-sent events: the
// last tailShown bytes of each stream, then what follows, read with the
// same long poll a client uses (process.output with wait_ms), until the
// job ends or the page goes away.
func (p *Panel) tail(w http.ResponseWriter, r *http.Request, s session) {
	dev, ok := p.findDevice(w, r)
	if !ok {
		return
	}
	fl, ok := startEvents(w)
	if !ok {
		return
	}
	ctx := r.Context()
	job := r.PathValue("job")
	var out, errOff int64 = -1, -1
	for ctx.Err() == nil {
		args := map[string]any{"process_id": job, "max_bytes": tailMaxBytes}
		if out >= 0 {
			args["stdout_offset"], args["stderr_offset"], args["wait_ms"] = out, errOff, tailWaitMS
		}
		var pg outputPage
		if err := p.callDevice(ctx, s, dev.ID, "process.output", args, &pg); err != nil {
			if ctx.Err() == nil {
				event(w, "refused", map[string]string{"message": refusal(err)})
				fl.Flush()
			}
			return
		}
		if out < 0 {
			// The first read finds where the streams stand; the tail
			// starts tailShown before their ends.
			out, errOff = max(0, pg.Stdout.NextOffset-tailShown), max(0, pg.Stderr.NextOffset-tailShown)
			if pg.Stdout.Offset != out || pg.Stderr.Offset != errOff {
				continue
			}
		}
		for _, st := range []struct {
			name string
			s    stream
		}{{"stdout", pg.Stdout}, {"stderr", pg.Stderr}} {
			if st.s.Data != "" {
				event(w, "output", map[string]string{"stream": st.name, "data": st.s.Data, "encoding": st.s.Encoding})
			}
		}
		out, errOff = pg.Stdout.NextOffset, pg.Stderr.NextOffset
		event(w, "state", map[string]string{"state": pg.State})
		fl.Flush()
		if pg.Stdout.EOF && pg.Stderr.EOF {
			event(w, "end", map[string]string{"state": pg.State})
			fl.Flush()
			return
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
	Seen      string `json:"seen"`
	Replica   string `json:"replica"`
}

// deviceEvents streams the devices' connection states to the Overview and
// Devices pages: every devicePoll it reads them, and sends them when they
// changed.
func (p *Panel) deviceEvents(w http.ResponseWriter, r *http.Request, s session) {
	fl, ok := startEvents(w)
	if !ok {
		return
	}
	var last []liveDevice
	tick := time.NewTicker(devicePoll)
	defer tick.Stop()
	for {
		rows, _, err := p.deviceRows(p.cfg.Now())
		if err == nil {
			now := make([]liveDevice, len(rows))
			for i, d := range rows {
				now[i] = liveDevice{ID: d.ID, Connected: d.Connected, Standing: d.Standing, Seen: when(d.LastSeen), Replica: d.ReplicaName}
			}
			if !slices.Equal(now, last) {
				event(w, "devices", now)
				fl.Flush()
				last = now
			}
		}
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}
