package sim

import (
	"testing"
	"time"
)

func TestStretchFor(t *testing.T) {
	for _, c := range []struct {
		load  float64
		cores int
		want  float64
	}{
		{0, 2, 1},
		{8, 2, 1},  // 4 per core: not stretched
		{16, 2, 2}, // 8 per core
		{50, 2, 6.25},
		{500, 2, maxStretch},
		{6, 0, 1.5}, // cores unknown: taken as 1
	} {
		if got := stretchFor(c.load, c.cores); got != c.want {
			t.Errorf("stretchFor(%v, %d) = %v, want %v", c.load, c.cores, got, c.want)
		}
	}
	w := loadWatch{stretch: 2.5, last: time.Now()}
	if got := w.bound(45 * time.Second); got != 113*time.Second {
		t.Errorf("bound(45s) at 2.5x = %s, want 1m53s", got)
	}
	if w.String() == "" {
		t.Error("a stretched bound does not say so")
	}
	if s := (&loadWatch{}).String(); s != "" {
		t.Errorf("an unstretched bound says %q", s)
	}
}
