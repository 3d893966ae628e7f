package output

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/connect-eos/connect-eos/txnstate"
)

// slot is one transactional producer of the pool, transactional.id
// "<transactional_id>-<n>". Its client is initialised once (InitProducerID,
// which also finds the coordinator) and reused for every epoch it carries, so
// an epoch boundary never waits for an InitProducerID: the next epoch's slot
// is idle and warm while the current one commits. A fresh client is built
// only after a fence by our own transaction timeout or an abort that failed.
//
// The slot invariant txnstate relies on: a slot is busy from the moment an
// epoch opens on it until that epoch's final state (COMMITTED or ABORTED) is
// written to the state cache; so no transaction begins on a slot whose record
// still says PREPARED.
type slot struct {
	n  int
	id string
	cl *kgo.Client
	tv txnstate.TxnVersion

	// fenceGen and fencePID make the owner token of the slot's records
	// (txnstate.FenceToken): gen goes up by one when the producer id
	// changes. Set at Connect from the slot's stored record; then the
	// committer's (one epoch at a time).
	fenceGen uint64
	fencePID int64
	// lastFence is the newest token of the slot (guarded by output.mu).
	lastFence uint64

	// Guarded by output.mu.
	busy   bool
	freeCh chan struct{} // closed when busy turns false
	broken bool          // the client must be replaced before the next epoch
}

// newSlotClient builds and initialises a transactional client for id:
// InitProducerID bumps the epoch and aborts whatever transaction of id is
// still open, and fences any older producer of id.
func (o *output) newSlotClient(ctx context.Context, id string) (*kgo.Client, error) {
	cl, _, err := o.initSlotClient(ctx, id)
	return cl, err
}

// slotInit is what a slot client's initialisation got: the producer id and
// epoch, and how many InitProducerID requests the client wrote for them (more
// than one when an answer was lost or refused and franz-go retried: each may
// have bumped the epoch).
type slotInit struct {
	pid   int64
	epoch int16
	sent  int32
}

// initSlotClient is newSlotClient, also returning what the initialisation got.
func (o *output) initSlotClient(ctx context.Context, id string) (*kgo.Client, slotInit, error) {
	var in slotInit
	sent := new(initCounter)
	opts := append(o.conf.conn.Opts(), o.conf.producerOpts()...)
	opts = append(opts, kgo.TransactionalID(id), kgo.WithHooks(sent))
	opts = append(opts, o.clientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, in, fmt.Errorf("transactional id %q: %w", id, err)
	}
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		cl.Close()
		return nil, in, fmt.Errorf("transactional id %q: init producer id: %w", id, err)
	}
	in.pid, in.epoch, in.sent = pid, epoch, sent.n.Load()
	return cl, in, nil
}

// initCounter counts the InitProducerID requests a client writes (a
// kgo.HookBrokerWrite), whether or not the write succeeded: a request cut
// mid-write may still have reached the broker.
type initCounter struct{ n atomic.Int32 }

func (c *initCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	if key == int16(kmsg.InitProducerID) {
		c.n.Add(1)
	}
}

// clusterTxnVersion is the transaction version franz-go will use for new
// transactions: 2 when a broker reports transaction.version >= 2 finalized and
// EndTxn v5 (the same rule as kgo's supportsKIP890p2), else 0. Every commit
// double-checks it from the producer epoch EndTxn left behind.
func (o *output) clusterTxnVersion(ctx context.Context) (txnstate.TxnVersion, error) {
	vs, err := kadm.NewClient(o.admin).ApiVersions(ctx)
	if err != nil {
		return txnstate.TV0, fmt.Errorf("api versions: %w", err)
	}
	tv := txnstate.TV0
	vs.Each(func(v kadm.BrokerApiVersions) {
		raw := v.Raw()
		if v.Err != nil || raw == nil {
			return
		}
		endTxn := false
		for _, k := range raw.ApiKeys {
			if k.ApiKey == int16(kmsg.EndTxn) && k.MaxVersion >= 5 {
				endTxn = true
			}
		}
		for _, f := range raw.FinalizedFeatures {
			if f.Name == "transaction.version" && f.MaxVersionLevel >= 2 && endTxn {
				tv = txnstate.TV2
			}
		}
	})
	return tv, nil
}

// fence returns the owner token of a record written with producer id pid at
// epoch e (txnstate.FenceToken): a new producer id starts a new gen.
func (s *slot) fence(pid int64, e int16) uint64 {
	if pid != s.fencePID {
		s.fenceGen++
		s.fencePID = pid
	}
	return txnstate.FenceToken(s.fenceGen, e)
}
