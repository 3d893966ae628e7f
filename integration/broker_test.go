package integration

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// TestBroker checks the test brokers themselves, once per transaction version:
// that each is the Apache Kafka up.sh configured, with the transaction.version
// asked for, and that transactions behave as the rest of the suite assumes.
func TestBroker(t *testing.T) {
	for _, tv := range []int{0, 2} {
		t.Run(fmt.Sprintf("tv%d", tv), func(t *testing.T) {
			brokers := kafkatest.Brokers(t, tv)
			t.Run("IsApacheKafka", func(t *testing.T) { testIsApacheKafka(t, brokers, tv) })
			t.Run("Transactions", func(t *testing.T) { testTransactions(t, brokers, tv) })
			t.Run("TimeoutAbort", func(t *testing.T) { testTimeoutAbort(t, brokers) })
			t.Run("StaleEpochInitFenced", func(t *testing.T) { testStaleEpochInitFenced(t, brokers) })
		})
	}
}

// finalizedLevel returns the finalized max level of a feature. Kafka leaves a
// feature at level 0 out of FinalizedFeatures entirely (a cluster formatted
// with transaction.version=0 lists no transaction.version), so absent means 0.
func finalizedLevel(resp *kmsg.ApiVersionsResponse, name string) int16 {
	for _, f := range resp.FinalizedFeatures {
		if f.Name == name {
			return f.MaxVersionLevel
		}
	}
	return 0
}

func testIsApacheKafka(t *testing.T, brokers string, tv int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kafkatest.Admin(t, brokers)

	// One KRaft node (broker and controller in one process, node.id=1).
	md, err := adm.BrokerMetadata(ctx)
	require.NoError(t, err)
	require.Equal(t, []int32{1}, md.Brokers.NodeIDs())
	require.NotEmpty(t, md.Cluster, "cluster id")

	versions, err := adm.ApiVersions(ctx)
	require.NoError(t, err)
	require.Len(t, versions, 1)
	v := versions[1]
	require.NoError(t, v.Err)
	raw := v.Raw()
	guess := v.VersionGuess()
	t.Logf("broker version guess %s, finalized features %+v", guess, raw.FinalizedFeatures)
	assert.True(t, strings.HasPrefix(guess, "v4."), "Kafka 4.x expected, franz-go guesses %s", guess)

	// The finalized transaction.version is the one the cluster was formatted
	// with; the broker supports up to 2 either way (what a client must check
	// is the finalized level, not the API versions).
	assert.Equal(t, int16(tv), finalizedLevel(raw, "transaction.version"))
	assert.NotZero(t, finalizedLevel(raw, "metadata.version"), "KRaft metadata.version")
	var supportedTV int16 = -1
	for _, f := range raw.SupportedFeatures {
		if f.Name == "transaction.version" {
			supportedTV = f.MaxVersion
		}
	}
	assert.Equal(t, int16(2), supportedTV, "supported transaction.version max")
	for _, k := range []kmsg.Key{kmsg.Produce, kmsg.InitProducerID, kmsg.AddPartitionsToTxn, kmsg.EndTxn, kmsg.TxnOffsetCommit} {
		lo, hi, ok := v.KeyVersions(int16(k))
		t.Logf("%s: versions %d..%d (advertised %v)", k.Name(), lo, hi, ok)
	}
	// Kafka 4 advertises EndTxn v5 (the KIP-890 version) under transaction.version
	// 0 as well: API versions do not tell the two protocols apart, only the
	// finalized feature does.
	endTxnMax, _ := v.KeyMaxVersion(int16(kmsg.EndTxn))
	assert.GreaterOrEqual(t, endTxnMax, int16(5), "EndTxn max version")

	// The broker runs with up.sh's settings: these are not Kafka's defaults.
	rcs, err := adm.DescribeBrokerConfigs(ctx, 1)
	require.NoError(t, err)
	require.Len(t, rcs, 1)
	require.NoError(t, rcs[0].Err)
	want := map[string]string{
		"auto.create.topics.enable":                                   "false",
		"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
		"transaction.state.log.replication.factor":                    "1",
	}
	got := map[string]string{}
	for _, c := range rcs[0].Configs {
		if _, ok := want[c.Key]; ok && c.Value != nil {
			got[c.Key] = *c.Value
		}
	}
	assert.Equal(t, want, got)
}

// Control record types in a marker's key (version int16, type int16).
const (
	markerAbort  = 0
	markerCommit = 1
)

