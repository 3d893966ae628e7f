package chaos

import (
	"math/rand/v2"
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
	// CI: 3 kills, 1 SIGTERM, 2 bounces, 1 zombie.
	k = knobs{kills: 3, sigterms: 1, brokerRestarts: 2, zombies: 1, brokerKill9: true}
	if evs := k.plan(rand.New(rand.NewPCG(1, 1))); len(evs) != 7 {
		t.Fatalf("plan %v", evs)
	}
}
