package txnstate

import (
	"errors"
	"math"
	"testing"
	"time"
)

func rec(tv TxnVersion, pid int64, e int16) Record {
	return Record{Format: FormatVersion, TransactionalID: "app-0", Epoch: 7, ProducerID: pid, ProducerEpoch: e, TxnVersion: tv, State: Prepared}
}

func obs(state string, pid int64, e int16) Observation {
	return Observation{Found: true, State: state, ProducerID: pid, ProducerEpoch: e}
}

func TestDecide(t *testing.T) {
	const pid, e = 1000, 5
	for _, tc := range []struct {
		name string
		r    Record
		o    Observation
		want Outcome
	}{
		// Ongoing at the stored (pid, epoch): still open.
		{"tv0 ongoing at e", rec(TV0, pid, e), obs(BrokerOngoing, pid, e), StillOpen},
		{"tv2 ongoing at e", rec(TV2, pid, e), obs(BrokerOngoing, pid, e), StillOpen},
		{"tv0 ongoing at e+1 (a later txn)", rec(TV0, pid, e), obs(BrokerOngoing, pid, e+1), Unknown},
		{"tv2 ongoing at e+1 (a later txn)", rec(TV2, pid, e), obs(BrokerOngoing, pid, e+1), Unknown},
		{"ongoing other pid", rec(TV0, pid, e), obs(BrokerOngoing, pid+1, e), Unknown},

		// CompleteCommit at e (TV0) / e+1 (TV2).
		{"tv0 complete commit at e", rec(TV0, pid, e), obs(BrokerCompleteCommit, pid, e), FoundCommitted},
		{"tv0 complete commit at e+1", rec(TV0, pid, e), obs(BrokerCompleteCommit, pid, e+1), Unknown},
		{"tv2 complete commit at e+1", rec(TV2, pid, e), obs(BrokerCompleteCommit, pid, e+1), FoundCommitted},
		{"tv2 complete commit at e", rec(TV2, pid, e), obs(BrokerCompleteCommit, pid, e), Unknown},
		{"tv2 complete commit at e+2", rec(TV2, pid, e), obs(BrokerCompleteCommit, pid, e+2), Unknown},
		{"complete commit other pid", rec(TV0, pid, e), obs(BrokerCompleteCommit, pid+1, e), Unknown},
		{"tv0 prepare commit at e", rec(TV0, pid, e), obs(BrokerPrepareCommit, pid, e), FoundCommitted},
		{"tv2 prepare commit at e+1", rec(TV2, pid, e), obs(BrokerPrepareCommit, pid, e+1), FoundCommitted},

		// A new pid at epoch 0 after the epoch overflowed (TV2 only).
		{"tv2 overflow new pid epoch 0", rec(TV2, pid, math.MaxInt16-1), obs(BrokerCompleteCommit, pid+1, 0), FoundCommitted},
		{"tv2 overflow at max", rec(TV2, pid, math.MaxInt16), obs(BrokerCompleteCommit, pid+1, 0), FoundCommitted},
		{"tv2 new pid epoch 0 without overflow", rec(TV2, pid, e), obs(BrokerCompleteCommit, pid+1, 0), Unknown},
		{"tv2 overflow new pid epoch 1", rec(TV2, pid, math.MaxInt16-1), obs(BrokerCompleteCommit, pid+1, 1), Unknown},
		{"tv2 overflow new pid ongoing", rec(TV2, pid, math.MaxInt16-1), obs(BrokerOngoing, pid+1, 0), Unknown},
		{"tv0 new pid epoch 0", rec(TV0, pid, math.MaxInt16-1), obs(BrokerCompleteCommit, pid+1, 0), Unknown},

		// CompleteAbort at e+1 (TV0) / e+2 (TV2).
		{"tv0 complete abort at e+1", rec(TV0, pid, e), obs(BrokerCompleteAbort, pid, e+1), FoundAborted},
		// Our own EndTxn(abort) under TV0 leaves the epoch as it was
		// (Apache Kafka 4.3.1, TestKafkaEndTxnDescribe); by the slot
		// invariant the newest transaction at (pid, e) is the record's.
		// It was Unknown (left to the probe, which fails on a compacted
		// topic) before.
		{"tv0 complete abort at e (our abort)", rec(TV0, pid, e), obs(BrokerCompleteAbort, pid, e), FoundAborted},
		{"tv2 complete abort at e", rec(TV2, pid, e), obs(BrokerCompleteAbort, pid, e), Unknown},
		{"tv2 complete abort at e+2", rec(TV2, pid, e), obs(BrokerCompleteAbort, pid, e+2), FoundAborted},
		// Measured on Apache Kafka 4.3.1: a timed-out TV2 transaction
		// ended at CompleteAbort e+1.
		{"tv2 complete abort at e+1", rec(TV2, pid, e), obs(BrokerCompleteAbort, pid, e+1), FoundAborted},
		{"tv2 complete abort at e+3", rec(TV2, pid, e), obs(BrokerCompleteAbort, pid, e+3), Unknown},
		{"complete abort other pid", rec(TV0, pid, e), obs(BrokerCompleteAbort, pid+1, e+1), Unknown},

		// PrepareAbort.
		{"tv0 prepare abort at e+1", rec(TV0, pid, e), obs(BrokerPrepareAbort, pid, e+1), FoundAborted},
		{"tv2 prepare abort at e+1", rec(TV2, pid, e), obs(BrokerPrepareAbort, pid, e+1), FoundAborted},
		{"prepare abort at e", rec(TV0, pid, e), obs(BrokerPrepareAbort, pid, e), FoundAborted},
		{"prepare abort far later", rec(TV0, pid, e), obs(BrokerPrepareAbort, pid, e+3), Unknown},
		{"prepare abort other pid", rec(TV2, pid, e), obs(BrokerPrepareAbort, pid+1, e+1), Unknown},

		// Anything else.
		{"not found", rec(TV0, pid, e), Observation{}, Unknown},
		{"empty at e", rec(TV0, pid, e), obs(BrokerEmpty, pid, e), Unknown},
		{"empty at e+1 (re-initialised)", rec(TV2, pid, e), obs(BrokerEmpty, pid, e+1), Unknown},
		{"dead", rec(TV0, pid, e), obs(BrokerDead, pid, e), Unknown},
		{"prepare epoch fence", rec(TV0, pid, e), obs(BrokerPrepareEpochFence, pid, e), Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Decide(tc.r, tc.o); got != tc.want {
				t.Fatalf("Decide(%+v, %v) = %v, want %v", tc.r, tc.o, got, tc.want)
			}
		})
	}
}

