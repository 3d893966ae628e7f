package txnstate

import (
	"fmt"
	"testing"
)

// The benchmarks below cover the decisions the output takes per epoch (no
// broker, no Benthos): the phase walk of a committed epoch, the recovery
// record written to the state cache at step 4 (encode) and read at start
// (decode), the DescribeTransactions decision, Resolve, and the
// Kafka-to-Kafka offset runs of one epoch. They run per epoch, not per
// record, so they bound the output's per-epoch CPU, not its throughput.
//
//	go test -run X -bench . -benchmem ./txnstate/

// BenchmarkPhaseCommitPath walks one epoch through the commit sequence:
// open, sealed, flushed, prepared, ending, committed.
func BenchmarkPhaseCommitPath(b *testing.B) {
	path := []Phase{PhaseSealed, PhaseFlushed, PhasePrepared, PhaseEnding, PhaseCommitted}
	b.ReportAllocs()
	for b.Loop() {
		p := PhaseOpen
		for _, to := range path {
			var err error
			if p, err = p.Next(to); err != nil {
				b.Fatal(err)
			}
		}
		if !p.Terminal() {
			b.Fatal(p)
		}
	}
}

// BenchmarkPhaseIllegal is an illegal move (the error path).
func BenchmarkPhaseIllegal(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := PhaseCommitted.Next(PhaseOpen); err == nil {
			b.Fatal("want an error")
		}
	}
}

func benchRecord(partitions int) Record {
	r := Record{
		TransactionalID: "orders-copy-1", Epoch: 123456, ProducerID: 4001, ProducerEpoch: 17,
		TxnVersion: TV2, State: Prepared,
	}
	for p := partitions - 1; p >= 0; p-- { // unsorted: Encode sorts
		r.Partitions = append(r.Partitions, PartitionWrite{Topic: "orders_copy", Partition: int32(p), FirstOffset: int64(1_000_000 + p), ProducerID: 4001})
	}
	return r
}

// BenchmarkRecordEncode is the state cache value written at step 4 of every
// epoch, for an epoch that wrote 3 and 64 partitions.
func BenchmarkRecordEncode(b *testing.B) {
	for _, n := range []int{3, 64} {
		b.Run(fmt.Sprintf("partitions=%d", n), func(b *testing.B) {
			r := benchRecord(n)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Encode(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRecordDecode reads it back (recovery at start, once per slot).
func BenchmarkRecordDecode(b *testing.B) {
	for _, n := range []int{3, 64} {
		b.Run(fmt.Sprintf("partitions=%d", n), func(b *testing.B) {
			enc, err := benchRecord(n).Encode()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Decode(enc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecide maps one DescribeTransactions answer to an outcome.
func BenchmarkDecide(b *testing.B) {
	r := benchRecord(3)
	o := Observation{Found: true, State: BrokerCompleteCommit, ProducerID: 4001, ProducerEpoch: 18}
	b.ReportAllocs()
	for b.Loop() {
		if Decide(r, o) != FoundCommitted {
			b.Fatal("want committed")
		}
	}
}

// BenchmarkResolve decides a pool of two in-doubt epochs (the default
// producer_pool_size): the first committed, the second still open.
func BenchmarkResolve(b *testing.B) {
	r1, r2 := benchRecord(3), benchRecord(3)
	r2.Epoch++
	in := []InDoubt{{Record: r2, Outcome: StillOpen}, {Record: r1, Outcome: FoundCommitted}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Resolve(KafkaToKafka, in, NoOverride); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunsEpoch is the Kafka-to-Kafka offset bookkeeping of one epoch:
// 64 batches over 8 source partitions arrive out of order (Add), the epoch
// computes its offsets (Next) and records them committed (SetCommitted).
func BenchmarkRunsEpoch(b *testing.B) {
	const parts, batches, span = 8, 64, 1024
	var r Runs
	for p := range parts {
		r.SetCommitted("src", int32(p), 0)
	}
	base := int64(0)
	b.ReportAllocs()
	for b.Loop() {
		// Per partition 8 spans, added in reverse order: only the last
		// Add closes the run.
		for i := batches - 1; i >= 0; i-- {
			p, k := i%parts, int64(i/parts)
			from := base + k*span
			if err := r.Add("src", int32(p), from, from+span); err != nil {
				b.Fatal(err)
			}
		}
		offs := r.Next()
		if len(offs) != parts {
			b.Fatalf("got %d offsets", len(offs))
		}
		for _, o := range offs {
			r.SetCommitted(o.Topic, o.Partition, o.Offset)
		}
		base += batches / parts * span
	}
}
