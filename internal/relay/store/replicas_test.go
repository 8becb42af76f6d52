package store

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/commandcore/commandcore/internal/errcode"
	"github.com/commandcore/commandcore/internal/limits"
)

func replica(id string, nats bool) Replica {
	return Replica{ID: id, Name: "relay-" + id, Address: "http://127.0.0.1:8440", NATS: nats, BootID: "boot", PID: 7, StartTicks: 99}
}

// TestReplicasJoinOnlyThroughNATS: replicas with NATS share a database;
// one without is refused beside a live one, and beside one without NATS
// every newcomer is refused, saying why. One that left, or was not seen
// for the TTL, is gone and refuses no one.
func TestReplicasJoinOnlyThroughNATS(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		s := openT(t, newPlace(t))
		for _, r := range []Replica{replica("a", true), replica("b", true)} {
			if err := s.JoinReplica(r, t0); err != nil {
				t.Fatalf("join %s: %v", r.ID, err)
			}
		}
		err := s.JoinReplica(replica("c", false), t0)
		wantCode(t, err, errcode.Unavailable)
		if !strings.Contains(err.Error(), "start every replica with --nats") {
			t.Fatalf("the refusal does not say why: %v", err)
		}
		for _, id := range []string{"a", "b"} {
			if err := s.LeaveReplica(id); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.JoinReplica(replica("alone", false), t0); err != nil {
			t.Fatalf("a replica without NATS on an empty database: %v", err)
		}
		wantCode(t, s.JoinReplica(replica("d", true), t0), errcode.Unavailable)
		// Not seen for the TTL, the lone replica is gone.
		later := t0.Add(limits.ReplicaTTL + time.Millisecond)
		if err := s.JoinReplica(replica("d", true), later); err != nil {
			t.Fatalf("after the lone replica's TTL: %v", err)
		}
		wantCode(t, s.ReplicaSeen("alone", later), errcode.NotFound)
		got, err := s.Replicas(later)
		if err != nil || len(got) != 1 || got[0].ID != "d" || !got[0].NATS || got[0].Name != "relay-d" ||
			got[0].BootID != "boot" || got[0].PID != 7 || got[0].StartTicks != 99 || !got[0].StartedAt.Equal(later) {
			t.Fatalf("Replicas = %+v, %v", got, err)
		}
		wantCode(t, s.JoinReplica(Replica{ID: "e", Name: "a b"}, t0), errcode.InvalidArgument)
	})
}

// TestLinksFollowLiveReplicas: a link is held by one live replica; a
// replica that stops being seen loses its links to whoever takes them,
// and a device whose holder is gone has none.
func TestLinksFollowLiveReplicas(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		place := newPlace(t)
		a, b := openT(t, place), openT(t, place)
		dev, _ := enrollT(t, a, "", "box")
		a.JoinReplica(replica("a", true), t0)
		b.JoinReplica(replica("b", true), t0)
		if took, err := a.TakeLink(dev.ID, "a", "", t0); !took || err != nil {
			t.Fatalf("a takes a free link: %v, %v", took, err)
		}
		if took, err := b.TakeLink(dev.ID, "b", "", t0); took || err != nil {
			t.Fatalf("b took a link live replica a holds: %v, %v", took, err)
		}
		if h, err := b.LinkHolder(dev.ID, t0); h != "a" || err != nil {
			t.Fatalf("LinkHolder = %q, %v; want a", h, err)
		}
		got, _ := b.Replicas(t0)
		if len(got) != 2 || got[0].Links+got[1].Links != 1 {
			t.Fatalf("links held: %+v", got)
		}
		// b takes it from a by name: a's link was found dead.
		if took, err := b.TakeLink(dev.ID, "b", "a", t0); !took || err != nil {
			t.Fatalf("b takes over from a: %v, %v", took, err)
		}
		// a's link ends late: it releases nothing of b's.
		if err := a.ReleaseLink(dev.ID, "a", t0); err != nil {
			t.Fatal(err)
		}
		if d, _ := a.FindDevice(dev.ID); !d.Connected || d.Replica != "b" {
			t.Fatalf("a late release undid b's hold: %+v", d)
		}
		// b stops beating; a, still beating, sweeps it away with its links.
		later := t0.Add(limits.ReplicaTTL + time.Second)
		if h, err := a.LinkHolder(dev.ID, later); h != "" || err != nil {
			t.Fatalf("the holder of a gone replica's link: %q, %v", h, err)
		}
		if err := a.ReplicaSeen("a", t0.Add(limits.ReplicaTTL)); err != nil {
			t.Fatal(err)
		}
		if err := a.ReplicaSeen("a", later); err != nil {
			t.Fatal(err)
		}
		if d, _ := a.FindDevice(dev.ID); d.Connected || d.Replica != "" {
			t.Fatalf("a swept replica still holds its link: %+v", d)
		}
		if took, err := a.TakeLink(dev.ID, "a", "", later); !took || err != nil {
			t.Fatalf("a takes the released link: %v, %v", took, err)
		}
	})
}

// TestLinkTakeRaceOneWinner: replicas admitting one device at once, each
// having found it free, race to take its link; exactly one holds it.
func TestLinkTakeRaceOneWinner(t *testing.T) {
	eachEngine(t, func(t *testing.T) {
		place := newPlace(t)
		stores := [3]*Store{openT(t, place), openT(t, place), openT(t, place)}
		for i, s := range stores {
			if err := s.JoinReplica(replica(fmt.Sprint(i), true), t0); err != nil {
				t.Fatal(err)
			}
		}
		for round := range raceRounds {
			dev, _ := enrollT(t, stores[0], "", fmt.Sprintf("box%d", round))
			var took [3]bool
			race(3, func(i int) {
				ok, err := stores[i].TakeLink(dev.ID, fmt.Sprint(i), "", t0)
				if err != nil {
					t.Errorf("round %d: TakeLink: %v", round, err)
				}
				took[i] = ok
			})
			n, winner := 0, -1
			for i, ok := range took {
				if ok {
					n, winner = n+1, i
				}
			}
			if n != 1 {
				t.Fatalf("round %d: %d replicas took one link (%v)", round, n, took)
			}
			if h, _ := stores[2].LinkHolder(dev.ID, t0); h != fmt.Sprint(winner) {
				t.Fatalf("round %d: holder %q, want the winner %d", round, h, winner)
			}
		}
	})
}
