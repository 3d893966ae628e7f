package sim

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// RunMany runs seeds, parallel at a time, each in a directory of its own
// under o.Dir (removed after a passing run unless keep), and calls report
// with each result as it comes (serially); once report returns false, no
// further seed starts.
func RunMany(seeds []uint64, parallel int, o Options, keep bool, report func(Result, string) bool) {
	if parallel < 1 {
		parallel = 1
	}
	var mu sync.Mutex
	stop := false
	work := make(chan uint64)
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seed := range work {
				ro := o
				ro.Dir = filepath.Join(o.Dir, fmt.Sprintf("seed-%d", seed))
				res := Run(seed, ro)
				if res.OK() && !keep {
					_ = os.RemoveAll(ro.Dir)
				}
				mu.Lock()
				if !report(res, ro.Dir) {
					stop = true
				}
				mu.Unlock()
			}
		}()
	}
	for _, s := range seeds {
		mu.Lock()
		stopped := stop
		mu.Unlock()
		if stopped {
			break
		}
		work <- s
	}
	close(work)
	wg.Wait()
}
