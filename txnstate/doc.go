// Package txnstate is the pure state machine behind the kafka_eos output: the
// epoch lifecycle, the slot naming of the transactional producer pool, the
// recovery identity stored in the state cache, and the recovery decision
// table of the design brief (shared/design/eos-output.md).
//
// Nothing here talks to Kafka or imports Benthos. The output observes the
// broker (DescribeTransactions, a raw Fetch probe, a raw EndTxn) and hands the
// observations to Decide, Probe and Resolve, which say what the observation
// means and what to do; so every row of the brief's tables is a table test in
// this package rather than an integration test.
//
// The exactness of the decision table rests on one invariant the output keeps
// (see output/slot.go): a slot's record in the state cache always describes
// the newest transaction of that slot that reached PREPARE, and no new
// transaction begins on a slot whose record still says PREPARED. Without it,
// "Ongoing at the stored (pid, epoch)" under transaction version 0 (where the
// producer epoch does not move between transactions) could be a later
// transaction of the same slot.
package txnstate