func TestProbePartition(t *testing.T) {
	w := PartitionWrite{Topic: "t", Partition: 1, FirstOffset: 10, ProducerID: 7}
	base := FetchObservation{LogStartOffset: 0, LastStableOffset: 10, BatchFound: true, BatchProducerID: 7}
	with := func(f func(*FetchObservation)) FetchObservation { o := base; f(&o); return o }
	for _, tc := range []struct {
		name string
		f    FetchObservation
		want Outcome
	}{
		{"lso at first offset", base, Unknown},
		{"lso past, not aborted", with(func(o *FetchObservation) { o.LastStableOffset = 11 }), FoundCommitted},
		{"commit marker follows", with(func(o *FetchObservation) { o.CommitMarker = true }), FoundCommitted},
		{"aborted listed", with(func(o *FetchObservation) { o.LastStableOffset = 20; o.AbortedListed = true }), FoundAborted},
		{"abort marker follows", with(func(o *FetchObservation) { o.LastStableOffset = 20; o.AbortMarker = true }), FoundAborted},
		{"abort marker, lso not past", with(func(o *FetchObservation) { o.AbortMarker = true }), FoundAborted},
		{"both markers", with(func(o *FetchObservation) { o.AbortMarker = true; o.CommitMarker = true }), Unknown},
		{"below log start", with(func(o *FetchObservation) { o.LogStartOffset = 11; o.LastStableOffset = 20 }), Unknown},
		{"batch gone (compacted)", with(func(o *FetchObservation) { o.BatchFound = false; o.LastStableOffset = 20 }), Unknown},
		{"another producer's batch", with(func(o *FetchObservation) { o.BatchProducerID = 8; o.LastStableOffset = 20 }), Unknown},
		{"another producer's batch, aborted listed", with(func(o *FetchObservation) { o.BatchProducerID = 8; o.AbortedListed = true }), Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ProbePartition(w, tc.f); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCombineProbes(t *testing.T) {
	for _, tc := range []struct {
		in   []Outcome
		want Outcome
	}{
		{nil, Unknown},
		{[]Outcome{Unknown, Unknown}, Unknown},
		{[]Outcome{Unknown, FoundCommitted}, FoundCommitted},
		{[]Outcome{FoundAborted, Unknown}, FoundAborted},
		{[]Outcome{FoundCommitted, FoundCommitted}, FoundCommitted},
		{[]Outcome{FoundCommitted, FoundAborted}, Unknown},
	} {
		if got := CombineProbes(tc.in); got != tc.want {
			t.Errorf("CombineProbes(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestRetryOutcome(t *testing.T) {
	if RetryOutcome(RetryOK) != FoundCommitted || RetryOutcome(RetryRejected) != Unknown || RetryOutcome(RetryFailed) != Unknown {
		t.Fatal("retry outcomes")
	}
}

func TestClassifyFence(t *testing.T) {
	const pid, e = 50, 3
	for _, tc := range []struct {
		name     string
		tv       TxnVersion
		o        Observation
		want     FenceKind
		tooEarly bool // the epoch has not been open transaction_timeout
	}{
		{"tv0 timeout complete abort e+1", TV0, obs(BrokerCompleteAbort, pid, e+1), FenceOwnTimeout, false},
		{"tv0 timeout prepare abort e+1", TV0, obs(BrokerPrepareAbort, pid, e+1), FenceOwnTimeout, false},
		{"tv0 timeout epoch fence", TV0, obs(BrokerPrepareEpochFence, pid, e+1), FenceOwnTimeout, false},
		{"tv2 timeout complete abort e+2", TV2, obs(BrokerCompleteAbort, pid, e+2), FenceOwnTimeout, false},
		{"tv0 abort e+2 is not ours", TV0, obs(BrokerCompleteAbort, pid, e+2), FenceZombie, false},
		{"no epoch change", TV0, obs(BrokerEmpty, pid, e), FenceOwnTimeout, false},
		{"zombie: re-initialised, empty", TV0, obs(BrokerEmpty, pid, e+1), FenceZombie, false},
		{"zombie: re-initialised, ongoing", TV2, obs(BrokerOngoing, pid, e+1), FenceZombie, false},
		{"zombie: new pid", TV0, obs(BrokerEmpty, pid+1, 0), FenceZombie, false},
		{"not found", TV0, Observation{}, FenceZombie, false},
		// Another instance's InitProducerID on our open transaction
		// leaves these states too, until its retry bumps again: before
		// transaction_timeout they cannot be the coordinator's timeout.
		{"tv0 complete abort e+1 too early", TV0, obs(BrokerCompleteAbort, pid, e+1), FenceZombie, true},
		{"tv0 prepare abort e+1 too early", TV0, obs(BrokerPrepareAbort, pid, e+1), FenceZombie, true},
		{"tv0 epoch fence too early", TV0, obs(BrokerPrepareEpochFence, pid, e+1), FenceZombie, true},
		{"tv2 complete abort e+2 too early", TV2, obs(BrokerCompleteAbort, pid, e+2), FenceZombie, true},
		{"no epoch change too early", TV0, obs(BrokerEmpty, pid, e), FenceOwnTimeout, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ClassifyFence(pid, e, tc.tv, tc.o, !tc.tooEarly); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestClassifyAbort(t *testing.T) {
	const pid, e = 50, 3
	for _, tc := range []struct {
		name     string
		tv       TxnVersion
		o        Observation
		want     AbortCheck
		timedOut bool // the epoch has been open transaction_timeout
	}{
		{"tv0 our abort leaves e", TV0, obs(BrokerCompleteAbort, pid, e), AbortNoRival, false},
		{"tv0 endtxn never arrived", TV0, obs(BrokerOngoing, pid, e), AbortNoRival, false},
		{"tv2 endtxn never arrived", TV2, obs(BrokerOngoing, pid, e), AbortNoRival, false},
		{"tv0 another producer at e+1", TV0, obs(BrokerEmpty, pid, e+1), AbortRival, false},
		{"tv0 another producer's fence at e+1", TV0, obs(BrokerCompleteAbort, pid, e+1), AbortRival, false},
		{"tv0 another producer's transaction at e+1", TV0, obs(BrokerOngoing, pid, e+1), AbortRival, true},
		{"tv0 timeout at e+1", TV0, obs(BrokerCompleteAbort, pid, e+1), AbortNoRival, true},
		{"tv0 timeout's epoch fence", TV0, obs(BrokerPrepareEpochFence, pid, e+1), AbortNoRival, true},
		{"tv0 e+2 after a timeout", TV0, obs(BrokerCompleteAbort, pid, e+2), AbortRival, true},
		{"tv2 our abort at e+1", TV2, obs(BrokerCompleteAbort, pid, e+1), AbortUnclear, false},
		{"tv2 our abort at e+1, kfake", TV2, obs(BrokerEmpty, pid, e+1), AbortUnclear, false},
		{"tv2 transaction open at e+1", TV2, obs(BrokerOngoing, pid, e+1), AbortRival, false},
		{"tv2 epoch fence before the timeout", TV2, obs(BrokerPrepareEpochFence, pid, e+1), AbortRival, false},
		{"tv2 epoch fence of the timeout", TV2, obs(BrokerPrepareEpochFence, pid, e+1), AbortNoRival, true},
		{"tv2 another producer at e+2", TV2, obs(BrokerEmpty, pid, e+2), AbortRival, false},
		{"tv2 another producer's fence at e+2", TV2, obs(BrokerCompleteAbort, pid, e+2), AbortRival, false},
		{"tv2 timeout at e+2", TV2, obs(BrokerCompleteAbort, pid, e+2), AbortNoRival, true},
		{"tv2 e+3 after a timeout", TV2, obs(BrokerCompleteAbort, pid, e+3), AbortRival, true},
		{"new producer id", TV2, obs(BrokerEmpty, pid+1, 0), AbortRival, false},
		{"not found", TV0, Observation{}, AbortUnclear, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ClassifyAbort(pid, e, tc.tv, tc.o, tc.timedOut); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	// At the last epochs our own abort (TV2) or the coordinator's timeout
	// moves the id to a new producer id at epoch 0.
	const last = math.MaxInt16 - 1
	if got := ClassifyAbort(pid, last, TV2, obs(BrokerCompleteAbort, pid+1, 0), false); got != AbortUnclear {
		t.Fatalf("new producer id after an abort at the last epoch: got %v, want unclear", got)
	}
}

func TestResolve(t *testing.T) {
	r := func(epoch uint64) Record { x := rec(TV0, 1, 1); x.Epoch = epoch; return x }
	r2 := func(epoch uint64) Record { x := rec(TV2, 1, 1); x.Epoch = epoch; return x }
	type want struct {
		epoch  uint64
		action Action
	}
	for _, tc := range []struct {
		name    string
		mode    Mode
		ov      Override
		in      []InDoubt
		want    []want
		wantErr error
	}{
		{"committed", Plain, NoOverride, []InDoubt{{Record: r(1), Outcome: FoundCommitted}}, []want{{1, MarkCommitted}}, nil},
		{"aborted", Plain, NoOverride, []InDoubt{{Record: r(1), Outcome: FoundAborted}}, []want{{1, MarkAborted}}, nil},
		{"open plain aborts", Plain, NoOverride, []InDoubt{{Record: r(1), Outcome: StillOpen}}, []want{{1, AbortOpen}}, nil},
		{"open k2k tv0 aborts", KafkaToKafka, NoOverride, []InDoubt{{Record: r(1), Outcome: StillOpen}}, []want{{1, AbortOpen}}, nil},
		{"open k2k tv2 resumes", KafkaToKafka, NoOverride, []InDoubt{{Record: r2(1), Outcome: StillOpen}}, []want{{1, ResumeCommit}}, nil},
		{"open dedupe tv0 aborts", Dedupe, NoOverride, []InDoubt{{Record: r(1), Outcome: StillOpen}}, []want{{1, AbortOpen}}, nil},
		{"open dedupe tv2 resumes", Dedupe, NoOverride, []InDoubt{{Record: r2(1), Outcome: StillOpen}}, []want{{1, ResumeCommit}}, nil},
		{"open mirror tv0 aborts", Mirror, NoOverride, []InDoubt{{Record: r(1), Outcome: StillOpen}}, []want{{1, AbortOpen}}, nil},
		{"open mirror tv2 resumes", Mirror, NoOverride, []InDoubt{{Record: r2(1), Outcome: StillOpen}}, []want{{1, ResumeCommit}}, nil},
		{"unknown stops", Plain, NoOverride, []InDoubt{{Record: r(1), Outcome: Unknown}}, []want{{1, Stop}}, nil},
		{"unknown forced committed", Plain, ForceCommitted, []InDoubt{{Record: r(1), Outcome: Unknown}}, []want{{1, MarkCommitted}}, nil},
		{"unknown forced aborted", Plain, ForceAborted, []InDoubt{{Record: r(1), Outcome: Unknown}}, []want{{1, MarkAborted}}, nil},
		{"in epoch order: committed then open", Dedupe, NoOverride,
			[]InDoubt{{Record: r2(5), Outcome: StillOpen}, {Record: r2(4), Outcome: FoundCommitted}}, []want{{4, MarkCommitted}, {5, ResumeCommit}}, nil},
		{"after aborted everything aborts", KafkaToKafka, NoOverride,
			[]InDoubt{{Record: r(3), Outcome: StillOpen}, {Record: r(1), Outcome: FoundAborted}, {Record: r(2), Outcome: Unknown}, {Record: r(4), Outcome: FoundAborted}},
			[]want{{1, MarkAborted}, {2, AbortOpen}, {3, AbortOpen}, {4, MarkAborted}}, nil},
		{"plain open aborts later too", Plain, NoOverride,
			[]InDoubt{{Record: r(1), Outcome: StillOpen}, {Record: r(2), Outcome: StillOpen}}, []want{{1, AbortOpen}, {2, AbortOpen}}, nil},
		{"after unknown everything stops", Plain, NoOverride,
			[]InDoubt{{Record: r(1), Outcome: Unknown}, {Record: r(2), Outcome: FoundCommitted}}, []want{{1, Stop}, {2, Stop}}, nil},
		{"committed after aborted is a contradiction", Dedupe, NoOverride,
			[]InDoubt{{Record: r(1), Outcome: FoundAborted}, {Record: r(2), Outcome: FoundCommitted}}, []want{{1, MarkAborted}, {2, Stop}}, ErrContradiction},
		{"committed after aborted is a contradiction in mirror mode", Mirror, NoOverride,
			[]InDoubt{{Record: r(1), Outcome: FoundAborted}, {Record: r(2), Outcome: FoundCommitted}}, []want{{1, MarkAborted}, {2, Stop}}, ErrContradiction},
		// Plain mode keeps no order across a failure: a later epoch may
		// commit before an aborted one's batches are replayed by the
		// input, so the pair is what a correct run leaves when the
		// aborted epoch's record is still PREPARED (a PREPARE whose write
		// timed out and landed).
		{"plain: committed after aborted", Plain, NoOverride,
			[]InDoubt{{Record: r(1), Outcome: FoundAborted}, {Record: r(2), Outcome: FoundCommitted}}, []want{{1, MarkAborted}, {2, MarkCommitted}}, nil},
		{"plain: committed after aborted and open", Plain, NoOverride,
			[]InDoubt{{Record: r(1), Outcome: FoundAborted}, {Record: r(2), Outcome: StillOpen}, {Record: r(3), Outcome: FoundCommitted}, {Record: r(4), Outcome: StillOpen}},
			[]want{{1, MarkAborted}, {2, AbortOpen}, {3, MarkCommitted}, {4, AbortOpen}}, nil},
		{"plain: unknown after aborted is aborted", Plain, NoOverride,
			[]InDoubt{{Record: r(1), Outcome: FoundAborted}, {Record: r(2), Outcome: Unknown}, {Record: r(3), Outcome: FoundCommitted}},
			[]want{{1, MarkAborted}, {2, AbortOpen}, {3, MarkCommitted}}, nil},
		// A found-aborted epoch whose batches were committed again since
		// (its record stale: the instance that aborted it went on) aborts
		// nothing after it.
		{"committed after a replayed aborted epoch", KafkaToKafka, NoOverride,
			[]InDoubt{{Record: r(1), Outcome: FoundAborted, Replayed: true}, {Record: r(12), Outcome: FoundCommitted}},
			[]want{{1, MarkAborted}, {12, MarkCommitted}}, nil},
		{"open after a replayed aborted epoch resumes", KafkaToKafka, NoOverride,
			[]InDoubt{{Record: r(1), Outcome: FoundAborted, Replayed: true}, {Record: r2(3), Outcome: StillOpen}},
			[]want{{1, MarkAborted}, {3, ResumeCommit}}, nil},
		{"a replayed aborted epoch does not hide an earlier unreplayed one", KafkaToKafka, NoOverride,
			[]InDoubt{{Record: r(1), Outcome: FoundAborted}, {Record: r(2), Outcome: FoundAborted, Replayed: true}, {Record: r(3), Outcome: FoundCommitted}},
			[]want{{1, MarkAborted}, {2, MarkAborted}, {3, Stop}}, ErrContradiction},
		{"an unreplayed aborted epoch after a replayed one still bars", KafkaToKafka, NoOverride,
			[]InDoubt{{Record: r(1), Outcome: FoundAborted, Replayed: true}, {Record: r(2), Outcome: FoundAborted}, {Record: r(3), Outcome: FoundCommitted}},
			[]want{{1, MarkAborted}, {2, MarkAborted}, {3, Stop}}, ErrContradiction},
		// Kafka-to-Kafka, the epoch's source offsets commit in its own
		// transaction: its abort moved no offset past its records, so a
		// later commit contradicts nothing, even where the group's
		// offsets have not reached it (its records are read again).
		{"committed after an aborted epoch whose offsets were in its transaction", KafkaToKafka, NoOverride,
			[]InDoubt{{Record: r(19), Outcome: FoundAborted, Rereads: true}, {Record: r(21), Outcome: FoundCommitted}},
			[]want{{19, MarkAborted}, {21, MarkCommitted}}, nil},
		{"committed after an abort-open epoch whose offsets were in its transaction", KafkaToKafka, NoOverride,
			[]InDoubt{{Record: r(1), Outcome: FoundAborted, Rereads: true}, {Record: r(2), Outcome: StillOpen, Rereads: true}, {Record: r(3), Outcome: FoundCommitted, Rereads: true}},
			[]want{{1, MarkAborted}, {2, AbortOpen}, {3, MarkCommitted}}, nil},
		{"two committed after an aborted epoch whose offsets were in its transaction", KafkaToKafka, NoOverride,
			[]InDoubt{{Record: r(1), Outcome: FoundAborted, Rereads: true}, {Record: r(2), Outcome: FoundCommitted}, {Record: r(3), Outcome: FoundCommitted}},
			[]want{{1, MarkAborted}, {2, MarkCommitted}, {3, MarkCommitted}}, nil},
		{"open after an aborted epoch whose offsets were in its transaction still aborts", KafkaToKafka, NoOverride,
			[]InDoubt{{Record: r(1), Outcome: FoundAborted, Rereads: true}, {Record: r2(3), Outcome: StillOpen, Rereads: true}},
			[]want{{1, MarkAborted}, {3, AbortOpen}}, nil},
		{"an aborted epoch without its offsets in its transaction still bars", KafkaToKafka, NoOverride,
			[]InDoubt{{Record: r(1), Outcome: FoundAborted, Rereads: true}, {Record: r(2), Outcome: FoundAborted}, {Record: r(3), Outcome: FoundCommitted, Rereads: true}},
			[]want{{1, MarkAborted}, {2, MarkAborted}, {3, Stop}}, ErrContradiction},
		{"rereads counts in Kafka-to-Kafka mode only", Dedupe, NoOverride,
			[]InDoubt{{Record: r(1), Outcome: FoundAborted, Rereads: true}, {Record: r(2), Outcome: FoundCommitted}},
			[]want{{1, MarkAborted}, {2, Stop}}, ErrContradiction},
		{"replayed counts for a found-aborted epoch only", KafkaToKafka, NoOverride,
			[]InDoubt{{Record: r(1), Outcome: StillOpen, Replayed: true}, {Record: r(2), Outcome: FoundCommitted}},
			[]want{{1, AbortOpen}, {2, Stop}}, ErrContradiction},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(tc.mode, tc.in, tc.ov)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d decisions, want %d", len(got), len(tc.want))
			}
			for i, w := range tc.want {
				if got[i].Record.Epoch != w.epoch || got[i].Action != w.action {
					t.Errorf("decision %d = epoch %d %v (%s), want epoch %d %v", i, got[i].Record.Epoch, got[i].Action, got[i].Reason, w.epoch, w.action)
				}
			}
		})
	}
}

func TestCheckTiming(t *testing.T) {
	if err := CheckTiming(time.Second, 5*time.Second, 60*time.Second, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := CheckTiming(50*time.Second, 5*time.Second, 60*time.Second, 5*time.Second); !errors.Is(err, ErrTiming) {
		t.Fatalf("err = %v", err)
	}
}

// The rows of CheckCommit; the broker states after a TV2 commit and abort are
// the ones measured on Apache Kafka 4.3.1 (output's TestKafkaEndTxnDescribe).
func TestCheckCommit(t *testing.T) {
	const pid, e = 1000, 5
	type client struct {
		pid int64
		e   int16
		ok  bool
	}
	kept, bump, unknown := client{pid, e, true}, client{pid, e + 1, true}, client{}
	for _, tc := range []struct {
		name   string
		r      Record
		c      client
		o      Observation
		want   CommitCheck
		wantTV TxnVersion
	}{
		// TV0: the epoch stays.
		{"tv0 commit", rec(TV0, pid, e), kept, obs(BrokerCompleteCommit, pid, e), CommitConfirmed, TV0},
		{"tv0 prepare commit", rec(TV0, pid, e), kept, obs(BrokerPrepareCommit, pid, e), CommitConfirmed, TV0},
		{"tv0 abort", rec(TV0, pid, e), kept, obs(BrokerCompleteAbort, pid, e), CommitNotApplied, TV0},
		{"tv0 prepare abort", rec(TV0, pid, e), kept, obs(BrokerPrepareAbort, pid, e), CommitNotApplied, TV0},
		{"tv0 still open", rec(TV0, pid, e), kept, obs(BrokerOngoing, pid, e), CommitNotApplied, TV0},
		{"tv0 empty (kfake)", rec(TV0, pid, e), kept, obs(BrokerEmpty, pid, e), CommitEmpty, TV0},
		{"tv0 coordinator abort", rec(TV0, pid, e), kept, obs(BrokerCompleteAbort, pid, e+1), CommitNotApplied, TV0},
		{"tv0 commit at e+1 (another producer's)", rec(TV0, pid, e), kept, obs(BrokerCompleteCommit, pid, e+1), CommitNotOurs, TV0},
		{"tv0 other pid", rec(TV0, pid, e), kept, obs(BrokerCompleteCommit, pid+1, 0), CommitNotOurs, TV0},

		// TV2: the EndTxn bumps the epoch, for a commit and an abort.
		{"tv2 commit", rec(TV2, pid, e), bump, obs(BrokerCompleteCommit, pid, e+1), CommitConfirmed, TV2},
		{"tv2 prepare commit", rec(TV2, pid, e), bump, obs(BrokerPrepareCommit, pid, e+1), CommitConfirmed, TV2},
		{"tv2 commit, client silent", rec(TV2, pid, e), unknown, obs(BrokerCompleteCommit, pid, e+1), CommitConfirmed, TV2},
		{"tv2 abort", rec(TV2, pid, e), bump, obs(BrokerCompleteAbort, pid, e+1), CommitNotApplied, TV2},
		{"tv2 prepare abort", rec(TV2, pid, e), bump, obs(BrokerPrepareAbort, pid, e+1), CommitNotApplied, TV2},
		{"tv2 empty after the bump (kfake)", rec(TV2, pid, e), bump, obs(BrokerEmpty, pid, e+1), CommitEmpty, TV2},
		{"tv2 empty, no bump", rec(TV2, pid, e), unknown, obs(BrokerEmpty, pid, e+1), CommitNotApplied, TV2},
		{"tv2 no EndTxn sent: still open", rec(TV2, pid, e), kept, obs(BrokerOngoing, pid, e), CommitNotApplied, TV2},
		{"tv2 previous commit at e after the bump", rec(TV2, pid, e), bump, obs(BrokerCompleteCommit, pid, e), CommitNotApplied, TV2},
		{"tv2 coordinator abort at e+2", rec(TV2, pid, e), bump, obs(BrokerCompleteAbort, pid, e+2), CommitNotApplied, TV2},
		{"tv2 later epoch", rec(TV2, pid, e), bump, obs(BrokerOngoing, pid, e+2), CommitNotOurs, TV2},

		// The version as the broker shows it, whatever was stored.
		{"stored tv0, bumped commit", rec(TV0, pid, e), bump, obs(BrokerCompleteCommit, pid, e+1), CommitConfirmed, TV2},
		{"stored tv0, bumped abort", rec(TV0, pid, e), bump, obs(BrokerCompleteAbort, pid, e+1), CommitNotApplied, TV0},
		{"stored tv2, commit at e", rec(TV2, pid, e), kept, obs(BrokerCompleteCommit, pid, e), CommitConfirmed, TV0},

		// TV2 at the epoch limit: a new producer id at epoch 0.
		{"tv2 overflow commit", rec(TV2, pid, math.MaxInt16-1), client{pid + 1, 0, true}, obs(BrokerCompleteCommit, pid+1, 0), CommitConfirmed, TV2},
		{"tv2 overflow abort", rec(TV2, pid, math.MaxInt16-1), client{pid + 1, 0, true}, obs(BrokerCompleteAbort, pid+1, 0), CommitNotApplied, TV2},
		{"tv2 overflow empty (kfake)", rec(TV2, pid, math.MaxInt16-1), client{pid + 1, 0, true}, obs(BrokerEmpty, pid+1, 0), CommitEmpty, TV2},
		{"tv2 overflow, broker shows another pid", rec(TV2, pid, math.MaxInt16-1), client{pid + 1, 0, true}, obs(BrokerCompleteCommit, pid+2, 0), CommitNotOurs, TV2},
		{"new pid without the limit", rec(TV2, pid, e), client{pid + 1, 0, true}, obs(BrokerCompleteCommit, pid+1, 0), CommitNotOurs, TV2},
	} {
		got, tv := CheckCommit(tc.r, tc.c.pid, tc.c.e, tc.c.ok, tc.o)
		if got != tc.want || (tv != tc.wantTV) {
			t.Errorf("%s: %v TV%d, want %v TV%d", tc.name, got, tv, tc.want, tc.wantTV)
		}
	}
}

func TestReinitAfterRival(t *testing.T) {
	const pid, e = 50, 7
	for _, tc := range []struct {
		name   string
		before Observation
		pid    int64
		e      int16
		want   bool
	}{
		{"empty, one bump", obs(BrokerEmpty, pid, e), pid, e + 1, false},
		{"complete commit, one bump", obs(BrokerCompleteCommit, pid, e), pid, e + 1, false},
		{"complete abort, one bump", obs(BrokerCompleteAbort, pid, e), pid, e + 1, false},
		{"empty, two bumps", obs(BrokerEmpty, pid, e), pid, e + 2, true},
		{"complete commit, three bumps", obs(BrokerCompleteCommit, pid, e), pid, e + 3, true},
		{"complete abort, two bumps", obs(BrokerCompleteAbort, pid, e), pid, e + 2, true},
		// An open or ending transaction is aborted or awaited by the
		// InitProducerID itself (a bump of its own, or a timeout's).
		{"ongoing, two bumps", obs(BrokerOngoing, pid, e), pid, e + 2, false},
		{"prepare abort, two bumps", obs(BrokerPrepareAbort, pid, e), pid, e + 2, false},
		{"prepare commit, two bumps", obs(BrokerPrepareCommit, pid, e), pid, e + 2, false},
		{"epoch fence, two bumps", obs(BrokerPrepareEpochFence, pid, e), pid, e + 2, false},
		// A new producer id: the epoch overflowed, or the id expired.
		{"new producer id", obs(BrokerEmpty, pid, e), pid + 1, 0, false},
		{"at the epoch limit", obs(BrokerEmpty, pid, math.MaxInt16-1), pid + 9, 0, false},
		{"not found", Observation{}, pid, e + 5, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ReinitAfterRival(tc.before, tc.pid, tc.e); got != tc.want {
				t.Errorf("ReinitAfterRival(%v, %d, %d) = %v, want %v", tc.before, tc.pid, tc.e, got, tc.want)
			}
		})
	}
}

func TestInitSuperseded(t *testing.T) {
	const pid, e = 50, 7
	for _, tc := range []struct {
		name  string
		after Observation
		want  bool
	}{
		{"empty at ours", obs(BrokerEmpty, pid, e), false},
		{"complete abort at ours", obs(BrokerCompleteAbort, pid, e), false},
		{"complete commit at ours", obs(BrokerCompleteCommit, pid, e), false},
		{"empty, a later epoch", obs(BrokerEmpty, pid, e+1), true},
		{"ongoing, a later epoch", obs(BrokerOngoing, pid, e+2), true},
		{"another producer id", obs(BrokerEmpty, pid+1, 0), true},
		{"an earlier epoch", obs(BrokerEmpty, pid, e-1), false},
		{"not found", Observation{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := InitSuperseded(tc.after, pid, e); got != tc.want {
				t.Errorf("InitSuperseded(%v, %d, %d) = %v, want %v", tc.after, pid, e, got, tc.want)
			}
		})
	}
}
