package output

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/connect-eos/connect-eos/txnstate"
)

// TestGroupPartition checks Kafka's partitionFor(group) against values
// computed with Java's String.hashCode (jshell): non-ASCII, a surrogate pair,
// and the string whose hash is Integer.MIN_VALUE (Utils.abs makes it 0).
func TestGroupPartition(t *testing.T) {
	for _, c := range []struct {
		group    string
		p10, p50 int32
	}{
		{"my-group", 2, 12},
		{"chaos-k2k-2to3-1795975152100132593-group", 2, 2},
		{"grüße-€", 0, 0},
		{"a\U0001F600b", 4, 44},
		{"polygenelubricants", 0, 0},
	} {
		if got := groupPartition(c.group, 10); got != c.p10 {
			t.Errorf("%q mod 10: %d, want %d", c.group, got, c.p10)
		}
		if got := groupPartition(c.group, 50); got != c.p50 {
			t.Errorf("%q mod 50: %d, want %d", c.group, got, c.p50)
		}
	}
}

// TestHangingContradicts: the coordinator's record contradicts the output's
// decision only for the same producer id at the epoch the EndTxn leaves (e
// under TV0, e+1 under TV2) in the other Complete state.
func TestHangingContradicts(t *testing.T) {
	t0 := endedTxn{slot: &slot{id: "x-0"}, pid: 7, pepoch: 3, tv: txnstate.TV0, commit: true}
	t2 := t0
	t2.tv = txnstate.TV2
	for _, c := range []struct {
		name string
		t    endedTxn
		st   kadm.DescribedTransaction
		want bool
	}{
		{"tv0 commit, CompleteAbort at e", t0, kadm.DescribedTransaction{ProducerID: 7, ProducerEpoch: 3, State: txnstate.BrokerCompleteAbort}, true},
		{"tv0 commit, CompleteCommit at e", t0, kadm.DescribedTransaction{ProducerID: 7, ProducerEpoch: 3, State: txnstate.BrokerCompleteCommit}, false},
		{"tv0 commit, CompleteAbort at e+1 (a later init)", t0, kadm.DescribedTransaction{ProducerID: 7, ProducerEpoch: 4, State: txnstate.BrokerCompleteAbort}, false},
		{"tv2 commit, CompleteAbort at e+1", t2, kadm.DescribedTransaction{ProducerID: 7, ProducerEpoch: 4, State: txnstate.BrokerCompleteAbort}, true},
		{"tv2 commit, CompleteAbort at e", t2, kadm.DescribedTransaction{ProducerID: 7, ProducerEpoch: 3, State: txnstate.BrokerCompleteAbort}, false},
		{"other producer id", t0, kadm.DescribedTransaction{ProducerID: 8, ProducerEpoch: 3, State: txnstate.BrokerCompleteAbort}, false},
		{"tv0 abort, CompleteCommit at e", endedTxn{slot: t0.slot, pid: 7, pepoch: 3}, kadm.DescribedTransaction{ProducerID: 7, ProducerEpoch: 3, State: txnstate.BrokerCompleteCommit}, true},
		{"tv0 commit, Empty at e", t0, kadm.DescribedTransaction{ProducerID: 7, ProducerEpoch: 3, State: "Empty"}, false},
	} {
		if got := contradicts(c.t, c.st); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	for _, s := range []string{txnstate.BrokerPrepareCommit, txnstate.BrokerPrepareAbort, txnstate.BrokerPrepareEpochFence} {
		if !inFlight(kadm.DescribedTransaction{State: s}) {
			t.Errorf("%s: markers may be in flight", s)
		}
	}
	for _, s := range []string{txnstate.BrokerCompleteCommit, txnstate.BrokerCompleteAbort, "Empty", txnstate.BrokerOngoing} {
		if inFlight(kadm.DescribedTransaction{State: s}) {
			t.Errorf("%s: the coordinator is done with the transaction", s)
		}
	}
}

// TestHangingOngoingIn: a partition of the transaction the coordinator has
// Ongoing is not hanging (that transaction's marker will close it).
func TestHangingOngoingIn(t *testing.T) {
	st := kadm.DescribedTransaction{State: txnstate.BrokerOngoing, Topics: kadm.TopicsSet{"out": {1: {}}}}
	if !ongoingIn(st, openPart{topic: "out", partition: 1}) {
		t.Error("out/1 is in the Ongoing transaction")
	}
	if ongoingIn(st, openPart{topic: "out", partition: 2}) {
		t.Error("out/2 is not in the Ongoing transaction")
	}
	st.State = txnstate.BrokerCompleteCommit
	if ongoingIn(st, openPart{topic: "out", partition: 1}) {
		t.Error("a completed transaction closes nothing more")
	}
}

// TestHangingCheckOffWithoutRead: a user with the least ACLs of the copy
// (Write on the output topic and the transactional ids, no Read) copies as
// before; the check's DescribeProducers is refused and the check turns
// itself off (one warning) instead of holding the slots.
func TestHangingCheckOffWithoutRead(t *testing.T) {
	c := newCluster(t, kfake.EnableSASL(), kfake.EnableACLs(), kfake.Superuser("PLAIN", "admin", "admin"),
		kfake.User("PLAIN", "writer", "pw",
			kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: testTopic, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationWrite, Allow: true},
			kfake.ACL{Resource: kmsg.ACLResourceTypeTransactionalId, Name: "writer-", Pattern: kmsg.ACLResourcePatternTypePrefixed, Operation: kmsg.ACLOperationWrite, Allow: true},
		))
	o := newTestOutput(t, newResources(), baseYAML(c.ListenAddrs(), "writer-x", "sasl: { mechanism: PLAIN, username: writer, password: pw }\n"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 3 {
		if err := o.WriteBatch(ctx, batchOf(fmt.Sprintf("b%d", i), 5)); err != nil {
			t.Fatal(err)
		}
	}
	if !o.hanging.disabled() {
		t.Fatal("the check is still on although DescribeProducers needs Read on the topic")
	}
	if n := o.m.tally.get("hanging_checks"); n < 1 {
		t.Fatalf("%d checks: the first epoch's check should have tried", n)
	}
}

// TestHangingStartCheckSkipsDeletedTopic: a slot's last record names a
// partition of a topic deleted since; the start check counts it as closed at
// once instead of retrying DescribeProducers until commit_timeout.
func TestHangingStartCheckSkipsDeletedTopic(t *testing.T) {
	c := newCluster(t)
	res := newResources()
	o := newUnconnected(t, res, baseYAML(c.ListenAddrs(), "gone-x", ""))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec := txnstate.Record{Format: txnstate.FormatVersion, TransactionalID: txnstate.SlotID("gone-x", 0), Epoch: 4, ProducerID: 9,
		ProducerEpoch: 1, TxnVersion: txnstate.TV2, State: txnstate.Committed,
		Partitions: []txnstate.PartitionWrite{{Topic: "deleted-since", Partition: 0, FirstOffset: 10, ProducerID: 9}}}
	if err := o.store.writeSlot(ctx, 0, rec); err != nil {
		t.Fatal(err)
	}
	if err := o.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	if n, w := o.m.tally.get("hanging_checks"), o.m.tally.get("hanging_check_waits"); n != 1 || w != 0 {
		t.Fatalf("%d checks, %d waits: want 1 check that found nothing open at once", n, w)
	}
}
