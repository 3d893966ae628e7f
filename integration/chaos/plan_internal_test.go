package chaos

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestPlan checks the round plan: every round once, the long rounds in the
// first two thirds, broker bounces alternating kill -9 and clean.
func TestPlan(t *testing.T) {
	for seed := range uint64(50) {
		k := knobs{kills: 20, sigterms: 2, brokerRestarts: 2, zombies: 1, brokerKill9: true}
		evs := k.plan(rand.New(rand.NewPCG(seed, seed)))
		count := map[event]int{}
		var brokers []event
		for i, e := range evs {
			count[e]++
			if e != evKill && i >= (2*len(evs)+2)/3 {
				t.Fatalf("seed %d: %s at round %d of %d", seed, e, i+1, len(evs))
			}
			if e == evBrokerHard || e == evBrokerClean {
				brokers = append(brokers, e)
			}
		}
		if count[evKill] != 20 || count[evTerm] != 2 || count[evZombie] != 1 || len(brokers) != 2 {
			t.Fatalf("seed %d: %v", seed, count)
		}
		if brokers[0] != evBrokerHard || brokers[1] != evBrokerClean {
			t.Fatalf("seed %d: broker rounds %v", seed, brokers)
		}
	}
	// Without brokerKill9 (the unbounded variant) every bounce is clean.
	k := knobs{kills: 3, brokerRestarts: 3, brokerKill9: false}
	count := map[event]int{}
	for _, e := range k.plan(rand.New(rand.NewPCG(2, 2))) {
		count[e]++
	}
	if count[evBrokerClean] != 3 || count[evBrokerHard] != 0 || count[evKill] != 3 {
		t.Fatalf("plan without brokerKill9: %v", count)
	}
	// zombieFirst (the unbounded variant): the zombie is the first round
	// that is not a SIGKILL.
	for seed := range uint64(50) {
		k := knobs{kills: 3, sigterms: 1, brokerRestarts: 2, zombies: 1, zombieFirst: true}
		evs := k.plan(rand.New(rand.NewPCG(seed, seed)))
		for _, e := range evs {
			if e != evKill {
				if e != evZombie {
					t.Fatalf("seed %d: zombieFirst plan %v", seed, evs)
				}
				break
			}
		}
	}
	// CI: 3 kills, 1 SIGTERM, 2 bounces, 1 zombie.
	k = knobs{kills: 3, sigterms: 1, brokerRestarts: 2, zombies: 1, brokerKill9: true}
	if evs := k.plan(rand.New(rand.NewPCG(1, 1))); len(evs) != 7 {
		t.Fatalf("plan %v", evs)
	}
}

// A chaos run whose rounds did not land fails: no SIGKILL, a missing bounce
// or SIGTERM, or a zombie that was never fenced (it never wrote again) are
// each reported; a run where everything landed reports nothing.
func TestMissedChaosFailsARunWithoutItsChaos(t *testing.T) {
	k := knobs{kills: 3, sigterms: 1, brokerRestarts: 2, zombies: 1, brokerKill9: true}
	plan := k.plan(rand.New(rand.NewPCG(7, 7)))
	all := stats{kills: 3, sigterms: 1, brokerHard: 1, brokerClean: 1, zombies: 1, zombieExits: []int{3}}
	if m := missedChaos(plan, all); len(m) != 0 {
		t.Fatalf("a run where every round landed: %v", m)
	}
	// A try that idled, then one that was fenced: the zombie happened.
	retried := all
	retried.zombies, retried.zombieExits, retried.idleZombies, retried.zombieNudges = 2, []int{0, 3}, 1, 2
	if m := missedChaos(plan, retried); len(m) != 0 {
		t.Fatalf("a run whose second zombie try was fenced: %v", m)
	}
	for name, tc := range map[string]struct {
		edit func(*stats)
		want string
	}{
		"no kill":             {func(s *stats) { s.kills = 0 }, "planned 3 SIGKILLs of a running copier, 0 happened"},
		"a kill short":        {func(s *stats) { s.kills = 2 }, "planned 3 SIGKILLs of a running copier, 2 happened"},
		"no SIGTERM":          {func(s *stats) { s.sigterms = 0 }, "planned 1 SIGTERMs, 0 happened"},
		"no kill -9 bounce":   {func(s *stats) { s.brokerHard = 0 }, "planned 1 broker kill -9 bounces, 0 happened"},
		"no clean bounce":     {func(s *stats) { s.brokerClean = 0 }, "planned 1 clean broker bounces, 0 happened"},
		"no zombie round":     {func(s *stats) { s.zombies, s.zombieExits = 0, nil }, "planned 1 zombie rounds, 0 happened"},
		"zombie never fenced": {func(s *stats) { s.zombieExits, s.idleZombies = []int{0}, 1 }, "planned 1 zombies fenced (exit 3 after writing again), 0 happened"},
		"zombie exit unknown": {func(s *stats) { s.zombieExits = nil }, "zombies fenced"},
		// The unbounded runs try the zombie round again when the woken
		// process stayed idle: tries that all idled are no zombie.
		"every try idle": {func(s *stats) { s.zombies, s.zombieExits, s.idleZombies, s.zombieNudges = 3, []int{0, 0, 0}, 3, 3 },
			"planned 1 zombies fenced (exit 3 after writing again), 0 happened"},
		"nothing at all": {func(s *stats) { *s = stats{} }, "SIGKILLs"},
	} {
		st := all
		st.zombieExits = append([]int(nil), all.zombieExits...)
		tc.edit(&st)
		m := missedChaos(plan, st)
		found := false
		for _, l := range m {
			found = found || strings.Contains(l, tc.want)
		}
		if !found {
			t.Errorf("%s: %v, want a line containing %q", name, m, tc.want)
		}
	}
}
