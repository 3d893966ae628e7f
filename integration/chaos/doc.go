// Package chaos is the exactly-once chaos suite, modelled on Apache
// Kafka's own transactions system test: an independent producer fills an
// input topic, connect-eos processes copy it with kafka_native -> kafka_eos
// while the suite SIGKILLs and SIGTERMs them at random points, bounces the
// broker (kill -9 and clean) and starts a zombie with the same
// transactional_id; then independent read_committed consumers (Kafka's own
// ConsoleConsumer) judge the output.
//
// Everything lives in the _test.go files; see docs/exactly-once.md for what
// each mode promises and how to run the suite at a large scale.
package chaos
