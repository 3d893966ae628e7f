package txnstate

import (
	"errors"
	"strings"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	r := Record{
		TransactionalID: "app-1", Epoch: 42, ProducerID: 9, ProducerEpoch: 3, TxnVersion: TV2, State: Prepared,
		Partitions: []PartitionWrite{{"b", 0, 5, 9}, {"a", 2, 1, 9}, {"a", 1, 7, 9}},
		Positions:  []DedupePosition{{"k2", 2}, {"k1", 1}},
	}
	b1, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	// Input order does not change the bytes.
	r.Partitions[0], r.Partitions[2] = r.Partitions[2], r.Partitions[0]
	b2, _ := r.Encode()
	if string(b1) != string(b2) {
		t.Fatalf("unstable encoding:\n%s\n%s", b1, b2)
	}
	const want = `{"format":1,"transactional_id":"app-1","epoch":42,"producer_id":9,"producer_epoch":3,"txn_version":2,"state":"PREPARED","partitions":[{"topic":"a","partition":1,"first_offset":7,"pid":9},{"topic":"a","partition":2,"first_offset":1,"pid":9},{"topic":"b","partition":0,"first_offset":5,"pid":9}],"positions":[{"key":"k1","position":1},{"key":"k2","position":2}]}`
	if string(b1) != want {
		t.Fatalf("encoding changed (it is stored; keep it compatible):\n got %s\nwant %s", b1, want)
	}
	got, err := Decode(b1)
	if err != nil {
		t.Fatal(err)
	}
	if got.Epoch != 42 || got.TxnVersion != TV2 || len(got.Partitions) != 3 || got.Partitions[0].Partition != 1 {
		t.Fatalf("round trip: %+v", got)
	}
}

func TestDecodeRejects(t *testing.T) {
	for _, tc := range []struct{ name, in, msg string }{
		{"garbage", `{`, "unexpected EOF"},
		{"unknown field", `{"format":1,"transactional_id":"a-0","producer_id":1,"producer_epoch":0,"txn_version":0,"state":"PREPARED","x":1}`, "unknown field"},
		{"newer format", `{"format":3,"transactional_id":"a-0","producer_id":1,"producer_epoch":0,"txn_version":0,"state":"PREPARED"}`, "format 3"},
		{"bad tv", `{"format":1,"transactional_id":"a-0","producer_id":1,"producer_epoch":0,"txn_version":1,"state":"PREPARED"}`, "txn_version 1"},
		{"bad state", `{"format":1,"transactional_id":"a-0","producer_id":1,"producer_epoch":0,"txn_version":0,"state":"DONE"}`, "state \"DONE\""},
		{"no id", `{"format":1,"producer_id":1,"producer_epoch":0,"txn_version":0,"state":"PREPARED"}`, "transactional_id is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.in))
			if !errors.Is(err, ErrBadRecord) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want ErrBadRecord containing %q", err, tc.msg)
			}
		})
	}
}

func TestSlotMatcher(t *testing.T) {
	m := NewSlotMatcher("app.v1")
	for _, tc := range []struct {
		id     string
		slot   int
		ok     bool
		orphan bool // with pool size 2
	}{
		{"app.v1-0", 0, true, false},
		{"app.v1-1", 1, true, false},
		{"app.v1-2", 2, true, true},
		{"app.v1-17", 17, true, true},
		{"app.v1-01", 0, false, false},  // not canonical
		{"app.v1-+1", 0, false, false},  // sign
		{"app.v1-", 0, false, false},    // no number
		{"app.v1-2-x", 0, false, false}, // another deployment extends our id
		{"app.v1-x-2", 0, false, false}, // ditto
		{"appXv1-2", 0, false, false},   // the dot is literal
		{"app.v1-2\n", 0, false, false}, // anchored
		{"xapp.v1-2", 0, false, false},  // anchored
		{"app.v1-99999999999999999999", 0, false, false},
	} {
		n, ok := m.Slot(tc.id)
		if ok != tc.ok || n != tc.slot {
			t.Errorf("Slot(%q) = %d, %v; want %d, %v", tc.id, n, ok, tc.slot, tc.ok)
		}
		if _, o := m.Orphan(tc.id, 2); o != tc.orphan {
			t.Errorf("Orphan(%q, 2) = %v, want %v", tc.id, o, tc.orphan)
		}
	}
	if SlotID("p", 3) != "p-3" || SlotFor(5, 2) != 1 || SlotFor(4, 2) != 0 {
		t.Fatal("slot naming")
	}
}

func TestPhaseTransitions(t *testing.T) {
	legal := map[[2]Phase]bool{}
	for from, tos := range transitions {
		for _, to := range tos {
			legal[[2]Phase{from, to}] = true
		}
	}
	all := []Phase{PhaseOpen, PhaseSealed, PhaseFlushed, PhasePrepared, PhaseEnding, PhaseCommitted, PhaseAborted, PhaseInDoubt}
	for _, from := range all {
		for _, to := range all {
			_, err := from.Next(to)
			if (err == nil) != legal[[2]Phase{from, to}] {
				t.Errorf("%v -> %v: err = %v", from, to, err)
			}
		}
	}
	// The rules that matter most, spelled out.
	if _, err := PhaseEnding.Next(PhaseAborted); err != nil {
		t.Error("the broker may say aborted after EndTxn")
	}
	if _, err := PhaseInDoubt.Next(PhaseOpen); err == nil {
		t.Error("in doubt never reopens")
	}
	if PhaseEnding.MayNack() || PhaseInDoubt.MayNack() || PhaseCommitted.MayNack() {
		t.Error("an epoch whose EndTxn(commit) was sent must never be nacked")
	}
	if !PhasePrepared.MayNack() || !PhaseOpen.MayNack() {
		t.Error("before EndTxn nacking is allowed")
	}
}

// A record with a Fence is format 2 and round-trips; a format 1 record
// cannot carry one; a later owner's token is higher.
func TestFenceRecord(t *testing.T) {
	r := Record{TransactionalID: "a-0", ProducerID: 7, ProducerEpoch: 3, State: Prepared, Fence: FenceToken(2, 3)}
	b, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil || got.Format != 2 || got.Fence != r.Fence || FenceGen(got.Fence) != 2 {
		t.Fatalf("%+v %v", got, err)
	}
	if _, err := Decode([]byte(`{"format":1,"transactional_id":"a-0","producer_id":1,"producer_epoch":0,"txn_version":0,"state":"PREPARED","fence":5}`)); err == nil {
		t.Fatal("format 1 with a fence accepted")
	}
	if FenceToken(2, 32767) >= FenceToken(3, 0) || FenceToken(2, 4) <= FenceToken(2, 3) {
		t.Fatal("token order")
	}
}
