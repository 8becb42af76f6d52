package jobs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/jobstore"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/principal"
)

// checkKey checks an idempotency key: 1-128 bytes of printable ASCII, so
// that it is the same key on every client and in every encoding.
func checkKey(key string) error {
	bad := len(key) > limits.IdempotencyKeyMaxBytes
	for i := 0; i < len(key) && !bad; i++ {
		bad = key[i] < 0x20 || key[i] > 0x7e
	}
	if bad {
		return errcode.New(errcode.InvalidArgument, "idempotency_key must be 1-%d bytes of printable ASCII", limits.IdempotencyKeyMaxBytes)
	}
	return nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// keyDigest is what a job keeps of its key.
func keyDigest(key string) string { return sha256Hex([]byte(key)) }

// requestDigest is what a job keeps of the request that started it: the
// fields that decide what runs, as given, salted with the job's ID so the
// digest confirms no guess of a command.
func requestDigest(id string, req *StartRequest) string {
	fields, _ := json.Marshal(struct {
		Command  string            `json:"command"`
		Cwd      string            `json:"cwd"`
		Env      map[string]string `json:"env"`
		Stdin    bool              `json:"stdin"`
		PTY      *TerminalSize     `json:"pty"`
		TimeoutS int               `json:"timeout_s"`
	}{req.Command, req.Cwd, req.Env, req.Stdin, req.PTY, req.TimeoutS})
	return sha256Hex(append([]byte(id+"\x00"), fields...))
}

// idempotency is the digests a job started by req keeps, or nil for a
// request without a key.
func idempotency(id string, req *StartRequest) *jobmeta.Idempotency {
	if req.IdempotencyKey == "" {
		return nil
	}
	return &jobmeta.Idempotency{Key: keyDigest(req.IdempotencyKey), Request: requestDigest(id, req)}
}

// reuse answers a start whose key found job k: that job's current record
// when the request is the one that started it, conflict otherwise.
func (s *Service) reuse(ctx context.Context, who principal.Principal, req *StartRequest, k *jobstore.KeyTaken, waitMS int) (*StartResult, error) {
	if requestDigest(k.ID, req) != k.Request {
		return nil, errcode.New(errcode.Conflict,
			"idempotency_key already started job %s with another command, cwd, env, stdin, pty or timeout_s; use a new key for a new job", k.ID)
	}
	res, err := s.started(ctx, who, k.ID, waitMS)
	if err != nil {
		return nil, err
	}
	res.Reused = true
	return res, nil
}

// keyLocks serialises the starts of one principal with one key in this
// process, so the second finds the first one's job instead of racing it
// to admission (where another process's start is caught).
type keyLocks struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	sync.Mutex
	users int
}

// lock takes the lock of name and returns its release.
func (l *keyLocks) lock(name string) func() {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*keyLock{}
	}
	k := l.locks[name]
	if k == nil {
		k = &keyLock{}
		l.locks[name] = k
	}
	k.users++
	l.mu.Unlock()
	k.Lock()
	return func() {
		k.Unlock()
		l.mu.Lock()
		if k.users--; k.users == 0 {
			delete(l.locks, name)
		}
		l.mu.Unlock()
	}
}
