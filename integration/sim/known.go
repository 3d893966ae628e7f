package sim

import "strings"

// Defect is a defect the simulation finds, with how to recognise a failure
// it causes. Classify names the defects a failing run matches, so that a
// summary of many runs counts them; a failure no defect matches is new.
type Defect struct {
	Name  string
	What  string
	Match func(p Plan, failure string) bool
}

// Defects found on the current code and not fixed yet. A defect leaves this
// list (and its seeds the fixed set's known failures) once fixed.
var Defects = []Defect{
	{
		Name: "order",
		What: "kafka_eos: per-partition order does not hold with max_in_flight > 1 (a batch of epoch N+1, " +
			"or a later batch of the same epoch, lands before an earlier one)",
		Match: func(p Plan, f string) bool {
			return p.Mode.k2k() && strings.HasPrefix(f, "order: in partition")
		},
	},
	{
		Name: "batch-mates",
		What: "kafka_eos: a batch holding an oversized message fails only that message, and Benthos " +
			"acknowledges its batch-mates, which were never written (lost)",
		Match: func(p Plan, f string) bool {
			// In Kafka-to-Kafka mode with group_membership the same
			// batch shows as a stall just short of the end.
			return len(p.Oversized) > 0 && (strings.HasPrefix(f, "acknowledged but not committed") || strings.HasPrefix(f, "lost:") ||
				(p.Mode == ModeMembers && strings.HasPrefix(f, "hang:")))
		},
	},
	{
		Name: "shutdown-timeout",
		What: "a stop (SIGTERM, or a fatal error's graceful stop) does not finish within shutdown_timeout, and the " +
			"process exits 1: seen with kafka_native's group_membership (kgo's LeaveGroup in Close waits behind a " +
			"JoinGroup in flight) and with kafka_state (a write whose answer was lost leaves every later write " +
			"failing, and the output's committer retries the dedupe positions forever)",
		Match: func(_ Plan, f string) bool {
			return strings.Contains(f, " exited 1")
		},
	},
	{
		Name: "k2k-batching",
		What: "kafka_eos: Kafka-to-Kafka with output batching stalls: every batch waits 5s for the batch " +
			"before it and is nacked, over and over (a bounded copy never ends)",
		Match: func(p Plan, f string) bool {
			return p.Mode.k2k() && p.Batching > 0 && strings.HasPrefix(f, "hang:")
		},
	},
}

// Classify returns the names of the defects r's failures match, and the
// failures none matches.
func Classify(r Result) (defects []string, unmatched []string) {
	seen := map[string]bool{}
	for _, f := range r.Failures {
		hit := false
		for _, d := range Defects {
			if d.Match(r.Plan, f) {
				hit = true
				if !seen[d.Name] {
					seen[d.Name] = true
					defects = append(defects, d.Name)
				}
			}
		}
		if !hit {
			unmatched = append(unmatched, f)
		}
	}
	return defects, unmatched
}
