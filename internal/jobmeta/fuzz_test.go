package jobmeta_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/commandcore/commandcore/internal/jobmeta"
	"github.com/commandcore/commandcore/internal/principal"
)

// fuzzDecode checks Decode on arbitrary input: it never panics, every
// rejection wraps ErrCorrupt and returns no value, every accepted value
// satisfies check, and re-encoding an accepted value decodes again to an
// equal value (a fixpoint after one normalising round trip).
func fuzzDecode[T any, P interface {
	*T
	jobmeta.Versioned
}](f *testing.F, seeds []any, check func(t *testing.T, v *T)) {
	for _, s := range seeds {
		b, err := json.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(append(append([]byte{}, b...), '}'))
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte(nil))
	f.Add([]byte("null"))
	f.Add([]byte(`{"schema":2}`))
	f.Add([]byte(`{"schema":1}`))
	f.Add([]byte(`{"schema":1,"created_at":"2020-01-01T00:00:00+01:00","completed_at":"2020-01-01T00:00:00+00:00"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := jobmeta.Decode[T, P](data)
		if err != nil {
			if !errors.Is(err, jobmeta.ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			if v != nil {
				t.Fatalf("value returned with error: %+v", v)
			}
			return
		}
		if v == nil {
			t.Fatal("nil value without error")
		}
		if s := reflect.ValueOf(v).Elem().FieldByName("Schema").Int(); s < 1 || s > jobmeta.SchemaVersion {
			t.Fatalf("accepted schema %d", s)
		}
		check(t, v)
		enc1, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("accepted value does not re-encode: %v", err)
		}
		v2, err := jobmeta.Decode[T, P](enc1)
		if err != nil {
			t.Fatalf("re-encoded value rejected: %v\n%s", err, enc1)
		}
		enc2, err := json.Marshal(v2)
		if err != nil {
			t.Fatal(err)
		}
		if string(enc1) != string(enc2) {
			t.Fatalf("round trip changed the value:\n%s\n%s", enc1, enc2)
		}
		v3, err := jobmeta.Decode[T, P](enc2)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(v2, v3) {
			t.Fatalf("decode is not stable:\n%+v\n%+v", v2, v3)
		}
	})
}

func FuzzDecodeJob(f *testing.F) {
	fuzzDecode(f, []any{validJob(), &jobmeta.Job{Schema: 1, ID: testID, FailureDomain: jobmeta.DomainSharedParentCgroup, CreatedAt: t0}},
		func(t *testing.T, j *jobmeta.Job) {
			if !jobmeta.ValidID(j.ID) {
				t.Fatalf("accepted job id %q", j.ID)
			}
			if j.FailureDomain != jobmeta.DomainSystemdUnit && j.FailureDomain != jobmeta.DomainSharedParentCgroup {
				t.Fatalf("accepted failure domain %q", j.FailureDomain)
			}
			if j.CreatedAt.IsZero() {
				t.Fatal("accepted zero created_at")
			}
			if j.Owner != "" && j.Owner != "local" && !principal.Valid(j.Owner) {
				t.Fatalf("accepted owner %q", j.Owner)
			}
		})
}

func FuzzDecodeClaim(f *testing.F) {
	fuzzDecode(f, []any{validClaim(), &jobmeta.Claim{Schema: 1, Supervisor: validClaim().Supervisor, BootID: "b"}},
		func(t *testing.T, i *jobmeta.Claim) {
			if i.Supervisor.PID <= 0 || i.Supervisor.StartTicks == 0 || i.BootID == "" {
				t.Fatalf("accepted incomplete identity %+v", i)
			}
			if c := i.Child; c != nil && (c.PID <= 0 || c.StartTicks == 0) {
				t.Fatalf("accepted incomplete child %+v", c)
			}
		})
}

func FuzzDecodeResult(f *testing.F) {
	fuzzDecode(f, []any{validResult(), &jobmeta.Result{Schema: 1, CompletedAt: t0}},
		func(t *testing.T, r *jobmeta.Result) {
			if r.CompletedAt.IsZero() {
				t.Fatal("accepted zero completed_at")
			}
		})
}

func FuzzDecodeScreen(f *testing.F) {
	fuzzDecode(f, []any{validScreen()},
		func(t *testing.T, s *jobmeta.Screen) {
			if len(s.Lines) != s.Rows || s.Cursor.Row < 0 || s.Cursor.Row >= s.Rows || s.Cursor.Col < 0 || s.Cursor.Col > s.Cols || s.Offset < 0 {
				t.Fatalf("accepted an inconsistent screen %+v", s)
			}
		})
}
