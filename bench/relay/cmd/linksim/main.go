// Command linksim holds many device links to a relay, for the relay
// capacity benchmark (bench/relay, BenchmarkRelayCapacity). Each simulated
// device is real to the relay: its enrollment code is minted in the
// relay's own state (relay/store, as `commandcore relay enroll-code` does)
// and redeemed at the relay's POST /v1/enroll; its link is the agent's own
// (transport.Run): it answers heartbeats with the MAC under its secret,
// stores and acknowledges the token the relay rotates in on every link,
// and serves MCP (an empty tool list) to the relay's client. Only the jobs
// are missing: a simulated device runs no tools.
//
// The relay rate-limits enrollment per source address (a burst of ten,
// then one per six seconds), as it would for devices behind ten thousand
// home routers; so the simulator enrolls at most enrollPerSource devices
// from each loopback source address 127.1.x.y.
//
//	linksim --server http://127.0.0.1:PORT --relay-state DIR --devices N
//
// It enrolls N devices, prints "enrolled N SECONDS", then reads commands
// on standard input, one a line:
//
//	links K   bring the number of live links to K (of the N) and print
//	          "links K SECONDS ENDS" once the relay serves all K
//	ends      print "ends ENDS": links that ended since the start
//
// It exits when standard input closes, ending every link.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/commandcore/commandcore/internal/enrollment"
	"github.com/commandcore/commandcore/internal/relay"
	"github.com/commandcore/commandcore/internal/relay/store"
	"github.com/commandcore/commandcore/internal/transport"
)

const (
	// enrollPerSource stays within the relay's per-address burst.
	enrollPerSource = 10
	// enrollWorkers stays below relay.MaxEnrolling.
	enrollWorkers = relay.MaxEnrolling / 2
	// dialsAtOnce keeps the links being opened well below
	// relay.MaxUnauthenticated, so the relay never answers 503 and no
	// link waits out the agent's reconnect backoff.
	dialsAtOnce = relay.MaxUnauthenticated / 4
	// upTimeout bounds bringing links up; past it the command fails.
	upTimeout = 5 * time.Minute
)

// device is one simulated device's identity.
type device struct {
	token  string
	secret []byte
}

// sim counts what the links did.
type sim struct {
	server string
	// served counts the MCP handshakes the relay's client completed on a
	// link; ends counts links that ended.
	served, ends atomic.Int64
	dials        chan struct{}
	mcp          *mcp.Server
}

// namePrefix starts the simulated devices' names (--names).
var namePrefix string

func main() {
	server := flag.String("server", "", "the relay's URL (http://127.0.0.1:PORT)")
	state := flag.String("relay-state", "", "the relay's state directory, or its PostgreSQL URL (postgres://…)")
	n := flag.Int("devices", 0, "devices to enroll")
	prefix := flag.String("names", "sim", "the devices' names start with this, for several simulators on one state")
	flag.Parse()
	namePrefix = *prefix
	if err := run(*server, *state, *n); err != nil {
		fmt.Fprintln(os.Stderr, "linksim:", err)
		os.Exit(1)
	}
}

func run(server, state string, n int) error {
	if server == "" || state == "" || n <= 0 {
		return errors.New("--server, --relay-state and --devices are required")
	}
	t0 := time.Now()
	devs, err := enrollAll(server, state, n)
	if err != nil {
		return err
	}
	fmt.Printf("enrolled %d %.1f\n", len(devs), time.Since(t0).Seconds())

	s := &sim{server: server, dials: make(chan struct{}, dialsAtOnce)}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "commandcore-linksim", Version: "1"}, nil)
	s.mcp.AddReceivingMiddleware(s.countHandshakes)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()

	live := 0
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		switch {
		case len(f) == 2 && f[0] == "links":
			k, err := strconv.Atoi(f[1])
			if err != nil || k < live || k > len(devs) {
				return fmt.Errorf("links %q: want a count from %d to %d", f[1], live, len(devs))
			}
			t := time.Now()
			for ; live < k; live++ {
				wg.Add(1)
				go func(d device) { defer wg.Done(); s.link(ctx, d) }(devs[live])
			}
			if err := s.waitServed(int64(k)); err != nil {
				return err
			}
			fmt.Printf("links %d %.1f %d\n", k, time.Since(t).Seconds(), s.ends.Load())
		case len(f) == 1 && f[0] == "ends":
			fmt.Printf("ends %d\n", s.ends.Load())
		default:
			return fmt.Errorf("unknown command %q", in.Text())
		}
	}
	return in.Err()
}

