// Package sim is a seeded fault-injection simulation of the exactly-once
// pipelines: one seed draws a configuration and a fault schedule, the real
// kafka_native -> kafka_eos pipeline (or kafka_eos behind sim_source, a
// replayable non-Kafka input) runs against an in-process kfake cluster in
// processes of its own, and a checker that reads the broker directly (never
// through the code under test) judges the outcome.
//
// The parts:
//
//   - plan.go: Draw(seed) -> Plan, the configuration (mode, transaction
//     version, max_in_flight, pool size, output batching, epoch sizes, record
//     sizes with occasional oversized records, keys repeated across epochs,
//     aborted transactions in the input) and the schedule (request faults,
//     state cache faults, process events). The same seed always draws the
//     same plan; when a fault fires is counted in requests and progress, not
//     wall-clock time, so the schedule replays even if the interleaving of a
//     replay differs.
//   - faults.go: request faults on kfake: error codes and delays through
//     ControlKey hooks, connection closes and answers dropped after the
//     broker applied the request through a listener that sees every frame.
//   - store.go: the harness's HTTP service holding what outlives a process
//     (the state cache, the source's checkpoint) and what the instances
//     report (acknowledgements, dead letters); it injects the cache faults.
//   - child.go: an instance process (the test binary re-executed with
//     SIM_CHILD set): the stream, run as the connect-eos binary runs it
//     (fatal error: graceful stop, exit 3; SIGTERM: graceful stop, exit 0),
//     and the harness's components sim_source, sim_cache, sim_tag, sim_dlq.
//   - run.go: one run: cluster, input, instances, the events (crash =
//     SIGKILL and restart on the same state, SIGTERM and restart, a zombie =
//     SIGSTOP, a second instance with the same transactional_id, SIGCONT),
//     the end of the run within a bound.
//   - check.go: the invariants, from the broker's log read with its markers.
//
// Run it with `make simulate` (see the Makefile and docs/testing.md).
package sim
