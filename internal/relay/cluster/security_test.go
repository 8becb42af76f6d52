package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/natstest"
	"github.com/commandcore/commandcore/internal/relay"
	"github.com/commandcore/commandcore/internal/testkit"
)

// attacker is a client of the NATS server that holds no cluster key: it
// reads every subject and publishes where it likes.
type attacker struct {
	nc   *nats.Conn
	mu   sync.Mutex
	seen []*nats.Msg
}

func newAttacker(t *testing.T, url string) *attacker {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	a := &attacker{nc: nc}
	if _, err := nc.Subscribe(">", func(m *nats.Msg) {
		a.mu.Lock()
		a.seen = append(a.seen, m)
		a.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return a
}

// captured are the messages seen on subjects starting with prefix.
func (a *attacker) captured(prefix string) []*nats.Msg {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*nats.Msg
	for _, m := range a.seen {
		if strings.HasPrefix(m.Subject, prefix) {
			out = append(out, m)
		}
	}
	return out
}

// replay publishes each message again as it was seen.
func (a *attacker) replay(t *testing.T, ms []*nats.Msg) {
	t.Helper()
	for _, m := range ms {
		if err := a.nc.PublishMsg(&nats.Msg{Subject: m.Subject, Reply: m.Reply, Header: m.Header, Data: m.Data}); err != nil {
			t.Fatal(err)
		}
	}
	a.nc.Flush()
}

// inboxes are the reply subjects the server's clients are subscribed to,
// as its monitoring lists them: where answers and cancellations go.
func inboxes(t *testing.T, ns *server.Server) []string {
	t.Helper()
	cz, err := ns.Connz(&server.ConnzOptions{Subscriptions: true})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range cz.Conns {
		for _, s := range c.Subs {
			if strings.HasPrefix(s, "_INBOX.") && !strings.HasSuffix(s, "*") {
				out = append(out, s)
			}
		}
	}
	return out
}

// heldHere is a holder's side whose calls send progress, then wait to be
// released (or cancelled).
type heldHere struct {
	progress []string
	release  chan struct{}
	started  chan struct{}
	calls    atomic.Int32
	cancels  atomic.Int32
}

func newHeldHere(progress ...string) *heldHere {
	return &heldHere{progress: progress, release: make(chan struct{}), started: make(chan struct{}, 16)}
}

func (h *heldHere) CallHere(ctx context.Context, _ string, call relay.Call, progress func([]byte)) ([]byte, error) {
	h.calls.Add(1)
	for _, p := range h.progress {
		progress([]byte(p))
	}
	h.started <- struct{}{}
	select {
	case <-h.release:
		return append([]byte(`{"echo":`), append(call.Arguments, '}')...), nil
	case <-ctx.Done():
		h.cancels.Add(1)
		return nil, ctx.Err()
	}
}

func (h *heldHere) LinkAnswersHere(context.Context, string) bool { return true }

// servedOn serves replica r1 through here on a new NATS server and returns
// the serving peer, a calling peer and the server.
func servedOn(t *testing.T, here relay.Here) (*Peers, *Peers, *server.Server) {
	t.Helper()
	ns := natstest.Start(t)
	s := newPeers(t, ns.ClientURL(), testKey)
	if err := s.Serve("r1", here); err != nil {
		t.Fatal(err)
	}
	return s, newPeers(t, ns.ClientURL(), testKey), ns
}

// TestAnEavesdropperLearnsNothing: a client of replica 1 calls a device
// linked to replica 0, with a secret in its arguments that the device
// echoes in its result and progress; a NATS client reading every subject
// sees neither the secret, nor the tool, the device or the grant, nor any
// header saying what a message is.
func TestAnEavesdropperLearnsNothing(t *testing.T) {
	c := newCluster(t, 2)
	a := newAttacker(t, c.natsURL)
	c.link(t, 0, echoDevice(3, nil))
	s := c.connect(t, 1, "/mcp/dev", &mcp.ClientOptions{ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {}})
	const secret = "hunter2-the-prod-db-password"
	params := &mcp.CallToolParams{Name: "process.run", Arguments: map[string]any{"command": "echo " + secret}}
	params.SetProgressToken("p")
	res, err := s.CallTool(context.Background(), params)
	if err != nil || res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, secret) {
		t.Fatalf("the call through replica 1: %v %+v", err, res)
	}
	ms := a.captured(SubjectPrefix)
	if len(ms) == 0 {
		t.Fatal("the eavesdropper saw no call: it is not where the replicas talk")
	}
	ms = append(ms, a.captured("_INBOX.")...)
	for _, m := range ms {
		for _, leak := range []string{secret, "process.run", c.dev.ID, "chunk 0"} {
			if bytes.Contains(m.Data, []byte(leak)) {
				t.Errorf("a message on %s carries %q in clear", m.Subject, leak)
			}
		}
		if len(m.Header) != 0 {
			t.Errorf("a message on %s has headers %v", m.Subject, m.Header)
		}
	}
}

// TestForgedAnswersAndCancelsAreDropped: while a call runs, a NATS client
// without the key publishes on every inbox it can list: an answer shaped
// as the replicas' earlier unsealed protocol ("result", number 1), an
// empty message and noise. The call is not cancelled, its answer is the
// device's, and both replicas count what they dropped.
func TestForgedAnswersAndCancelsAreDropped(t *testing.T) {
	h := newHeldHere()
	server, caller, ns := servedOn(t, h)
	a := newAttacker(t, ns.ClientURL())
	done := make(chan []byte, 1)
	go func() {
		res, err := caller.Call(context.Background(), "r1", "dev", relay.Call{Tool: "process.jobs", Arguments: json.RawMessage(`{"n":1}`), Grant: "g"}, nil)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	<-h.started
	var subs []string
	testkit.Eventually(t, 5*time.Second, func() error {
		if subs = inboxes(t, ns); len(subs) < 2 {
			return fmt.Errorf("the monitoring lists %d inboxes, want the answer's and the cancellation's", len(subs))
		}
		return nil
	})
	for _, subject := range subs {
		// Sealed with the key, but for another call.
		a.nc.Publish(subject, server.seal.seal(subject, &head{Call: "another call", Kind: kindResult, Seq: 1}, []byte(`{}`)))
		forged := nats.NewMsg(subject)
		forged.Header.Set("Cc-Seq", "1")
		forged.Header.Set("Cc-Kind", "result")
		forged.Data = []byte(`{"content":[{"type":"text","text":"forged"}]}`)
		a.nc.PublishMsg(forged)
		a.nc.Publish(subject, nil)
		a.nc.Publish(subject, bytes.Repeat([]byte{1}, 200))
	}
	a.nc.Flush()
	testkit.Eventually(t, 5*time.Second, func() error {
		if caller.Dropped()[DropForged] < 3 || server.Dropped()[DropForged] < 3 ||
			caller.Dropped()[DropReplayed] < 1 || server.Dropped()[DropReplayed] < 1 {
			return errors.New("not every forged message was counted yet")
		}
		return nil
	})
	close(h.release)
	if res := <-done; string(res) != `{"echo":{"n":1}}` {
		t.Fatalf("the answer is %q, not the device's", res)
	}
	if n := h.cancels.Load(); n != 0 {
		t.Fatalf("a forged cancellation cancelled the call")
	}
}

// TestReplayedCallsAndAnswersAreDropped: a NATS client without the key
// publishes again every message of a call it saw: the request while it
// runs and after it ended, and an answer while it runs. The device is
// called once, the caller sees each progress once, and the replays are
// counted.
func TestReplayedCallsAndAnswersAreDropped(t *testing.T) {
	h := newHeldHere("first", "second")
	server, caller, ns := servedOn(t, h)
	a := newAttacker(t, ns.ClientURL())
	var progress atomic.Int32
	done := make(chan error, 1)
	big := json.RawMessage(`"` + strings.Repeat("x", 2*caller.partBytes()) + `"`)
	go func() {
		_, err := caller.Call(context.Background(), "r1", "dev", relay.Call{Tool: "process.jobs", Arguments: big, Grant: "g"},
			func([]byte) { progress.Add(1) })
		done <- err
	}()
	<-h.started
	testkit.Eventually(t, 5*time.Second, func() error {
		if len(a.captured("_INBOX.")) < 2 {
			return errors.New("the progress was not seen yet")
		}
		return nil
	})
	request := a.captured(callSubject("r1"))
	if len(request) != 3 {
		t.Fatalf("the request crossed in %d messages, want 3", len(request))
	}
	a.replay(t, request)
	a.replay(t, a.captured("_INBOX."))
	testkit.Eventually(t, 5*time.Second, func() error {
		if server.Dropped()[DropReplayed] < 3 || caller.Dropped()[DropReplayed] < 2 {
			return errors.New("not every replay was counted yet")
		}
		return nil
	})
	close(h.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	a.replay(t, request)
	testkit.Eventually(t, 5*time.Second, func() error {
		if server.Dropped()[DropReplayed] < 6 {
			return errors.New("the replay after the end was not counted yet")
		}
		return nil
	})
	if n := h.calls.Load(); n != 1 {
		t.Fatalf("the device was called %d times", n)
	}
	if n := progress.Load(); n != 2 {
		t.Fatalf("the caller saw %d progress messages, want 2", n)
	}
}

// TestAnotherKeyIsNoReplica: a peer holding another cluster key (a
// replica of another database on the same NATS) reaches nothing: its
// call is never served, its probe never answered, and the replica counts
// them as forged.
func TestAnotherKeyIsNoReplica(t *testing.T) {
	h := newHeldHere()
	server, _, ns := servedOn(t, h)
	stranger := newPeers(t, ns.ClientURL(), bytes.Repeat([]byte{8}, 32))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := stranger.Call(ctx, "r1", "dev", relay.Call{Tool: "process.jobs", Grant: "g"}, nil); err == nil {
		t.Fatal("a call sealed with another key was answered")
	}
	ctx, cancel = context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if stranger.LinkAnswers(ctx, "r1", "dev") {
		t.Fatal("a probe sealed with another key was answered")
	}
	if n := h.calls.Load(); n != 0 {
		t.Fatalf("the holder served %d calls sealed with another key", n)
	}
	if n := server.Dropped()[DropForged]; n != 2 {
		t.Fatalf("the replica counts %d forged messages, want 2", n)
	}
	if _, err := New(nil, []byte("short")); err == nil {
		t.Fatal("a cluster key of 5 bytes was taken")
	}
}

// sealedPart is part n of call id for replica r1, with data, until
// deadline.
func sealedPart(p *Peers, id string, n int, more bool, data []byte, deadline time.Time) *nats.Msg {
	subject := callSubject("r1")
	return &nats.Msg{Subject: subject, Data: p.seal.seal(subject, &head{Call: id, Part: n, More: more, Deadline: deadline.UnixNano(),
		Reply: "_INBOX.x", Tool: "process.jobs"}, data)}
}

// TestWhatIsBufferedIsBounded: the parts of calls still arriving are
// bounded per call (no call carries more than a link frame), in all, and
// in number; a call over a bound is dropped whole and its bytes freed, as
// is one whose deadline passed or whose parts skip a number; stale or far
// deadlines are refused before anything is kept. Sealed with the key, so
// only the bounds can refuse them.
func TestWhatIsBufferedIsBounded(t *testing.T) {
	h := newHeldHere()
	p, err := New(nil, testKey)
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	mib := make([]byte, 1<<20)
	pending := func() int {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.pendingBytes
	}
	// One call past a link frame.
	for n := 1; n <= limits.MaxFrameBytes>>20+1; n++ {
		p.receive(h, sealedPart(p, "big", n, true, mib, later))
	}
	if got := pending(); got != 0 || p.Dropped()[DropOverBound] != 1 {
		t.Fatalf("a call past %d bytes: %d bytes kept, %d dropped over bound", limits.MaxFrameBytes, got, p.Dropped()[DropOverBound])
	}
	// Many calls, each under the bound, past the bound on all.
	for i := range maxPendingBytes>>20 + 3 {
		p.receive(h, sealedPart(p, "many"+string(rune('a'+i%26))+string(rune('a'+i/26)), 1, true, mib, later))
	}
	if got := pending(); got != maxPendingBytes || p.Dropped()[DropOverBound] != 4 {
		t.Fatalf("calls past %d bytes in all: %d kept, %d dropped over bound", maxPendingBytes, got, p.Dropped()[DropOverBound])
	}
	p = mustPeers(t)
	for i := range maxPendingRequests + 1 {
		p.receive(h, sealedPart(p, strings.Repeat("r", 1+i%7)+string(rune(i)), 1, true, nil, later))
	}
	if n := len(p.parts); n != maxPendingRequests || p.Dropped()[DropOverBound] != 1 {
		t.Fatalf("%d calls arriving at once kept %d, dropped %d", maxPendingRequests+1, n, p.Dropped()[DropOverBound])
	}
	// A gap drops the call; a deadline passed frees it at the next call.
	p = mustPeers(t)
	p.receive(h, sealedPart(p, "gap", 1, true, mib, later))
	p.receive(h, sealedPart(p, "gap", 3, true, mib, later))
	p.receive(h, sealedPart(p, "soon", 1, true, mib, time.Now().Add(50*time.Millisecond)))
	if got := pending(); got != 1<<20 {
		t.Fatalf("after a gap: %d bytes kept, want only the other call's", got)
	}
	time.Sleep(100 * time.Millisecond)
	p.receive(h, sealedPart(p, "next", 1, true, nil, later))
	if got := pending(); got != 0 {
		t.Fatalf("a call past its deadline still holds %d bytes", got)
	}
	// Deadlines passed or further than any call runs.
	p.receive(h, sealedPart(p, "past", 1, false, nil, time.Now().Add(-time.Second)))
	p.receive(h, sealedPart(p, "far", 1, false, nil, time.Now().Add(relayCallBound+deadlineSlack+time.Minute)))
	if n := p.Dropped()[DropStale]; n != 2 || h.calls.Load() != 0 {
		t.Fatalf("stale calls: %d counted, %d served", n, h.calls.Load())
	}
}

func mustPeers(t *testing.T) *Peers {
	t.Helper()
	p, err := New(nil, testKey)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCheckRefusesPlainNATSOffLoopback: a plain nats:// URL naming a host
// that is not loopback is refused unless TLS is configured or the
// operator says the network is trusted, and the refusal never repeats
// the URL's credentials; loopback by name or address is plain at will.
func TestCheckRefusesPlainNATSOffLoopback(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{URL: "nats://127.0.0.1:4222"}, ""},
		{Options{URL: "nats://localhost:4222"}, ""},
		{Options{URL: "nats://[::1]:4222"}, ""},
		{Options{URL: "nats://127.0.0.1:4222, nats://127.0.0.2:4222"}, ""},
		{Options{URL: "tls://nats.example.invalid:4222"}, ""},
		{Options{URL: "nats://nats.example.invalid:4222", CA: "ca.pem"}, ""},
		{Options{URL: "nats://nats.example.invalid:4222", Cert: "c.pem", Key: "k.pem"}, ""},
		{Options{URL: "nats://nats.example.invalid:4222", Insecure: true}, ""},
		{Options{URL: "nats://user:s3cret@nats.example.invalid:4222"}, "off loopback without TLS"},
		{Options{URL: "nats://127.0.0.1:4222,nats://10.0.0.1:4222"}, "off loopback without TLS"},
		{Options{URL: "nats://localhost.example.invalid:4222"}, "off loopback without TLS"},
		{Options{URL: "http://127.0.0.1:4222"}, "must be nats://HOST:PORT"},
		{Options{URL: "127.0.0.1:4222"}, "must be nats://HOST:PORT"},
		{Options{URL: "nats://127.0.0.1:4222", Cert: "c.pem"}, "--nats-cert and --nats-key go together"},
	} {
		err := tc.o.Check()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.o, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "s3cret") || !errcode.Is(err, errcode.InvalidArgument) {
			t.Errorf("%+v: %v, want invalid_argument saying %q", tc.o, err, tc.want)
		}
		if _, err := Connect(tc.o, "r"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Connect %+v: %v, want the same refusal before any dial", tc.o, err)
		}
	}
}

// TestSecuredNATS: replicas reach a NATS server that takes only TLS with
// a user and password or an NKey, and call through it; without
// credentials, or without TLS, the server refuses them.
func TestSecuredNATS(t *testing.T) {
	ns := natstest.StartSecured(t)
	withPassword := strings.Replace(ns.URL, "tls://", "tls://"+ns.User+":"+ns.Password+"@", 1)
	join := func(o Options) (*Peers, error) {
		nc, err := Connect(o, "r")
		if err != nil {
			return nil, err
		}
		t.Cleanup(nc.Close)
		p, err := New(nc, testKey)
		if err == nil {
			t.Cleanup(p.Close)
		}
		return p, err
	}
	h := newHeldHere()
	close(h.release)
	server, err := join(Options{URL: withPassword, CA: ns.CA})
	if err != nil {
		t.Fatalf("user and password over TLS: %v", err)
	}
	if err := server.Serve("r1", h); err != nil {
		t.Fatal(err)
	}
	caller, err := join(Options{URL: ns.URL, NKey: ns.NKeySeed, CA: ns.CA})
	if err != nil {
		t.Fatalf("NKey over TLS: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if res, err := caller.Call(ctx, "r1", "dev", relay.Call{Tool: "process.jobs", Arguments: json.RawMessage(`1`), Grant: "g"}, nil); err != nil || string(res) != `{"echo":1}` {
		t.Fatalf("a call over secured NATS: %s %v", res, err)
	}
	for name, o := range map[string]Options{
		"no credentials":    {URL: ns.URL, CA: ns.CA},
		"wrong password":    {URL: strings.Replace(withPassword, ns.Password, "wrong", 1), CA: ns.CA},
		"untrusted cert":    {URL: withPassword},
		"plain to TLS":      {URL: strings.Replace(withPassword, "tls://", "nats://", 1)},
		"missing NKey":      {URL: ns.URL, NKey: ns.NKeySeed + ".missing", CA: ns.CA},
		"unreadable .creds": {URL: ns.URL, Creds: ns.NKeySeed + ".missing", CA: ns.CA},
	} {
		if _, err := join(o); err == nil {
			t.Errorf("%s: connected", name)
		} else if strings.Contains(err.Error(), ns.Password) {
			t.Errorf("%s: the error repeats the password: %v", name, err)
		}
	}
}

// TestOpenRefusesWhatTheKeyDidNotSay: a message sealed with the key whose
// plaintext is not a head and a body (too short, a head length past the
// plaintext or past maxHeadBytes, a head that is not JSON or names no
// call) does not open: only what seal writes does.
func TestOpenRefusesWhatTheKeyDidNotSay(t *testing.T) {
	s, err := newSealer(testKey)
	if err != nil {
		t.Fatal(err)
	}
	const subject = "commandcore.replica.r1.call"
	raw := func(plain []byte) []byte {
		n := 1 + 24
		out := make([]byte, n)
		out[0] = sealVersion
		return s.aead.Seal(out, out[1:n], plain, associated(subject))
	}
	withHead := func(hl int, rest string) []byte { return append([]byte{byte(hl >> 8), byte(hl)}, rest...) }
	bigHead := `{"c":"` + strings.Repeat("x", maxHeadBytes) + `"}`
	for name, plain := range map[string][]byte{
		"empty":               {},
		"one byte":            {0},
		"head past the end":   withHead(10, `{"c":"x"}`),
		"head past its cap":   withHead(len(bigHead), bigHead),
		"head not JSON":       withHead(3, `{c}`),
		"head naming no call": withHead(2, `{}`),
	} {
		if h, _, err := s.open(subject, raw(plain)); err == nil {
			t.Errorf("%s: opened as %+v", name, h)
		}
	}
	good := withHead(9, `{"c":"x"}body`)
	if h, data, err := s.open(subject, raw(good)); err != nil || h.Call != "x" || string(data) != "body" {
		t.Fatalf("a well-formed plaintext: %+v %q %v", h, data, err)
	}
	sealed := s.seal(subject, &head{Call: "x"}, []byte("body"))
	for name, body := range map[string][]byte{
		"another version": append([]byte{sealVersion + 1}, sealed[1:]...),
		"cut short":       sealed[:1+24+15],
		"one bit flipped": append(append([]byte{}, sealed[:len(sealed)-1]...), sealed[len(sealed)-1]^1),
	} {
		if _, _, err := s.open(subject, body); err == nil {
			t.Errorf("%s: opened", name)
		}
	}
	if _, _, err := s.open(subject+".other", sealed); err == nil {
		t.Error("a message moved to another subject opened")
	}
}

// TestProbesAreFreshAndAnsweredOnce: a link probe past its deadline is
// not answered, one seen before is not answered again, and an answer to
// a probe that a NATS client without the key forges, or one a key holder
// sealed for another probe, is dropped while the prober waits for the
// holder's word.
func TestProbesAreFreshAndAnsweredOnce(t *testing.T) {
	server, caller, _ := servedOn(t, &here{alive: true})
	inbox := caller.nc.NewRespInbox()
	sub, err := caller.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	probe := func(id string, deadline time.Time) {
		subject := aliveSubject("r1")
		caller.nc.Publish(subject, caller.seal.seal(subject, &head{Call: id, Device: "dev", Reply: inbox, Deadline: deadline.UnixNano()}, nil))
	}
	probe("stale", time.Now().Add(-time.Second))
	probe("far", time.Now().Add(relayCallBound+deadlineSlack+time.Minute))
	probe("once", time.Now().Add(5*time.Second))
	probe("once", time.Now().Add(5*time.Second))
	if m, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatal("the fresh probe was not answered")
	} else if hd, _, err := caller.seal.open(inbox, m.Data); err != nil || hd.Call != "once" || hd.Kind != kindAnswers {
		t.Fatalf("the answer: %+v %v", hd, err)
	}
	if m, err := sub.NextMsg(500 * time.Millisecond); err == nil {
		t.Fatalf("a stale, far or repeated probe was answered: %q", m.Data)
	}
	if d := server.Dropped(); d[DropStale] != 2 || d[DropReplayed] != 1 {
		t.Fatalf("dropped %v, want 2 stale and 1 replayed", d)
	}

	// While the holder takes its time, forged answers on every inbox.
	h := &slowProbe{release: make(chan struct{}), asked: make(chan struct{}, 1)}
	server, caller, ns := servedOn(t, h)
	a := newAttacker(t, ns.ClientURL())
	answered := make(chan bool, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		answered <- caller.LinkAnswers(ctx, "r1", "dev")
	}()
	<-h.asked
	for _, subject := range inboxes(t, ns) {
		a.nc.Publish(subject, []byte("0"))
		a.nc.Publish(subject, server.seal.seal(subject, &head{Call: "another probe", Kind: kindSilent}, nil))
	}
	a.nc.Flush()
	testkit.Eventually(t, 5*time.Second, func() error {
		if d := caller.Dropped(); d[DropForged] < 1 || d[DropReplayed] < 1 {
			return fmt.Errorf("the prober dropped %v", d)
		}
		return nil
	})
	close(h.release)
	if !<-answered {
		t.Fatal("a forged answer decided the probe")
	}
}

// slowProbe is a holder whose link answers once released; asked says it
// was asked.
type slowProbe struct {
	release chan struct{}
	asked   chan struct{}
}

func (h *slowProbe) CallHere(context.Context, string, relay.Call, func([]byte)) ([]byte, error) {
	return nil, relay.ErrNoRoute
}

func (h *slowProbe) LinkAnswersHere(ctx context.Context, _ string) bool {
	select {
	case h.asked <- struct{}{}:
	default:
	}
	select {
	case <-h.release:
		return true
	case <-ctx.Done():
		return false
	}
}

// TestTakenIsBounded: the calls and probes remembered until their
// deadline are bounded; when full, the expired ones make room, and with
// none expired a new call is refused (counted), never an old one
// forgotten, which would let its replay through.
func TestTakenIsBounded(t *testing.T) {
	p := mustPeers(t)
	later := time.Now().Add(time.Minute).UnixNano()
	for i := range maxTaken {
		p.taken[fmt.Sprint(i)] = later
	}
	if p.take("new", later) || p.Dropped()[DropOverBound] != 1 {
		t.Fatalf("a call was taken beyond %d remembered", maxTaken)
	}
	if p.take("0", later) || p.Dropped()[DropReplayed] != 1 {
		t.Fatal("a remembered call was taken again")
	}
	p.taken["0"] = time.Now().Add(-time.Second).UnixNano()
	if !p.take("new", later) {
		t.Fatal("a full memory with an expired call refused a new one")
	}
	if _, ok := p.taken["0"]; ok || len(p.taken) != maxTaken {
		t.Fatalf("the expired call is still remembered (%d remembered)", len(p.taken))
	}
}

// bigHere answers every call with n bytes.
type bigHere struct{ n int }

func (h bigHere) CallHere(context.Context, string, relay.Call, func([]byte)) ([]byte, error) {
	return bytes.Repeat([]byte("r"), h.n), nil
}

func (bigHere) LinkAnswersHere(context.Context, string) bool { return true }

// TestAnAnswerIsAtMostALinkFrame: an answer of a link frame crosses
// whole; one byte more is no answer a device could give, and the caller
// takes it as lost rather than buffering without end.
func TestAnAnswerIsAtMostALinkFrame(t *testing.T) {
	for _, n := range []int{limits.MaxFrameBytes, limits.MaxFrameBytes + 1} {
		_, caller, _ := servedOn(t, bigHere{n})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res, err := caller.Call(ctx, "r1", "dev", relay.Call{Tool: "process.jobs", Grant: "g"}, nil)
		cancel()
		switch {
		case n == limits.MaxFrameBytes && (err != nil || len(res) != n):
			t.Fatalf("an answer of %d bytes: %d bytes, %v", n, len(res), err)
		case n > limits.MaxFrameBytes && (!errors.Is(err, errLost) || caller.Dropped()[DropOverBound] != 1):
			t.Fatalf("an answer of %d bytes: %v, dropped %v", n, err, caller.Dropped())
		}
	}
}

// TestConnectReconnectsWithoutEnd: a replica keeps reconnecting to NATS
// for as long as it runs, a quarter second apart, and gives a dial 5 s:
// a NATS restart costs the calls meanwhile, and the replica comes back by
// itself.
func TestConnectReconnectsWithoutEnd(t *testing.T) {
	ns := natstest.Start(t)
	nc, err := Connect(Options{URL: ns.ClientURL()}, "r")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if nc.Opts.MaxReconnect != -1 || nc.Opts.ReconnectWait != 250*time.Millisecond || nc.Opts.Timeout != 5*time.Second || nc.Opts.Name != "commandcore relay r" {
		t.Fatalf("reconnect %d every %v, dial timeout %v, name %q", nc.Opts.MaxReconnect, nc.Opts.ReconnectWait, nc.Opts.Timeout, nc.Opts.Name)
	}
}