// testTransactions writes three transactions to a one-partition topic:
//
//	offsets 0..n-1        committed records   c0..c(n-1)
//	offset  n             COMMIT marker
//	offsets n+1..n+m      aborted records     a0..a(m-1)
//	offset  n+m+1         ABORT marker
//	offset  n+m+2         committed record    end
//	offset  n+m+3         COMMIT marker
//
// The last transaction is a sentinel: a consumer that has seen it has seen all
// that comes before it, so "exactly these records" needs no quiet-period guess.
func testTransactions(t *testing.T, brokers string, tv int) {
	const n, m = 10, 5
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic := kafkatest.Topic(t, brokers, 1)

	p := kafkatest.Client(t, brokers,
		kgo.TransactionalID(topic+"-txn"),
		kgo.DefaultProduceTopic(topic),
	)
	txn := func(commit kgo.TransactionEndTry, values ...string) {
		t.Helper()
		require.NoError(t, p.BeginTransaction())
		for _, v := range values {
			require.NoError(t, p.ProduceSync(ctx, kgo.StringRecord(v)).FirstErr())
		}
		require.NoError(t, p.EndTransaction(ctx, commit))
	}
	var committed, aborted []string
	for i := range n {
		committed = append(committed, fmt.Sprintf("c%d", i))
	}
	for i := range m {
		aborted = append(aborted, fmt.Sprintf("a%d", i))
	}
	txn(kgo.TryCommit, committed...)
	txn(kgo.TryAbort, aborted...)
	txn(kgo.TryCommit, "end")

	// Markers take offsets: the end offset counts 3 of them, and with no open
	// transaction the last stable offset is the end offset.
	adm := kafkatest.Admin(t, brokers)
	const end = n + m + 4
	hwm, err := adm.ListEndOffsets(ctx, topic)
	require.NoError(t, err)
	lso, err := adm.ListCommittedOffsets(ctx, topic)
	require.NoError(t, err)
	for name, lo := range map[string]kadm.ListedOffsets{"end offset": hwm, "last stable offset": lso} {
		o, ok := lo.Lookup(topic, 0)
		require.True(t, ok, name)
		require.NoError(t, o.Err, name)
		assert.Equal(t, int64(end), o.Offset, name)
	}

	// read_committed: the committed records and the sentinel, nothing else.
	rc := consumeUntil(ctx, t, brokers, topic, "end", kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	var values []string
	var offsets []int64
	for _, r := range rc {
		values = append(values, string(r.Value))
		offsets = append(offsets, r.Offset)
	}
	wantOffsets := []int64{}
	for i := range n {
		wantOffsets = append(wantOffsets, int64(i))
	}
	assert.Equal(t, append(append([]string{}, committed...), "end"), values, "read_committed values")
	assert.Equal(t, append(wantOffsets, n+m+2), offsets, "read_committed offsets")

	// read_uncommitted with control records kept: every offset, data of both
	// committed and aborted transactions, and the three markers.
	ru := consumeUntil(ctx, t, brokers, topic, "", kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.KeepControlRecords())
	require.Len(t, ru, end, "read_uncommitted records incl. markers")
	var data []string
	markers := map[int64]int{}
	for i, r := range ru {
		require.Equal(t, int64(i), r.Offset, "offsets are dense")
		assert.True(t, r.Attrs.IsTransactional(), "offset %d transactional", r.Offset)
		if r.Attrs.IsControl() {
			require.Len(t, r.Key, 4, "control key at %d", r.Offset)
			markers[r.Offset] = int(binary.BigEndian.Uint16(r.Key[2:]))
			continue
		}
		data = append(data, string(r.Value))
	}
	assert.Equal(t, append(append(append([]string{}, committed...), aborted...), "end"), data, "read_uncommitted values")
	assert.Equal(t, map[int64]int{n: markerCommit, n + m + 1: markerAbort, n + m + 3: markerCommit}, markers, "markers")

	// The producer epoch in the log tells the two protocols apart. Under
	// transaction.version 2 (KIP-890) every EndTxn bumps the epoch and the marker
	// is written with the new one; the next transaction uses it. Under 0 one
	// epoch serves every transaction.
	e := ru[0].ProducerEpoch
	epochs := map[int64]int16{}
	for _, r := range ru {
		epochs[r.Offset] = r.ProducerEpoch
	}
	t.Logf("producer id %d, epochs by offset %v", ru[0].ProducerID, epochs)
	bump := int16(0)
	if tv >= 2 {
		bump = 1
	}
	wantEpochs := map[int64]int16{}
	for o := range int64(end) {
		switch {
		case o <= n-1: // first transaction's data
			wantEpochs[o] = e
		case o <= n+m: // first marker, second transaction's data
			wantEpochs[o] = e + bump
		case o <= n+m+2: // second marker, sentinel data
			wantEpochs[o] = e + 2*bump
		default: // last marker
			wantEpochs[o] = e + 3*bump
		}
	}
	assert.Equal(t, wantEpochs, epochs, "producer epochs by offset")
}

// testTimeoutAbort checks that the broker aborts a transaction left open past
// its timeout within a second or two (up.sh shortens the check interval from
// 10 s to 1 s), which timeout tests rely on.
func testTimeoutAbort(t *testing.T, brokers string) {
	const timeout = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topic := kafkatest.Topic(t, brokers, 1)
	p := kafkatest.Client(t, brokers,
		kgo.TransactionalID(topic+"-txn"),
		kgo.DefaultProduceTopic(topic),
		kgo.TransactionTimeout(timeout),
	)
	require.NoError(t, p.BeginTransaction())
	require.NoError(t, p.ProduceSync(ctx, kgo.StringRecord("left open")).FirstErr())
	start := time.Now()

	// Open, the transaction holds the last stable offset at its first record;
	// the abort marker moves it (and the end offset) to 2.
	adm := kafkatest.Admin(t, brokers)
	offset := func(list func(context.Context, ...string) (kadm.ListedOffsets, error)) int64 {
		lo, err := list(ctx, topic)
		require.NoError(t, err)
		o, ok := lo.Lookup(topic, 0)
		require.True(t, ok)
		require.NoError(t, o.Err)
		return o.Offset
	}
	require.Equal(t, int64(0), offset(adm.ListCommittedOffsets), "open transaction pins the last stable offset")
	kafkatest.Wait(t, timeout+60*time.Second, func() bool { return offset(adm.ListCommittedOffsets) == 2 })
	took := time.Since(start)
	t.Logf("aborted by the broker %v after the last produce (transaction timeout %v)", took.Round(10*time.Millisecond), timeout)
	assert.Equal(t, int64(2), offset(adm.ListEndOffsets), "record + abort marker")
	// Kafka's default check interval (10s) would abort it only after
	// timeout+10s: below that, the shortened interval is in force, with room
	// for a loaded machine.
	assert.Less(t, took, timeout+9*time.Second, "timed-out transaction aborted late: is the check interval 1s?")
}

// consumeUntil reads the topic from the start until a record with value stop
// (or, if stop is empty, the end offset) and returns every record it was given.
func consumeUntil(ctx context.Context, t *testing.T, brokers, topic, stop string, opts ...kgo.Opt) []*kgo.Record {
	t.Helper()
	cl := kafkatest.Client(t, brokers, append([]kgo.Opt{
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, opts...)...)
	hwm, err := kafkatest.Admin(t, brokers).ListEndOffsets(ctx, topic)
	require.NoError(t, err)
	endOffset, _ := hwm.Lookup(topic, 0)
	var out []*kgo.Record
	for {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "consuming %s: got %d records", topic, len(out))
		require.NoError(t, fs.Err())
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			if stop != "" && string(r.Value) == stop || stop == "" && r.Offset == endOffset.Offset-1 {
				done = true
			}
		})
		if done {
			return out
		}
	}
}

