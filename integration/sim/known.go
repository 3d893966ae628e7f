package sim

import (
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Defect is a defect the simulation finds, with how to recognise a failure
// it causes. Classify names the defects a failing run matches, so that a
// summary of many runs counts them; a failure no defect matches is new.
type Defect struct {
	Name string
	What string
	// Limit marks a limitation of kfake or of the mode under test (what
	// the mode promises, not a defect of it): the fixed set reports a run
	// that fails only on limitations and does not fail on it.
	Limit bool
	Match func(r Result, failure string) bool
}

// Defects the simulation finds (or found, before their fix: then it is the
// regression it would catch again). The fixed set's known failures name the
// ones not fixed yet.
var Defects = []Defect{
	{
		Name: "order",
		What: "kafka_eos: per-partition order does not hold with max_in_flight > 1 (a batch of epoch N+1, " +
			"or a later batch of the same epoch, lands before an earlier one)",
		Match: func(r Result, f string) bool {
			p := r.Plan
			return p.Mode.k2k() && strings.HasPrefix(f, "order: in partition")
		},
	},
	{
		Name: "batch-mates",
		What: "kafka_eos: a batch holding an oversized message fails only that message, and Benthos " +
			"acknowledges its batch-mates, which were never written (lost)",
		Match: func(r Result, f string) bool {
			p := r.Plan
			return len(p.Oversized) > 0 && (strings.HasPrefix(f, "acknowledged but not committed") || strings.HasPrefix(f, "lost:"))
		},
	},
	{
		Name: "k2k-stall",
		What: "kafka_eos: a Kafka-to-Kafka copy stalls: a batch waits 5s for the batch before it and is nacked, " +
			"over and over (a bounded copy never ends); with output batching (after epochs aborted, " +
			"group_membership and oversized records; Arrow after a fatal stop). Fixed for pipeline threads " +
			"above max_in_flight without output batching (one thread's batch held the output's only call " +
			"waiting for the batch the other thread could not hand over): a waiting batch gives its turn up. " +
			"Fixed with output batching after an epoch aborted behind a dead-letter route (its batches' nacks came " +
			"back shuffled, Benthos' retry list replayed them in that order, half a second apart from a batch's " +
			"third replay, and each output batch continued its partition's run by one record): the input's retry " +
			"list replays rejected batches in the order read, after a wait of 1 ms doubling to 1 s",
		Match: func(r Result, f string) bool {
			p := r.Plan
			// Restarts that all stop on kfake-unknown-loop stall any
			// copy; the waits the hint counted were an earlier
			// instance's.
			return p.Mode.k2k() && strings.HasPrefix(f, "hang:") && strings.Contains(f, "a batch waits for the batch before it") &&
				!kfakeUnknownLoop(r, f)
		},
	},
	{
		Name: "stale-abort-contradiction",
		What: "kafka_eos recovery, Kafka-to-Kafka: a slot's record still said PREPARED for an epoch the " +
			"instance had aborted and replayed (its PREPARE write timed out and landed late, over the ABORTED " +
			"written after it); recovery found that epoch aborted and a later in-doubt epoch committed, called it " +
			"a contradiction, and every start stopped (the copy never ended). Fixed: an aborted epoch whose source " +
			"offsets the group's committed offsets have reached (its batches committed again since) bars nothing " +
			"after it; one the group has not reached still stops the start",
		Match: func(r Result, f string) bool {
			return r.Plan.Mode.k2k() && strings.Contains(f, "committed after an earlier aborted epoch")
		},
	},
	{
		Name: "plain-stale-abort-stop",
		What: "kafka_eos recovery, plain mode: a slot's record still said PREPARED for an epoch that had aborted " +
			"(its PREPARE write timed out on a slow state cache and landed), and a later epoch of another slot " +
			"committed and was left in doubt; recovery called the pair a contradiction and every start stopped (the " +
			"run never ended), though plain mode keeps no order across a failure and a correct run leaves that pair " +
			"(seed 4802122590208396173, plain-kafka-members, TV2, a 1.2s cache-set fault). Fixed: in plain mode the " +
			"later epoch is marked committed, the aborted one aborted",
		Match: func(r Result, f string) bool {
			m := r.Plan.Mode
			return (m == ModePlain || m == ModePlainKafka || m == ModePlainKafkaMembers) && strings.Contains(f, stallContradiction)
		},
	},
	{
		Name: "members-oversized-stall",
		What: "Kafka-to-Kafka with group_membership and an oversized record (taken by the dead-letter output): " +
			"the copy stops just short of the end with nothing logged, the group's lag never reaches 0 " +
			"(seed 30; not seen since 2 Dec: its cause was not found)",
		Match: func(r Result, f string) bool {
			p := r.Plan
			return p.Mode == ModeMembers && len(p.Oversized) > 0 && strings.HasPrefix(f, "hang:") &&
				!strings.Contains(f, "a batch waits for the batch before it") && !strings.Contains(f, stallMixedStale) &&
				!strings.Contains(f, stallStateWrites) && !kfakeUnknownLoop(r, f)
		},
	},
	{
		Name: "dlq-batching-dups",
		What: "kafka_eos with output batching behind a fallback (a dead-letter route, as " +
			"config/examples/kafka_eos_dead_letter.yaml): Benthos' fallback cannot map kafka_eos's " +
			"per-message error back to the input's messages, falls the whole input batch through, and the " +
			"route rejects the messages kafka_eos wrote, which the input replays: written twice in " +
			"Kafka-to-Kafka mode",
		Match: func(r Result, f string) bool {
			p := r.Plan
			return p.Mode.k2k() && p.Batching > 0 && len(p.Oversized) > 0 && strings.HasPrefix(f, "duplicated in an end-to-end mode")
		},
	},
	{
		Name: "dlq-held-replay-dups",
		What: "kafka_eos Kafka-to-Kafka (and mirror) behind a dead-letter route: the next owner of an offset held " +
			"at an unwritable message replays the records its previous owner wrote past it; the route took the " +
			"message early in the replay and the offset moved at once to the previous owner's reach, and that " +
			"commit dropped what the offset's metadata said: the rest of the replay, still in the pipeline, was " +
			"written twice. Fixed: the metadata's records are acknowledged unwritten until the input hands " +
			"their end over",
		Match: func(r Result, f string) bool {
			p := r.Plan
			return p.Mode.k2k() && len(p.Oversized) > 0 && r.Stats.Starts > 1 && strings.HasPrefix(f, "duplicated in an end-to-end mode")
		},
	},
	{
		Name: "dlq-crash-loss",
		What: "kafka_eos Kafka-to-Kafka behind a dead-letter route: the source offset of a message that cannot " +
			"be written committed with its batch-mates' (the group's offset moved past it) before the dead-letter " +
			"output took it; a crash in between lost it (in neither output). Fixed: the offset is held at the " +
			"message until the input hands a position past it over, the records written past it named in the " +
			"offset's metadata",
		Match: func(r Result, f string) bool {
			return r.Plan.Mode.k2k() && len(r.Plan.Oversized) > 0 && strings.Contains(f, "reached neither the output nor the dead-letter output")
		},
	},
	{
		Name: "zombie-writes",
		What: "kafka_eos: a replaced instance still running (a zombie) makes the live instance miss a " +
			"committed epoch: its late writes overwrote the live instance's slot records in the state cache " +
			"(fixed: owner tokens), or it committed epochs after the live instance's recovery read the state " +
			"cache and before that instance's InitProducerID fenced their slot (fixed: the state is read again " +
			"after the fence; under transaction version 0 an open in-doubt epoch is aborted in dedupe mode): " +
			"dedupe positions lost and replays duplicated, or a contradiction that stops the start",
		Match: func(r Result, f string) bool {
			p := r.Plan
			if p.Mode.k2k() && p.Batching > 0 && len(p.Oversized) > 0 {
				return false // dlq-batching-dups
			}
			return r.Stats.Zombies > 0 && (strings.HasPrefix(f, "duplicated in an end-to-end mode") || strings.HasPrefix(f, "lost:") ||
				strings.Contains(f, "recovery decided") || strings.Contains(f, "committed after an earlier aborted epoch"))
		},
	},
	{
		Name: "k2k-zombie-dups",
		What: "kafka_eos recovery, Kafka-to-Kafka under transaction version 0: a rival's recovery resumed " +
			"(committed) an in-doubt epoch it saw Ongoing at its stored producer id and epoch, which a zombie " +
			"still running had committed before opening a later one on the slot (the slot keeps its producer " +
			"epoch across transactions): the later epoch's records were committed without their offsets and " +
			"copied again by the next owner (records twice, a partition out of order)",
		Match: func(r Result, f string) bool {
			p := r.Plan
			return p.Mode.k2k() && p.MaxInFlight > 1 && r.Stats.Zombies > 0 &&
				(strings.HasPrefix(f, "duplicated in an end-to-end mode") || strings.HasPrefix(f, "order: in partition"))
		},
	},
	{
		Name: "zombie-commit-after-observe",
		What: "kafka_eos (seen once): plain mode, kafka_state, transaction version 0, a " +
			"zombie whose rival crashed: the instance started after the crash observed the zombie's epoch " +
			"open and decided abort-open, and the broker's log has that epoch committed (the woken zombie's " +
			"commit landing between the observation and the fence, it seems): the state records an abort " +
			"the broker does not have. Fixed: an epoch decided abort-open is probed again once the slots " +
			"are fenced (found committed, it is recorded committed), and the decisions are written after " +
			"the fence with the instance's token, not over a newer record of the previous owner",
		Match: func(r Result, f string) bool {
			return r.Stats.Zombies > 0 && strings.Contains(f, "recovery decided") && strings.Contains(f, "abort-open, but the broker's log says committed")
		},
	},
	{
		Name: "zombie-rewarm",
		What: "kafka_eos: a woken zombie re-initialises a slot and takes its transactional id back: frozen in the " +
			"retried COMMITTED write of an epoch that committed on a slot whose client was spent (marked for a new " +
			"one), it wakes, the write lands (the rival had not written the slot yet, or the write had landed before " +
			"the freeze), and rewarm's fresh InitProducerID fences whoever owns the slot now (a live instance would " +
			"stop on the fence); the zombie then writes its pending batches there in a new transaction and stops on " +
			"another slot's fence, leaving that transaction open until the transaction timeout aborts it (read_committed " +
			"readers of its partitions held back meanwhile). Seen once, seed 7353689995965390664 (0 of 15 replays failed; in 1 the " +
			"zombie's InitProducerID and Produce after its wake showed, before the last start's InitProducerID, which aborted them). " +
			"Fixed: before a committed epoch's slot gets its new client, DescribeTransactions of its transactional id " +
			"is asked, as after an abort whose outcome the client does not know: another producer id, or a producer " +
			"epoch past the one the commit left (e under transaction version 0, e+1 under 2), stops the output as " +
			"fenced, without an InitProducerID. Seen again with the freeze between that check and the InitProducerID " +
			"(seed 3448434242917376268, transaction version 2: the check saw our own Empty at e+1, the rival's start " +
			"initialised the id, the zombie's InitProducerID took it back and its next epoch wrote 20 records and stayed " +
			"open). Fixed: the new client's epoch, two or more above the one the check saw after the one InitProducerID " +
			"it sent, shows the rival; the output stops as fenced with that client unused. Seen a third time with the " +
			"freeze in a start, between its slots' InitProducerIDs, while the rival ran to the end (seed " +
			"4798705213195344238, TV0): it woke with slot 0 fenced and slot 1 initialised after the rival, wrote an " +
			"epoch on slot 1 and stopped on slot 0's fence with that transaction open. Fixed: once every slot is " +
			"initialised, DescribeTransactions of each must show the start's own producer id and epoch, else the " +
			"start stops as fenced",
		Match: func(r Result, f string) bool {
			return r.Stats.Zombies > 0 && strings.HasPrefix(f, "transactions left open on the output")
		},
	},
	{
		Name: "start-cut-short",
		What: "kafka_eos: a start whose stream stopped as it started (a bounded input with nothing left to read) " +
			"did not resolve the epoch its predecessor left in doubt: Benthos, stopping, cancels the context of the " +
			"output's Connect, recovery never ran, and the epoch's transaction stayed open until its timeout (seed " +
			"6936658676135035244: a fatal EndTxn fault stopped the rival in doubt, the woken zombie had written every " +
			"record). Fixed: a start gets one commit_timeout past the cancellation to finish",
		Match: func(r Result, f string) bool {
			return r.Stats.FatalExits > 0 && strings.HasPrefix(f, "transactions left open on the output")
		},
	},
	{
		Name: "headers",
		What: "kafka_native: a record's headers overwrite the input's own metadata (kafka_partition, " +
			"kafka_key, kafka_offset): a copy partitioned or keyed by that metadata takes the header's value",
		Match: func(_ Result, f string) bool {
			return strings.Contains(f, " written with key ") || strings.Contains(f, " copied to partition ")
		},
	},
	{
		Name: "late-write-regress",
		What: "kafka_eos dedupe mode, a state cache whose writes can land late: a slot's COMMITTED write of epoch 4 " +
			"timed out twice on a slow cache and was retried until it landed; the slot then carried epoch 6, whose " +
			"PREPARE (with its positions) was written, and epoch 6 committed. The two timed-out writes of epoch 4's " +
			"COMMITTED then landed over that PREPARE (the same owner's token, so a fencing cache takes them), and the " +
			"instance crashed before epoch 6's COMMITTED and positions were written: the next start saw epoch 4 " +
			"committed on the slot, epoch 6 nowhere, loaded the positions before it and wrote epoch 6's records " +
			"again from the source's replay (seed 1458363239458492436, TV0, cache-set faults slow 1.5s x2 and " +
			"failing x3; 1 of 4 replays). Fixed: a slot whose record write failed (outcome unknown) gets a new " +
			"producer epoch before its next epoch, so its later writes carry a higher token and the late one is refused",
		Match: func(r Result, f string) bool {
			p := r.Plan
			if p.Mode != ModeDedupe || !strings.HasPrefix(f, "duplicated in an end-to-end mode") {
				return false
			}
			for _, c := range p.CacheFaults {
				if c.Op == "set" && c.Slow > 0 {
					return true
				}
			}
			return false
		},
	},
	{
		Name: "dedupe-stop-acks",
		What: "kafka_eos dedupe mode: once the output stopped (fenced, in doubt), a batch redelivered during " +
			"the drain is acknowledged as a duplicate of positions its aborted epoch had admitted",
		Match: func(r Result, f string) bool {
			p := r.Plan
			return p.Mode == ModeDedupe && len(p.Oversized) == 0 && strings.HasPrefix(f, "acknowledged but not committed")
		},
	},
	{
		Name: "commit-not-ours",
		What: "kafka_eos: a commit whose check finds the transaction at another producer's state is " +
			"acknowledged although it was never confirmed",
		Match: func(r Result, f string) bool {
			p := r.Plan
			return p.Mode != ModeDedupe && len(p.Oversized) == 0 && strings.HasPrefix(f, "acknowledged but not committed")
		},
	},
	{
		Name: "sigterm-fatal",
		What: "kafka_native: a SIGTERM during the final commit of a bounded read exits as fatal (3)",
		Match: func(_ Result, f string) bool {
			return strings.Contains(f, " exited 3 after a SIGTERM")
		},
	},
	{
		Name: "state-auth-retry",
		What: "kafka_eos with kafka_state as its state cache: a state-topic write the broker refuses for good " +
			"(TOPIC_AUTHORIZATION_FAILED on its Produce) is retried as an unknown outcome (\"retrying before " +
			"the slot carries another epoch\", every 5s) instead of stopping the pipeline with the error. Fixed: " +
			"kafka_state says the broker refused the write, and the output stops (fatal) on a refused COMMITTED, " +
			"ABORTED or dedupe positions write, naming the cache, its topic and the refusal",
		Match: func(r Result, f string) bool {
			p := r.Plan
			if p.StateCache != "kafka_state" {
				return false
			}
			for _, ft := range p.Faults {
				if ft.Fatal && ft.Key == kmsg.Produce {
					return strings.Contains(f, "and no instance stopped on it") ||
						strings.Contains(f, "stopped on a fatal error that does not name the injected")
				}
			}
			return false
		},
	},
	{
		Name: "sequence-after-abort",
		What: "kafka_eos: after an epoch aborted at the transaction-timeout margin with its flush unfinished " +
			"(a produce answer dropped after the broker applied it, then NOT_LEADER answers), the next epoch on " +
			"that producer gets OUT_OF_ORDER_SEQUENCE_NUMBER, franz-go fails the producer ID for good, and the " +
			"pipeline stops (exit 3): franz-go rewinds the partition's sequence over the failed batch, and under " +
			"transaction version 0 the abort keeps the producer epoch (with as many records, the broker takes the " +
			"replay for a duplicate and it is lost). Fixed: an epoch aborted with records not all written gets " +
			"its slot a new client (a new producer epoch)",
		Match: func(_ Result, f string) bool {
			return strings.Contains(f, "with no fatal fault injected") && strings.Contains(f, "OUT_OF_ORDER_SEQUENCE_NUMBER")
		},
	},
	{
		Name: "first-read-close",
		What: "kafka_eos: a connection closed under AddPartitionsToTxn, then at the first request on the " +
			"connection of the retry, which franz-go takes for a missing SASL (\"is SASL missing?\") and fails " +
			"the producer ID with for good: the next epoch on the slot stops the pipeline (exit 3) on a transient " +
			"fault. Fixed: the epoch is aborted and the slot gets a new client; 5 in a row stop it",
		Match: func(_ Result, f string) bool {
			return strings.Contains(f, "with no fatal fault injected") && strings.Contains(f, "is SASL missing?")
		},
	},
	{
		Name: "produce-refresh-wait",
		What: "kafka_eos: Produce refused NOT_LEADER_FOR_PARTITION or NOT_ENOUGH_REPLICAS several times in a row " +
			"(no hint of a new leader): franz-go retries such a batch after a metadata refresh, at most one per " +
			"MetadataMinAge, 5s by default, so every refusal after the first cost 5s of the epoch's transaction " +
			"timeout; each epoch holding the batch aborted at its deadline (or, its abort waiting on the next " +
			"refresh, was aborted by kfake's timeout first and stopped as fenced: kfake_fence), about two refusals " +
			"per transaction timeout, and the run outlived its bound (seed 4886304739810381260, dedupe, TV0, nine " +
			"refusals in a row, hung at 48 % with three kfake_fence stops). Fixed: the slot clients refresh at most " +
			"250ms apart (half the timeout's margin when that is less); kafka_state's client, whose writes waited " +
			"the same way, 100ms apart (state-write-stall)",
		Match: func(r Result, f string) bool {
			return strings.HasPrefix(f, "hang:") && produceRefusals(r.Plan) >= 5 && !otherHang(r, f)
		},
	},
	{
		Name:  "kfake-unknown-loop",
		Limit: true,
		What: "a kfake limitation, not a defect: an in-doubt epoch that kfake's DescribeTransactions shows Empty " +
			"(Apache Kafka answers CompleteAbort or CompleteCommit) and that the probe cannot decide: every restart " +
			"stops in doubt (kfake_unknown) until the run's bound. Its first seed, 6564718080450180695, was an epoch " +
			"with no record on the broker, which was offsets-only-unknown (a defect, fixed)",
		Match: kfakeUnknownLoop,
	},
	{
		Name:  "kfake-timeout-fence",
		Limit: true,
		What: "a kfake limitation, not a defect (seed 1099609616224070459, no zombie): an epoch still open when " +
			"kfake's transaction timeout aborted it (and bumped the producer epoch) gets PRODUCER_FENCED on its own " +
			"abort (transaction version 0), and kfake's DescribeTransactions then shows Empty at epoch+1, the " +
			"state another instance's InitProducerID leaves, so the output stops on a fence by another producer; " +
			"Apache Kafka shows PrepareAbort or CompleteAbort there, which the output takes for its own timeout " +
			"(TestKafkaOwnTimeoutNotZombie). The harness counts that stop as kfake_fence and restarts, except " +
			"while the plan's fatal fault is active: then the stop does not name the fault",
		Match: func(r Result, f string) bool {
			return r.Stats.Zombies == 0 && strings.Contains(f, "does not name the injected") &&
				strings.Contains(f, "was fenced by another producer")
		},
	},
	{
		Name: "offsets-backwards",
		What: "a committed offset of the input's group moves backwards. Seen: kafka_native behind a kafka_eos " +
			"output that commits the group's offsets in its transactions fell back to a plain OffsetCommit " +
			"(generation -1, taken from anyone) once that output closed: a woken zombie whose output stopped on " +
			"an in-doubt epoch committed on close where it had started (0) over its successor's stops (seed " +
			"1568310813552532710, in/0 339 -> 0), or its own reach without the held offset's metadata over the " +
			"successor's offset held at a dead-letter record (61 over 56 in a traced replay), so that a next " +
			"owner would copy again what the metadata said was written (the replay that copied 120 records twice " +
			"started its third instance at 187, the zombie's reach). Fixed: once the output closed, the input " +
			"commits nothing",
		Match: func(r Result, f string) bool {
			if r.Plan.Mode == ModePlainKafka && r.Stats.Zombies > 0 {
				return false // plain-zombie-commit
			}
			return strings.Contains(f, "moved backwards")
		},
	},
	{
		Name:  "plain-zombie-commit",
		Limit: true,
		What: "kafka_native committing its group itself without group_membership (plain mode behind a Kafka " +
			"input): a frozen instance that wakes after its replacement committed further commits its older " +
			"positions (Kafka takes a commit without a generation from anyone), and the group's offset moves " +
			"back: records read again, at-least-once as plain mode promises, nothing lost",
		Match: func(r Result, f string) bool {
			return r.Plan.Mode == ModePlainKafka && r.Stats.Zombies > 0 &&
				(strings.Contains(f, "moved backwards") || strings.HasPrefix(f, "the group's committed offsets "))
		},
	},
	{
		Name: "probe-error-hidden",
		What: "kafka_eos: a recovery whose probe Fetch is refused (TOPIC_AUTHORIZATION_FAILED) stops with " +
			"\"in doubt: unknown: the broker and the probe identify nothing\", not naming the refusal it logged " +
			"as a warning (and says the next start resolves it, which fails the same way). Fixed: the in-doubt " +
			"stop names the failed check's error and, for an authorization refusal, says every start stops the " +
			"same way until it is fixed (fatal at the first attempt)",
		Match: func(r Result, f string) bool {
			for _, ft := range r.Plan.Faults {
				if ft.Fatal && ft.Key == kmsg.Fetch {
					return strings.Contains(f, "does not name the injected") && !strings.Contains(f, "the fault never hit") &&
						strings.Contains(f, "the probe identify nothing")
				}
			}
			return false
		},
	},
	{
		Name: "offsets-only-unknown",
		What: "kafka_eos Kafka-to-Kafka: an epoch of offsets only (no record written) left in doubt, which the " +
			"coordinator's answer does not identify (kfake shows Empty at the bumped epoch after a transaction " +
			"version 2 commit and abort alike; Apache Kafka forgets an expired transactional id): the probe has " +
			"no record to read, and every start stopped in doubt (seed 6354734720346763460, a zombie's start). " +
			"Fixed: recovery decides such an epoch from the group's committed offsets (reached: committed; " +
			"behind: aborted). Without a fatal fault in the plan the stops are counted kfake_unknown and the " +
			"run hangs as kfake-unknown-loop",
		Match: func(r Result, f string) bool {
			return r.Plan.Mode.k2k() && strings.Contains(f, "the fault never hit") && strings.Contains(f, "the probe identify nothing")
		},
	},
	{
		Name: "final-commit",
		What: "a bounded read ends before the group's offsets reached its stops",
		Match: func(r Result, f string) bool {
			if r.Plan.Mode == ModePlainKafka && r.Stats.Zombies > 0 {
				return false // plain-zombie-commit: the woken zombie's commit came last
			}
			return strings.HasPrefix(f, "the group's committed offsets ")
		},
	},
	{
		Name: "offsets-only-abort",
		What: "kafka_eos Kafka-to-Kafka: an epoch of offsets only (positions handed over past records that make no " +
			"message: a partition of aborted transactions and markers, a message a dead-letter route took) aborted, " +
			"and nothing carried the positions again (no batch to replay; the input's periodic hand-over does not " +
			"wait and never hands them over again): the group's offset of an idle partition stayed behind for good " +
			"(seed 645330054653509829, a cache-set fault, in/1 committed 0 of 12). Fixed: an abort with positions " +
			"not committed opens another epoch",
		Match: func(r Result, f string) bool {
			p := r.Plan
			if len(p.Oversized) > 0 || r.Stats.KfakeUnknown > 1 {
				return false // members-oversized-stall, kfake-unknown-loop
			}
			return p.Mode.k2k() && p.AbortedTxns > 0 && strings.HasPrefix(f, "hang:") && !strings.Contains(f, "a batch waits for the batch before it") &&
				!strings.Contains(f, stallMixedStale) && !strings.Contains(f, stallStateWrites) && !onlyZombiesLeft(f)
		},
	},
	{
		Name: "members-mixed-stale",
		What: "kafka_eos Kafka-to-Kafka with group_membership and output batching: an output batch merged input " +
			"batches of a partition the member still owned with input batches of one it gave up (read before the " +
			"revoke, nacked by the epoch the revoke aborted), and was nacked whole (\"a batch mixes records of " +
			"partitions this member owns and of ones it gave up\"); the input's retry list replayed those input " +
			"batches together, output batching merged them again, and the owned partition never moved on " +
			"(seed 2912630832260719389, in/0 ten records short, classified offsets-only-abort; or, the batches of " +
			"the owned partition behind it waiting for it, classified k2k-stall). Fixed: the given-up input batches are acknowledged unwritten (as a batch of them " +
			"alone is) and the owned ones written",
		Match: func(r Result, f string) bool {
			return r.Plan.Mode == ModeMembers && strings.HasPrefix(f, "hang:") && strings.Contains(f, stallMixedStale)
		},
	},
	{
		Name: "dedupe-owed-crawl",
		What: "kafka_eos dedupe mode with output batching: once a key owed a position (held back behind an " +
			"oversized record a dead-letter route took, or of an aborted epoch), every output batch holding a " +
			"message of the key above it was nacked whole, the owed replay with it; only a batch holding the " +
			"owed replays first and in order moved the key on, and with the input's retry list replaying each " +
			"nacked batch after its own growing wait (up to 1 s), merged with whatever else was due, such a " +
			"batch became rare: a bounded run crawled a record a second or slower (seed 7559726458393081020, " +
			"hung at 31 %). Fixed by the input's strict replay order (a rejected batch is replayed only after every " +
			"one read before it). Writing the owed replays of a batch and nacking only the rest was tried and " +
			"reverted: it commits one input batch in two epochs (seed 4655578887286468728)",
		Match: func(r Result, f string) bool {
			p := r.Plan
			return p.Mode == ModeDedupe && p.Batching > 0 && strings.HasPrefix(f, "hang:") && !strings.Contains(f, stallStateWrites)
		},
	},
	{
		Name: "state-write-stall",
		What: "kafka_state (the kafka_eos output's state cache): a write the broker refused without writing it " +
			"(NOT_LEADER_FOR_PARTITION, NOT_ENOUGH_REPLICAS) is retried by franz-go only after a metadata refresh, " +
			"at most one per MetadataMinAge (default 5s): each such answer cost a write up to 5s, past commit_timeout " +
			"(1s in the runs); the output's retry of the committed dedupe positions met one faulted answer after " +
			"another (the only Produce requests left, the committer waiting on them) and held the committer while " +
			"the next epoch's transaction timed out (kfake_fence), start after start (seed 7928656101515859177, dedupe, " +
			"classified dedupe-owed-crawl, hung at 9 %). Fixed: the cache's clients refresh metadata at most every 100ms",
		Match: func(_ Result, f string) bool {
			return strings.HasPrefix(f, "hang:") && strings.Contains(f, stallStateWrites)
		},
	},
	{
		Name: "retention-hang",
		What: "kafka_native: a bounded read never finishes after retention deleted records of a paused partition",
		Match: func(r Result, f string) bool {
			p := r.Plan
			if p.Mode == ModeMembers && len(p.Oversized) > 0 {
				return false // members-oversized-stall
			}
			if r.Stats.KfakeUnknown > 1 {
				return false // kfake-unknown-loop
			}
			return p.Retention && r.Stats.Deleted > 0 && strings.HasPrefix(f, "hang:") && !strings.Contains(f, "a batch waits for the batch before it") &&
				!strings.Contains(f, stallMixedStale) && !strings.Contains(f, stallStateWrites) && !onlyZombiesLeft(f)
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
			if d.Match(r, f) {
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

// OnlyLimits reports whether every failure of r is explained, and only by
// limitations (Defect.Limit): no unmatched failure, no defect of the
// product among the matches.
func OnlyLimits(r Result) bool {
	if r.OK() {
		return false
	}
	defects, unmatched := Classify(r)
	if len(unmatched) > 0 || len(defects) == 0 {
		return false
	}
	for _, name := range defects {
		for _, d := range Defects {
			if d.Name == name && !d.Limit {
				return false
			}
		}
	}
	return true
}

// kfakeUnknownLoop matches a hang of starts that stopped, again and again, on
// an in-doubt epoch nothing identified (kfake-unknown-loop): such a hang is
// the limitation's, whatever else the plan has.
func kfakeUnknownLoop(r Result, f string) bool {
	return r.Stats.KfakeUnknown > 1 && strings.HasPrefix(f, "hang:")
}

// produceRefusals is how many Produce requests the plan's faults refuse with
// a code franz-go retries only after a metadata refresh
// (NOT_LEADER_FOR_PARTITION, NOT_ENOUGH_REPLICAS; faults that overlap counted
// once each).
func produceRefusals(p Plan) int {
	refused := map[int]bool{}
	for _, f := range p.Faults {
		if f.Key != kmsg.Produce || f.Action != ActError || f.Fatal ||
			(f.Code != kerr.NotLeaderForPartition.Code && f.Code != kerr.NotEnoughReplicas.Code) {
			continue
		}
		for n := f.At; n < f.At+f.Count; n++ {
			refused[n] = true
		}
	}
	return len(refused)
}

// otherHang reports whether a hang failure f of r is one another defect's
// matcher claims (produce-refresh-wait leaves it to that one).
func otherHang(r Result, f string) bool {
	p := r.Plan
	return kfakeUnknownLoop(r, f) ||
		strings.Contains(f, "a batch waits for the batch before it") || strings.Contains(f, stallMixedStale) ||
		strings.Contains(f, stallContradiction) || strings.Contains(f, stallStateWrites) ||
		(p.Mode == ModeMembers && len(p.Oversized) > 0) || // members-oversized-stall
		(p.Mode.k2k() && p.AbortedTxns > 0) || // offsets-only-abort
		(p.Mode == ModeDedupe && p.Batching > 0) || // dedupe-owed-crawl
		(p.Retention && r.Stats.Deleted > 0) // retention-hang
}

// onlyZombiesLeft reports a hang of a bounded copy that was over: the
// group's offsets at the input's ends, every member done, only a woken
// zombie still running. Neither a copy that stalls (k2k-stall,
// retention-hang) nor offsets left behind (offsets-only-abort) explains it.
// Seed 6751914236821000242 (FAIL(offsets-only-abort,retention-hang) in a
// sweep) was one: its ten NOT_LEADER_OR_FOLLOWER answers on Produce cost 5s
// each (produce-refresh-wait), and the bound ran out while the woken
// zombie's fatal stop drained.
func onlyZombiesLeft(f string) bool {
	return strings.HasPrefix(f, "hang: the run did not end within") && strings.Contains(f, "(progress 1.00,") &&
		strings.Contains(f, "member 0: live none, done true") && !strings.Contains(f, "done false") &&
		strings.Contains(f, "exited false")
}
