package sim

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// The harness's bounds (a run's hang bound, the time an instance has to
// stop on a fatal fault) are set for an idle machine and stretched by the
// machine's load: under -race, with other jobs taking the cores, a run that
// takes 10 s on an idle machine takes 40 s or more, and a bound that does
// not stretch reads the load as a hang. A hang is still one: it is found
// later, never passed.
const (
	// loadPerCoreFree is the load average per core up to which the bounds
	// are not stretched (the simulation's own runs load the cores).
	loadPerCoreFree = 4
	// maxStretch caps the stretch, so that a real hang still ends the run.
	maxStretch = 8
)

// stretchFor is the factor a bound is stretched by at a load average of
// load on cores cores: 1 up to loadPerCoreFree per core, then in
// proportion, at most maxStretch.
func stretchFor(load float64, cores int) float64 {
	if cores < 1 {
		cores = 1
	}
	f := load / float64(cores) / loadPerCoreFree
	if f < 1 {
		return 1
	}
	if f > maxStretch {
		return maxStretch
	}
	return f
}

// loadAverage is the machine's one-minute load average (0 where the system
// does not say: the bounds are then not stretched).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return 0
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return 0
	}
	return v
}

// loadWatch keeps the highest stretch seen during a run, sampling the load
// average at most once a second.
type loadWatch struct {
	stretch float64
	load    float64 // the load average that gave it
	last    time.Time
}

// sample reads the load average if a second passed since the last read, and
// returns the run's stretch so far.
func (w *loadWatch) sample() float64 {
	if w.stretch < 1 {
		w.stretch = 1
	}
	if now := time.Now(); now.Sub(w.last) >= time.Second {
		w.last = now
		l := loadAverage()
		if f := stretchFor(l, runtime.NumCPU()); f > w.stretch {
			w.stretch, w.load = f, l
		}
	}
	return w.stretch
}

// bound is d stretched by the run's load so far.
func (w *loadWatch) bound(d time.Duration) time.Duration {
	return time.Duration(float64(d) * w.sample()).Round(time.Second)
}

// String says how a bound was stretched ("" if not).
func (w *loadWatch) String() string {
	if w.stretch <= 1 {
		return ""
	}
	return " (stretched " + strconv.FormatFloat(w.stretch, 'f', 1, 64) + "x by a load average of " +
		strconv.FormatFloat(w.load, 'f', 1, 64) + " on " + strconv.Itoa(runtime.NumCPU()) + " cores)"
}
