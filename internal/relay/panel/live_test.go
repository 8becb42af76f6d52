package panel

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
)

// hostile is a job ID a device (or whoever forges its answers) could give
// to aim a link or the Stop form, CSRF token included, elsewhere.
const hostile = "../../build-box/revoke?x="

// TestNoAddressIsBuiltFromADevicesJobID: a job ID from a device that is
// not a UUID gets no link; the job page's Stop form and tail are built
// from the request's checked IDs, whatever process_id the device answers;
// a path naming no UUID is no job and reaches no device.
func TestNoAddressIsBuiltFromADevicesJobID(t *testing.T) {
	f := newFixture(t, false)
	dev := enrolled(t, f, "box")
	enrolled(t, f, "build-box")
	c := f.signIn("alice")
	f.devices.fn = func(tool string, _ json.RawMessage) (json.RawMessage, error) {
		if tool == "process.jobs" {
			return json.RawMessage(`{"jobs":[{"process_id":"` + hostile + `","owner":"mallory","state":"running"},
				{"process_id":"` + job1 + `","owner":"bob","state":"running"}]}`), nil
		}
		return json.RawMessage(`{"process_id":"` + hostile + `","owner":"mallory","state":"running"}`), nil
	}
	addr := regexp.MustCompile(`(?:href|action|data-tail)="([^"]*)"`)
	_, page := f.do(c, "GET", Prefix+"devices/"+dev.ID, nil, nil)
	var links []string
	for _, m := range addr.FindAllStringSubmatch(page, -1) {
		if strings.Contains(m[1], "/jobs/") {
			links = append(links, m[1])
		}
		if strings.Contains(m[1], "revoke") || strings.Contains(m[1], "..") {
			t.Errorf("the device page has an address aimed by the device: %q", m[1])
		}
	}
	if len(links) != 1 || links[0] != jobPath(dev.ID, job1) || !strings.Contains(page, "(not a job ID)") {
		t.Errorf("job links %q, want only %s's, and the other row marked:\n%s", links, job1, page)
	}

	_, page = f.do(c, "GET", jobPath(dev.ID, job1), nil, nil)
	for _, m := range addr.FindAllStringSubmatch(page, -1) {
		if strings.Contains(m[1], "revoke") || strings.Contains(m[1], "..") {
			t.Errorf("the job page has an address aimed by the device: %q", m[1])
		}
	}
	if strings.Contains(page, `id="stop"`) || !strings.Contains(page, "another job than the one asked for") {
		t.Errorf("a job page the device answered for another job:\n%s", page)
	}
	f.devices.fn = func(tool string, _ json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"process_id":"` + job1 + `","owner":"bob","state":"running"}`), nil
	}
	_, page = f.do(c, "GET", jobPath(dev.ID, job1), nil, nil)
	for _, want := range []string{`action="` + jobPath(dev.ID, job1) + `/stop"`, `data-tail="` + jobPath(dev.ID, job1) + `/tail"`, `id="stop"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the job page lacks %q", want)
		}
	}

	f.devices.mu.Lock()
	before := len(f.devices.calls)
	f.devices.mu.Unlock()
	csrf := f.csrf(c)
	for _, job := range []string{"p-1", strings.ToUpper(job1), job1 + "0", url.PathEscape(hostile)} {
		for _, path := range []string{"", "/tail"} {
			if resp, body := f.do(c, "GET", jobPath(dev.ID, job)+path, nil, nil); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "no such job") {
				t.Errorf("GET job %q%s: %d", job, path, resp.StatusCode)
			}
		}
		if resp, _ := f.do(c, "POST", jobPath(dev.ID, job)+"/stop", url.Values{"csrf": {csrf}}, nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("Stop job %q: %d", job, resp.StatusCode)
		}
	}
	f.devices.mu.Lock()
	after := len(f.devices.calls)
	f.devices.mu.Unlock()
	if after != before {
		t.Errorf("paths naming no job made %d device calls", after-before)
	}
}

// openStream opens a live page's event stream and returns its lines as
// they come, closed when the stream ends.
func openStream(t *testing.T, f *fixture, c *http.Client, path string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", f.srv.URL+path, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", path, resp.StatusCode)
	}
	lines := make(chan string, 64)
	go func() {
		defer resp.Body.Close()
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return lines
}

// ended waits for a stream's end and returns its lines, or fails after
// within.
func ended(t *testing.T, lines <-chan string, within time.Duration) string {
	t.Helper()
	var got []string
	deadline := time.After(within)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return strings.Join(got, "\n")
			}
			got = append(got, l)
		case <-deadline:
			t.Fatalf("the stream is still open after %s:\n%s", within, strings.Join(got, "\n"))
		}
	}
}

