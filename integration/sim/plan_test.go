package sim

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestPrintPlans prints the plans of SIM_PLANS (comma-separated seeds).
func TestPrintPlans(t *testing.T) {
	v := os.Getenv("SIM_PLANS")
	if v == "" {
		t.Skip("SIM_PLANS not set")
	}
	for _, s := range strings.Split(v, ",") {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("%d: %s\n", n, Draw(n))
	}
}

// TestDrawIsDeterministic: a seed always draws the same plan, and the seeds
// cover every mode, both transaction versions and every fault action.
func TestDrawIsDeterministic(t *testing.T) {
	modes, tvs, actions := map[Mode]bool{}, map[int]bool{}, map[FaultAction]bool{}
	events := map[EventKind]bool{}
	for s := uint64(1); s <= 300; s++ {
		a, b := Draw(s), Draw(s)
		if a.String() != b.String() {
			t.Fatalf("seed %d drew two plans:\n%s\n%s", s, a, b)
		}
		modes[a.Mode], tvs[a.TV] = true, true
		for _, f := range a.Faults {
			actions[f.Action] = true
		}
		for _, e := range a.Events {
			events[e.Kind] = true
		}
	}
	if len(modes) != 7 || len(tvs) != 2 || len(actions) != 4 || len(events) != 4 {
		t.Fatalf("300 seeds drew modes %v, versions %v, fault actions %v, events %v", modes, tvs, actions, events)
	}
}

// TestDrawKeepsTheLintRule: no seed draws a configuration `connect-eos lint`
// refuses: pipeline threads other than 1 in dedupe mode, or in
// Kafka-to-Kafka mode with output batching. Other runs draw 2 or 4 threads
// now and then.
func TestDrawKeepsTheLintRule(t *testing.T) {
	threads := map[int]int{}
	for s := uint64(1); s <= 2000; s++ {
		p := Draw(s)
		threads[p.Threads]++
		if p.Threads != 1 && (p.Mode == ModeDedupe || (p.Mode.k2k() && p.Batching > 0)) {
			t.Fatalf("seed %d draws a configuration the lint rule refuses: %s", s, p)
		}
	}
	if threads[2] == 0 || threads[4] == 0 || threads[1] < 1000 {
		t.Fatalf("2000 seeds drew threads %v", threads)
	}
}

// TestInjectorCountsRequests: a fault hits the At-th to the (At+Count-1)-th
// request of its kind counted once armed, never one before arming.
func TestInjectorCountsRequests(t *testing.T) {
	in := newInjector([]ReqFault{
		{Key: 0, At: 2, Count: 2, Action: ActError, Code: 6},
		{Key: 0, At: 1, Count: 1, Action: ActClose},
		{Key: 1, At: 0, Count: -1, Action: ActError, Code: 29, Fatal: true},
	})
	ctl := func(a FaultAction) bool { return a == ActError || a == ActDelay }
	if i := in.pick(0, in.ctlCount, ctl); i != -1 {
		t.Fatalf("before arming: fault %d", i)
	}
	in.arm(true)
	var got []int
	for range 5 {
		got = append(got, in.pick(0, in.ctlCount, ctl))
	}
	if fmt.Sprint(got) != "[-1 -1 0 0 -1]" {
		t.Fatalf("produce faults by request: %v, want [-1 -1 0 0 -1]", got)
	}
	if i := in.pick(1, in.ctlCount, ctl); i != 2 || !in.fatalSeen() {
		t.Fatalf("the fatal fault: %d, seen %v", i, in.fatalSeen())
	}
	in.liftFatal()
	if i := in.pick(1, in.ctlCount, ctl); i != -1 {
		t.Fatalf("the lifted fatal fault still hits: %d", i)
	}
}

// TestOverrideThrottle: a triage override slows the pipeline down (the
// throttle per record), so that an event drawn at a share of the input lands
// in the middle of a copy that would otherwise end first; the rest of the
// plan stays the seed's.
func TestOverrideThrottle(t *testing.T) {
	p := Draw(8161861579037314397)
	o, err := Override(p, "throttle=10ms")
	if err != nil {
		t.Fatal(err)
	}
	if o.Throttle != 10*time.Millisecond {
		t.Fatalf("throttle %v, want 10ms", o.Throttle)
	}
	o.Throttle = p.Throttle
	if o.String() != p.String() {
		t.Fatalf("the override changed more than the throttle:\n%s\n%s", o, p)
	}
	if _, err := Override(p, "throttle=fast"); err == nil {
		t.Fatal("throttle=fast: no error")
	}
}

// TestHarnessRequestsNotFaulted: the harness's own OffsetFetch (pollOffsets,
// every 10ms) names harnessMarker and is neither faulted nor counted, so that
// an OffsetFetch fault hits the pipeline's n-th request, not the harness's.
func TestHarnessRequestsNotFaulted(t *testing.T) {
	poll := kmsg.NewPtrOffsetFetchRequest()
	poll.Group = group
	mark := kmsg.NewOffsetFetchRequestTopic()
	mark.Topic = harnessMarker
	poll.Topics = append(poll.Topics, mark)
	pipeline := kmsg.NewPtrOffsetFetchRequest()
	g := kmsg.NewOffsetFetchRequestGroup()
	g.Group = group
	in := kmsg.NewOffsetFetchRequestGroupTopic()
	in.Topic = inTopic
	g.Topics = append(g.Topics, in)
	pipeline.Groups = append(pipeline.Groups, g)
	if !harnessRequest(poll) || harnessRequest(pipeline) || harnessRequest(kmsg.NewPtrProduceRequest()) {
		t.Fatalf("harness poll %v, pipeline's OffsetFetch %v, a Produce %v; want true, false, false",
			harnessRequest(poll), harnessRequest(pipeline), harnessRequest(kmsg.NewPtrProduceRequest()))
	}
}
