package stats

import (
	"math"
	"slices"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i))
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 50}, {99, 99}, {100, 100}, {1, 1}, {0.1, 1}, {90, 90}} {
		if got := Percentile(ds, c.p); got != c.want {
			t.Errorf("p%v of 1..100 = %v, want %v", c.p, got, c.want)
		}
	}
	// Nearest rank: the p50 of four values is the second, of five the third.
	if got := Percentile([]time.Duration{1, 2, 3, 4}, 50); got != 2 {
		t.Errorf("p50 of 1..4 = %v, want 2", got)
	}
	if got := Percentile([]time.Duration{1, 2, 3, 4, 5}, 50); got != 3 {
		t.Errorf("p50 of 1..5 = %v, want 3", got)
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("p50 of nothing = %v, want 0", got)
	}
	if got := Percentile([]time.Duration{7}, 99); got != 7 {
		t.Errorf("p99 of one value = %v, want it", got)
	}
}

func TestMedian(t *testing.T) {
	in := []time.Duration{5, 1, 3}
	if got := Median(in); got != 3 {
		t.Errorf("median of 5, 1, 3 = %v, want 3", got)
	}
	if !slices.Equal(in, []time.Duration{5, 1, 3}) {
		t.Errorf("Median sorted its argument: %v", in)
	}
	if got := Median([]time.Duration{4, 1, 3, 2}); got != 2 {
		t.Errorf("median of 1..4 (durations) = %v, want 2 (the mean of 2 and 3, truncated)", got)
	}
	if got := Median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median of 1..4 (floats) = %v, want 2.5", got)
	}
	if got := Median([]float64(nil)); got != 0 {
		t.Errorf("median of nothing = %v, want 0", got)
	}
}

func TestRatioRange(t *testing.T) {
	lo, hi := RatioRange([]float64{10, 30, 20}, []float64{10, 10, 40})
	if lo != 0.5 || hi != 3 {
		t.Errorf("range of 10/10, 30/10, 20/40 = %v–%v, want 0.5–3", lo, hi)
	}
	// Only the pairs both have.
	lo, hi = RatioRange([]float64{10, 30}, []float64{5})
	if lo != 2 || hi != 2 {
		t.Errorf("range of one pair = %v–%v, want 2–2", lo, hi)
	}
	if lo, hi := RatioRange(nil, []float64{1}); !math.IsNaN(lo) || !math.IsNaN(hi) {
		t.Errorf("range of no pair = %v–%v, want NaN", lo, hi)
	}
}

func TestFit(t *testing.T) {
	// y = 2 + 3x exactly.
	l := Fit([][2]float64{{0, 2}, {1, 5}, {2, 8}, {4, 14}})
	if math.Abs(l.A-2) > 1e-9 || math.Abs(l.B-3) > 1e-9 || math.Abs(l.R2-1) > 1e-9 {
		t.Errorf("fit of y = 2 + 3x: %+v", l)
	}
	if c := l.Curvature(); math.Abs(c-1) > 1e-9 {
		t.Errorf("curvature of a straight line %v, want 1", c)
	}
	// Scattered points: a lower R².
	s := Fit([][2]float64{{0, 0}, {1, 2}, {2, 1}, {3, 3}})
	if s.R2 <= 0 || s.R2 >= 1 || s.B <= 0 {
		t.Errorf("fit of scattered points: %+v, want 0 < R² < 1 and a positive slope", s)
	}
	// y = x²: the upper half is steeper.
	q := Fit([][2]float64{{1, 1}, {2, 4}, {3, 9}})
	if c := q.Curvature(); math.Abs(c-5.0/3) > 1e-9 {
		t.Errorf("curvature of x² at 1, 2, 3: %v, want 5/3", c)
	}
	// Flat in y: a perfect fit of slope 0.
	f := Fit([][2]float64{{0, 7}, {1, 7}, {2, 7}})
	if f.B != 0 || f.A != 7 || f.R2 != 1 || f.MeanY() != 7 {
		t.Errorf("fit of a constant: %+v, mean %v", f, f.MeanY())
	}
	// One x only: no slope, the mean.
	if o := Fit([][2]float64{{3, 1}, {3, 5}}); o.B != 0 || o.A != 3 {
		t.Errorf("fit at one x: %+v, want A 3 and B 0", o)
	}
	if e := Fit(nil); e.A != 0 || e.B != 0 || e.MeanY() != 0 {
		t.Errorf("fit of nothing: %+v", e)
	}
}