// TestLivePagesEndWithTheirSession: a job's tail waiting on the device's
// long poll, and the device list, end within 5 s of their admin's
// revocation or sign-out, saying so; another admin's stream goes on.
func TestLivePagesEndWithTheirSession(t *testing.T) {
	f := newFixture(t, false)
	dev := enrolled(t, f, "box")
	f.devices.wait = func(ctx context.Context, _ string, args json.RawMessage) (json.RawMessage, error) {
		if !strings.Contains(string(args), "wait_ms") {
			return json.RawMessage(`{"state":"running","stdout":{"data":"hi\n","encoding":"utf-8","offset":0,"next_offset":3},"stderr":{"encoding":"utf-8"}}`), nil
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	alice, bob, carol := f.signIn("alice"), f.signIn("bob"), f.signIn("carol")
	aliceTail := openStream(t, f, alice, jobPath(dev.ID, job1)+"/tail")
	aliceList := openStream(t, f, alice, Prefix+"events/devices")
	bobList := openStream(t, f, bob, Prefix+"events/devices")
	carolTail := openStream(t, f, carol, jobPath(dev.ID, job1)+"/tail")
	time.Sleep(100 * time.Millisecond)
	if err := f.state.RevokeAdmin("alice", time.Now()); err != nil {
		t.Fatal(err)
	}
	if resp, _ := f.do(carol, "POST", Prefix+"logout", url.Values{"csrf": {f.csrf(carol)}}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", resp.StatusCode)
	}
	within := limits.PanelLiveRecheck + time.Second
	for name, lines := range map[string]<-chan string{"alice's tail": aliceTail, "alice's device list": aliceList, "carol's tail": carolTail} {
		body := ended(t, lines, within)
		if !strings.Contains(body, "event: signed_out") || !strings.Contains(body, "sign in again") {
			t.Errorf("%s ended without saying why:\n%s", name, body)
		}
	}
	// Bob's stream passed the same re-check and goes on.
	time.Sleep(500 * time.Millisecond)
	for {
		select {
		case l, ok := <-bobList:
			if !ok || strings.HasPrefix(l, "event: signed_out") {
				t.Fatalf("bob's device list ended with the others (%q, open %v)", l, ok)
			}
			continue
		default:
		}
		break
	}
}

// TestTailStartsAtTheLastOutput: the tail starts tailShown bytes before
// each stream's end, read again from there when the first page did not
// start there; it ends only once both streams are at their end and the job
// is terminal (sealed streams of a job still stopping go on); a device
// whose pages never reach the end is given up on after lastOutputReads.
func TestTailStartsAtTheLastOutput(t *testing.T) {
	f := newFixture(t, false)
	dev := enrolled(t, f, "box")
	c := f.signIn("alice")
	var polls []string
	page := func(out, outNext, errOff, errNext int64, outEOF, errEOF bool, state string) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"state":%q,"terminal":%v,"stdout":{"data":"o%d","encoding":"utf-8","offset":%d,"next_offset":%d,"eof":%v},
			"stderr":{"data":"e%d","encoding":"utf-8","offset":%d,"next_offset":%d,"eof":%v}}`, state, state == "exited", out, out, outNext, outEOF, errOff, errOff, errNext, errEOF))
	}
	f.devices.fn = func(tool string, args json.RawMessage) (json.RawMessage, error) {
		if tool == "process.status" {
			return json.RawMessage(`{"process_id":"` + job1 + `","state":"exited"}`), nil
		}
		polls = append(polls, string(args))
		switch len(polls) {
		case 1:
			return page(0, 20000, 0, 100, false, false, "running"), nil
		case 2:
			return page(3616, 20000, 0, 100, false, false, "running"), nil
		case 3:
			return page(20000, 20000, 100, 100, true, false, "running"), nil
		case 4:
			// Both streams sealed, the supervisor not yet gone.
			return page(20000, 20000, 100, 100, true, true, "stopping"), nil
		}
		return page(20000, 20000, 100, 100, true, true, "exited"), nil
	}
	_, body := f.do(c, "GET", jobPath(dev.ID, job1)+"/tail", nil, nil)
	want := []string{`{"max_bytes":65536,"process_id":"` + job1 + `"}`,
		`{"max_bytes":65536,"process_id":"` + job1 + `","stderr_offset":0,"stdout_offset":3616}`,
		`{"max_bytes":65536,"process_id":"` + job1 + `","stderr_offset":100,"stdout_offset":20000,"wait_ms":25000}`,
		`{"max_bytes":65536,"process_id":"` + job1 + `","stderr_offset":100,"stdout_offset":20000,"wait_ms":25000}`,
		`{"max_bytes":65536,"process_id":"` + job1 + `","stderr_offset":100,"stdout_offset":20000,"wait_ms":25000}`}
	if strings.Join(polls, "\n") != strings.Join(want, "\n") {
		t.Errorf("polls:\n%s\nwant:\n%s", strings.Join(polls, "\n"), strings.Join(want, "\n"))
	}
	if strings.Contains(body, `"data":"o0"`) || !strings.Contains(body, `"data":"o3616"`) || strings.Count(body, "event: end") != 1 ||
		!strings.Contains(body, `"state":"stopping"`) || strings.Index(body, `"state":"stopping"`) > strings.Index(body, "event: end") {
		t.Errorf("the tail:\n%s", body)
	}

	polls = nil
	f.devices.fn = func(_ string, args json.RawMessage) (json.RawMessage, error) {
		polls = append(polls, string(args))
		return page(0, 1<<20, 0, 0, false, false, "running"), nil
	}
	_, body = f.do(c, "GET", jobPath(dev.ID, job1)+"/tail", nil, nil)
	if len(polls) != lastOutputReads || !strings.Contains(body, "event: refused") || strings.Contains(body, "event: output") {
		t.Errorf("a device whose pages never reach the end: %d reads, tail:\n%s", len(polls), body)
	}
}

// TestTailIsAuditedOncePerStream: a tail that long-polls the device many
// times writes two audit entries, one when it opens and one when it
// closes with how long it was open, and none per poll; a tail the device
// refuses at once is one failed entry, and one a read ends is closed as
// failed with the read's code.
func TestTailIsAuditedOncePerStream(t *testing.T) {
	f := newFixture(t, false)
	dev := enrolled(t, f, "box")
	c := f.signIn("alice")
	const polls = 40
	var n int
	f.devices.fn = func(tool string, args json.RawMessage) (json.RawMessage, error) {
		if tool == "process.status" {
			return json.RawMessage(`{"process_id":"` + job1 + `","state":"exited"}`), nil
		}
		n++
		if n == polls {
			return json.RawMessage(`{"state":"exited","terminal":true,"stdout":{"offset":40,"next_offset":40,"eof":true},"stderr":{"eof":true}}`), nil
		}
		return json.RawMessage(fmt.Sprintf(`{"state":"running","stdout":{"data":"x","encoding":"utf-8","offset":%d,"next_offset":%d},"stderr":{}}`, n-1, n)), nil
	}
	tail := func() []string {
		f.mu.Lock()
		f.audited = nil
		f.mu.Unlock()
		_, body := f.do(c, "GET", jobPath(dev.ID, job1)+"/tail", nil, nil)
		f.mu.Lock()
		defer f.mu.Unlock()
		var rows []string
		for _, e := range f.audited {
			if e.DurationUS < 0 || e.Principal != "admin:alice" || e.Device != dev.ID || e.Job != job1 {
				t.Errorf("audit entry %+v", e)
			}
			rows = append(rows, strings.TrimSpace(e.Tool+" "+e.Outcome+" "+e.Code))
		}
		if strings.Count(body, "event: output") < 1 {
			t.Errorf("the tail sent no output:\n%s", body)
		}
		return rows
	}
	if got := tail(); n != polls || strings.Join(got, "|") != "panel.tail_open ok|panel.tail_close ok" {
		t.Errorf("a tail of %d polls audited %q, want one entry as it opened and one as it closed", n, got)
	}
	n = 0
	f.devices.fn = func(_ string, args json.RawMessage) (json.RawMessage, error) {
		if n++; n == 5 {
			return nil, errcode.New(errcode.DeviceOffline, "gone")
		}
		return json.RawMessage(fmt.Sprintf(`{"state":"running","stdout":{"data":"x","encoding":"utf-8","offset":%d,"next_offset":%d},"stderr":{}}`, n-1, n)), nil
	}
	if got := tail(); strings.Join(got, "|") != "panel.tail_open ok|panel.tail_close failed device_offline" {
		t.Errorf("a tail a read ended audited %q", got)
	}
	f.devices.fn = nil
	f.mu.Lock()
	f.audited = nil
	f.mu.Unlock()
	_, body := f.do(c, "GET", jobPath(dev.ID, job1)+"/tail", nil, nil)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.audited) != 1 || f.audited[0].Tool != "panel.tail_open" || f.audited[0].Code != "device_offline" || !strings.Contains(body, "event: refused") {
		t.Errorf("a tail the device refused audited %+v:\n%s", f.audited, body)
	}
}