// testStaleEpochInitFenced: an InitProducerID that names a producer id and
// epoch another producer has bumped since (the KIP-360 form franz-go sends
// when it re-initialises a producer it had) is refused PRODUCER_FENCED, and
// the id stays with the other producer, whose own re-initialisation bumps it.
// kfake accepts the stale one and bumps the epoch past the other producer's:
// a zombie's re-initialisation takes the id back there, never on Apache
// Kafka.
func testStaleEpochInitFenced(t *testing.T, brokers string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	require.NoError(t, err)
	defer cl.Close()
	id := fmt.Sprintf("stale-init-%d", time.Now().UnixNano())
	init := func(pid int64, epoch int16) (*kmsg.InitProducerIDResponse, error) {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID = &id
		req.TransactionTimeoutMillis = 60000
		req.ProducerID, req.ProducerEpoch = pid, epoch
		return req.RequestWith(ctx, cl)
	}
	first, err := init(-1, -1)
	require.NoError(t, err)
	require.Zero(t, first.ErrorCode)
	rival, err := init(-1, -1)
	require.NoError(t, err)
	require.Zero(t, rival.ErrorCode)
	require.Equal(t, first.ProducerID, rival.ProducerID)
	require.Equal(t, first.ProducerEpoch+1, rival.ProducerEpoch)
	stale, err := init(first.ProducerID, first.ProducerEpoch)
	require.NoError(t, err)
	assert.Equal(t, kerr.ProducerFenced.Code, stale.ErrorCode, "an InitProducerID naming the bumped epoch %d: %+v", first.ProducerEpoch, stale)
	again, err := init(rival.ProducerID, rival.ProducerEpoch)
	require.NoError(t, err)
	require.Zero(t, again.ErrorCode)
	assert.Equal(t, rival.ProducerEpoch+1, again.ProducerEpoch, "the rival's re-initialisation after the refused one")
}
