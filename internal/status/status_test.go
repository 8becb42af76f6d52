package status

import (
	"errors"
	"testing"
)

func TestDecodeRuntime(t *testing.T) {
	good := `{"schema":1,"pid":10,"start_ticks":5,"boot_id":"b","version":"v","started_at":"2026-11-30T08:00:00Z","service":"commandcore.service","connection":{"state":"not_enrolled"}}`
	rt, err := DecodeRuntime([]byte(good))
	if err != nil || rt.PID != 10 || rt.Connection.State != ConnNotEnrolled || rt.Systemd != nil || rt.StoppedAt != nil {
		t.Fatalf("good record: %+v %v", rt, err)
	}
	stopped := good[:len(good)-1] + `,"systemd":{"user_manager":"reachable","failure_domain":"systemd_unit","observed_at":"2026-11-30T08:00:05Z"},"stopped_at":"2026-11-30T09:00:00Z"}`
	if rt, err := DecodeRuntime([]byte(stopped)); err != nil || rt.Systemd == nil || rt.Systemd.FailureDomain != "systemd_unit" || rt.StoppedAt == nil {
		t.Fatalf("record with systemd facts, stopped: %+v %v", rt, err)
	}
	for _, bad := range []string{``, `{}`, `[]`, `{"schema":1,"pid":-1,"start_ticks":5,"boot_id":"b"}`,
		`{"schema":2,"pid":10,"start_ticks":5,"boot_id":"b"}`, good + `}`, good[:40]} {
		if _, err := DecodeRuntime([]byte(bad)); !errors.Is(err, ErrBadRuntime) {
			t.Errorf("%q: %v, want ErrBadRuntime", bad, err)
		}
	}
}

func FuzzDecodeRuntime(f *testing.F) {
	f.Add([]byte(`{"schema":1,"pid":10,"start_ticks":5,"boot_id":"b"}`))
	f.Add([]byte(`{"schema":1,"pid":10,"start_ticks":5,"boot_id":"b","connection":{"state":"x","observed_at":"2026-01-01T00:00:00Z"}}`))
	f.Add([]byte(`{"schema":1,"pid":10,"start_ticks":5,"boot_id":"b","systemd":{"user_manager":"unreachable","failure_domain":"none","observed_at":"2026-01-01T00:00:00Z"},"stopped_at":"2026-01-01T00:00:01Z"}`))
	f.Add([]byte(`{"schema":1,"pid":10,"start_ticks":5,"boot_id":"b","systemd":{"user_manager":"reachable","failure_domain":"systemd_unit","can_cut_jobs":true,"can_cut_run":false,"observed_at":"2026-01-01T00:00:00Z"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rt, err := DecodeRuntime(data)
		if err != nil {
			if !errors.Is(err, ErrBadRuntime) || rt != nil {
				t.Fatalf("error %v with record %v", err, rt)
			}
			return
		}
		if rt.PID <= 0 || rt.StartTicks == 0 || rt.BootID == "" {
			t.Fatalf("accepted %+v", rt)
		}
	})
}