// countHandshakes counts the relay's handshakes that succeeded: the
// go-sdk client opens with server/discover, or with initialize on older
// protocol versions.
func (s *sim) countHandshakes(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if err == nil && (method == "server/discover" || method == "initialize") {
			s.served.Add(1)
		}
		return res, err
	}
}

// waitServed waits until the relay's client has opened k sessions.
func (s *sim) waitServed(k int64) error {
	for deadline := time.Now().Add(upTimeout); s.served.Load() < k; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d links served after %s (%d ended)", s.served.Load(), k, upTimeout, s.ends.Load())
		}
	}
	return nil
}

// link keeps d's link up as the agent does, its credentials in memory.
func (s *sim) link(ctx context.Context, d device) {
	transport.Run(ctx, transport.Config{
		Servers: []string{s.server}, Token: d.token, Secret: d.secret,
		Serve: func(ctx context.Context, conn *transport.Conn) error {
			ss, err := s.mcp.Connect(ctx, conn, nil)
			if err != nil {
				return err
			}
			return ss.Wait()
		},
		Journal: endCounter{&s.ends},
		// The relay rotates the token on every link. The transport keeps
		// the newest and the previous token in memory once this returns;
		// the agent would write them to its identity file first.
		SaveToken: func(token, previous string) error { return nil },
		Dial: func(ctx context.Context, server, token string) (*websocket.Conn, error) {
			s.dials <- struct{}{}
			defer func() { <-s.dials }()
			return transport.Dial(ctx, server, token)
		},
	})
}

// endCounter counts link ends (a transport.Journal).
type endCounter struct{ n *atomic.Int64 }

func (endCounter) LinkUp()                         {}
func (e endCounter) LinkEnd(string, time.Duration) { e.n.Add(1) }

// enrollAll mints n enrollment codes in the relay's state and redeems them
// at the relay, enrollPerSource from each source address.
func enrollAll(server, state string, n int) ([]device, error) {
	open := store.Open
	if strings.HasPrefix(state, "postgres://") {
		open = store.OpenPostgres
	}
	st, err := open(state)
	if err != nil {
		return nil, err
	}
	codes := make([]string, n)
	for i := range codes {
		if codes[i], err = st.CreateEnrollCode(fmt.Sprintf("%s-%05d", namePrefix, i), time.Hour, time.Now()); err != nil {
			st.Close()
			return nil, fmt.Errorf("enroll code: %w", err)
		}
	}
	if err := st.Close(); err != nil {
		return nil, err
	}
	devs := make([]device, n)
	sources := make(chan int)
	errs := make(chan error, enrollWorkers)
	var wg sync.WaitGroup
	for range enrollWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range sources {
				if err := enrollFrom(server, j, codes, devs); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	go func() {
		defer close(sources)
		for j := 0; j*enrollPerSource < n; j++ {
			select {
			case sources <- j:
			case err := <-errs:
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	return devs, nil
}

// enrollFrom redeems the codes of source j from its own loopback address
// over one keep-alive connection.
func enrollFrom(server string, j int, codes []string, devs []device) error {
	local := &net.TCPAddr{IP: net.IPv4(127, 1, byte(j/250), byte(j%250+1))}
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: local}).DialContext}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: time.Minute}
	for i := j * enrollPerSource; i < min(len(codes), (j+1)*enrollPerSource); i++ {
		body, _ := json.Marshal(enrollment.Request{Code: codes[i], Name: fmt.Sprintf("sim-%05d", i)})
		for attempt := 0; ; attempt++ {
			resp, err := client.Post(server+enrollment.EnrollPath, "application/json", bytes.NewReader(body))
			if err != nil {
				return fmt.Errorf("enroll: %w", err)
			}
			data, err := io.ReadAll(io.LimitReader(resp.Body, enrollment.MaxResponseBytes))
			resp.Body.Close()
			if err != nil {
				return fmt.Errorf("enroll: %w", err)
			}
			// 503: MaxEnrolling requests are in progress (the real agent's
			// enrollment, say); the relay asks to try again shortly.
			if resp.StatusCode == http.StatusServiceUnavailable && attempt < 50 {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("enroll: HTTP %d", resp.StatusCode)
			}
			id, err := enrollment.DecodeResponse(data)
			if err != nil {
				return err
			}
			devs[i] = device{token: id.Token, secret: id.Secret}
			break
		}
	}
	return nil
}
