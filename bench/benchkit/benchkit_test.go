package benchkit

import (
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	ms := time.Millisecond
	in := []time.Duration{9 * ms, 1 * ms, 5 * ms, 3 * ms, 7 * ms, 2 * ms, 4 * ms, 6 * ms, 8 * ms, 10 * ms}
	s := Summarize(in)
	if s.N != 10 || s.P50 != 5500*time.Microsecond || s.P90 != 9*ms || s.Min != ms || s.Max != 10*ms {
		t.Fatalf("Summarize = %+v", s)
	}
	if in[0] != 9*ms {
		t.Fatal("Summarize reordered its input")
	}
	var hundred []time.Duration
	for i := 100; i >= 1; i-- {
		hundred = append(hundred, time.Duration(i)*ms)
	}
	if h := Summarize(hundred); h.P90 != 90*ms || h.P99 != 99*ms || h.Max != 100*ms {
		t.Fatalf("100 samples: %+v", h)
	}
	if odd := Summarize([]time.Duration{3 * ms, 1 * ms, 2 * ms}); odd.P50 != 2*ms || odd.P90 != 3*ms {
		t.Fatalf("odd count: %+v", odd)
	}
	if (Summarize(nil) != Stats{}) {
		t.Fatal("empty input")
	}
	if MS(1500*time.Microsecond) != 1.5 {
		t.Fatal("MS")
	}
}
