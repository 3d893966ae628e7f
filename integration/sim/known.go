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
			return len(p.Oversized) > 0 && (strings.HasPrefix(f, "acknowledged but not committed") || strings.HasPrefix(f, "lost:"))
		},
	},
	{
		Name: "k2k-stall",
		What: "kafka_eos: a Kafka-to-Kafka copy stalls: a batch waits 5s for the batch before it and is nacked, " +
			"over and over (a bounded copy never ends); most often with output batching, also with " +
			"group_membership and max_in_flight 1",
		Match: func(p Plan, f string) bool {
			return p.Mode.k2k() && strings.HasPrefix(f, "hang:") && strings.Contains(f, "a batch waits for the batch before it")
		},
	},
	{
		Name: "members-oversized-stall",
		What: "Kafka-to-Kafka with group_membership and an oversized record (taken by the dead-letter output): " +
			"the copy stops just short of the end with nothing logged, the group's lag never reaches 0",
		Match: func(p Plan, f string) bool {
			return p.Mode == ModeMembers && len(p.Oversized) > 0 && strings.HasPrefix(f, "hang:") &&
				!strings.Contains(f, "a batch waits for the batch before it")
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
