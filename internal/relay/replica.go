package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
	"github.com/commandcore/commandcore/internal/procid"
	"github.com/commandcore/commandcore/internal/relay/store"
)

// A relay is one replica of those serving from its state (docs/
// scaling.md): it records itself in the state while it runs, beating every
// limits.ReplicaBeat, records each link it holds there, and reaches the
// others, when there are others, through Peers. A single relay is a
// replica alone.

// ReplicaConfig names this relay among the replicas.
type ReplicaConfig struct {
	// Name is what `relay replicas` calls it; default the host name.
	Name string
	// Address is the client endpoint it serves, as announced.
	Address string
	// Panel is its web panel's base URL, when it serves one.
	Panel string
	// Peers reaches the other replicas; nil runs alone, which the state
	// refuses beside another live replica.
	Peers Peers
}

// Peers is how a replica reaches the others: a call for a device whose
// link another replica holds goes there, and so does the heartbeat that
// decides whether a link elsewhere still answers (relay/cluster).
type Peers interface {
	// Serve answers the other replicas for replica, through here, until
	// Close.
	Serve(replica string, here Here) error
	// Call carries call to the replica holding device's link, with the
	// Router contract: bytes untouched, progress in order before the
	// result, cancelled with ctx; ErrNoRoute when that replica no longer
	// holds the link or is gone.
	Call(ctx context.Context, replica, device string, call Call, progress func(params []byte)) ([]byte, error)
	// LinkAnswers reports whether replica's link to device answers its
	// heartbeat; false when the replica is gone.
	LinkAnswers(ctx context.Context, replica, device string) bool
	Close()
}

// Here is what a replica offers the others: its own links (*Server).
type Here interface {
	CallHere(ctx context.Context, device string, call Call, progress func(params []byte)) ([]byte, error)
	LinkAnswersHere(ctx context.Context, device string) bool
}

// newReplica is this process's replica record.
func newReplica(cfg ReplicaConfig) store.Replica {
	name := cfg.Name
	if name == "" {
		name, _ = os.Hostname()
	}
	if !store.ValidName(name) {
		name = "relay"
	}
	b := make([]byte, 6)
	rand.Read(b)
	r := store.Replica{ID: "rpl_" + hex.EncodeToString(b), Name: name, Address: cfg.Address, Panel: cfg.Panel, NATS: cfg.Peers != nil}
	src := procid.Default()
	if self, err := src.Self(); err == nil {
		r.PID, r.StartTicks = self.PID, self.StartTicks
	}
	r.BootID, _ = src.BootID()
	return r
}

// join records the replica, after removing the records of replicas of
// this host whose process is gone (a relay killed and started again need
// not wait out their TTL).
func (s *Server) join() error {
	now := s.Now()
	others, err := s.store.Replicas(now)
	if err != nil {
		return err
	}
	src := procid.Default()
	for _, r := range others {
		if r.BootID != s.replica.BootID || r.BootID == "" {
			continue
		}
		if alive, err := src.Alive(procid.Identity{PID: r.PID, StartTicks: r.StartTicks}); err == nil && !alive {
			if err := s.store.LeaveReplica(r.ID); err != nil {
				return err
			}
		}
	}
	return s.store.JoinReplica(s.replica, now)
}

// beat records every limits.ReplicaBeat that this replica lives, until
// Close. A replica that stalled past its TTL and was swept away joins
// again and takes back the links it still holds.
func (s *Server) beat() {
	t := time.NewTicker(limits.ReplicaBeat)
	defer t.Stop()
	for {
		select {
		case <-s.stopWatch:
			return
		case <-t.C:
		}
		err := s.store.ReplicaSeen(s.replica.ID, s.Now())
		if !errcode.Is(err, errcode.NotFound) {
			continue
		}
		if s.store.JoinReplica(s.replica, s.Now()) != nil {
			continue
		}
		for _, id := range s.linkedDevices() {
			s.store.TakeLink(id, s.replica.ID, "", s.Now())
		}
	}
}

// ReplicaID is this relay's ID among the replicas.
func (s *Server) ReplicaID() string { return s.replica.ID }

// takeLink decides, once this replica's own old link to the device (if
// any) is dealt with, whether the device's link may be taken here, and
// records that it is: free, held here, or held by a replica that is gone
// or whose link no longer answers. It reports false when another
// replica's link answers, or another replica took the link meanwhile.
func (s *Server) takeLink(ctx context.Context, device string) (bool, error) {
	holder, err := s.store.LinkHolder(device, s.Now())
	if err != nil {
		return false, err
	}
	if holder != "" && holder != s.replica.ID {
		if s.peers == nil {
			return false, nil
		}
		probe, cancel := context.WithTimeout(ctx, busyProbe)
		alive := s.peers.LinkAnswers(probe, holder, device)
		cancel()
		if alive {
			return false, nil
		}
	}
	return s.store.TakeLink(device, s.replica.ID, holder, s.Now())
}
