// Package stats is the arithmetic of the benchmark's tables: percentiles and
// medians of measurements, the range of per-round ratios, and least-squares
// lines (how a time grows with a size, how a heap trends over a run).
package stats

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the p-th percentile (0 < p ≤ 100) of sorted, by the
// nearest rank: the value below which p% of the values lie, rounded to the
// closest one measured. It returns 0 for no values.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Number is what Median takes: durations, byte counts, rates.
type Number interface {
	~int | ~int64 | ~float64
}

// Median returns the median of xs (the mean of the two middle values for an
// even count; 0 for none). xs is not modified.
func Median[T Number](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// RatioRange returns the lowest and the highest of a[i]/b[i] over the pairs
// both slices have (the rounds of two cells), NaN for none.
func RatioRange(a, b []float64) (lo, hi float64) {
	n := min(len(a), len(b))
	if n == 0 {
		return math.NaN(), math.NaN()
	}
	lo, hi = math.Inf(1), math.Inf(-1)
	for i := range n {
		q := a[i] / b[i]
		lo, hi = math.Min(lo, q), math.Max(hi, q)
	}
	return lo, hi
}

// Line is y = A + B·x fitted by least squares, with its coefficient of
// determination and the points it was fitted to.
type Line struct {
	A, B, R2 float64
	Points   [][2]float64
}

// Fit fits a line to points by least squares. With fewer than two points, or
// all at one x, the line is flat at the mean of y (B = 0); R2 is 1 when the
// line passes through every point.
func Fit(points [][2]float64) Line {
	l := Line{Points: points}
	n := float64(len(points))
	if n == 0 {
		return l
	}
	var sx, sy, sxx, sxy, syy float64
	for _, p := range points {
		sx, sy = sx+p[0], sy+p[1]
		sxx, sxy, syy = sxx+p[0]*p[0], sxy+p[0]*p[1], syy+p[1]*p[1]
	}
	dx, dy := n*sxx-sx*sx, n*syy-sy*sy
	if dx == 0 {
		l.A = sy / n
		return l
	}
	num := n*sxy - sx*sy
	l.B = num / dx
	l.A = (sy - l.B*sx) / n
	if dy == 0 {
		l.R2 = 1
	} else {
		l.R2 = num * num / (dx * dy)
	}
	return l
}

// Curvature compares the slope of the upper half of the points with that of
// the lower half (the points in increasing x): 1 for a straight line, more
// when y grows faster than x. Fewer than three points count as straight.
func (l Line) Curvature() float64 {
	p := l.Points
	if len(p) < 3 {
		return 1
	}
	mid := len(p) / 2
	lower := (p[mid][1] - p[0][1]) / (p[mid][0] - p[0][0])
	upper := (p[len(p)-1][1] - p[mid][1]) / (p[len(p)-1][0] - p[mid][0])
	return upper / lower
}

// MeanY is the mean of the points' y (0 for none).
func (l Line) MeanY() float64 {
	if len(l.Points) == 0 {
		return 0
	}
	var sy float64
	for _, p := range l.Points {
		sy += p[1]
	}
	return sy / float64(len(l.Points))
}
