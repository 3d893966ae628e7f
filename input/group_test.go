package input

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// consume reads and acks from h until ctx ends, recording every message.
func consume(ctx context.Context, t *testing.T, h *harness, mu *sync.Mutex, seen map[string]int) {
	for {
		b, ack, err := h.in.ReadBatch(ctx)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, service.ErrEndOfInput) {
				t.Errorf("ReadBatch: %v", err)
			}
			return
		}
		mu.Lock()
		for _, g := range toGot(b) {
			seen[g.Value]++
		}
		mu.Unlock()
		_ = ack(ctx, nil)
	}
}

// A consumer-group rebalance: a second member joins while the first reads,
// the group splits the partitions, every record is read, and the group's
// committed offsets reach the ends.
func scenarioGroupRebalance(t *testing.T, e *env) {
	topic := e.topic(t, 4)
	const perPartition = 50
	for p := int32(0); p < 4; p++ {
		e.produce(t, topic, p, vals(fmt.Sprintf("p%d-", p), perPartition)...)
	}
	group := uniq(t, "g")
	conf := fmt.Sprintf(`
topics: [ %s ]
consumer_group: %s
group_membership: true
start_offset: committed
reset_offset: earliest
max_batch_records: 5
commit_period: 50ms
`, topic, group)
	var mu sync.Mutex
	seen := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	a := e.newInput(t, conf)
	a.mustConnect()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); consume(ctx, t, a, &mu, seen) }()
	wait(t, 20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) > 0 })

	b := e.newInput(t, conf)
	b.mustConnect()
	wg.Add(1)
	go func() { defer wg.Done(); consume(ctx, t, b, &mu, seen) }()

	// Both members own partitions after the rebalance.
	wait(t, 30*time.Second, func() bool {
		return len(a.raw.conn.tr.snapshots()) > 0 && len(b.raw.conn.tr.snapshots()) > 0
	})
	assert.Equal(t, 4, len(a.raw.conn.tr.snapshots())+len(b.raw.conn.tr.snapshots()), "each partition has one owner")
	for p := int32(0); p < 4; p++ {
		e.produce(t, topic, p, []byte(fmt.Sprintf("p%d-after", p)))
	}
	wait(t, 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 4*(perPartition+1) })
	wait(t, 20*time.Second, func() bool {
		for p := int32(0); p < 4; p++ {
			if e.committed(t, group, topic, p) != perPartition+1 {
				return false
			}
		}
		return true
	})
	cancel()
	wg.Wait()
	dups := 0
	for _, n := range seen {
		dups += n - 1
	}
	t.Logf("%d records, %d read twice across the rebalance (at-least-once)", len(seen), dups)
}

// Ack and restore with membership: a member that stops after acking part of
// the records leaves them committed; the next member resumes there.
func scenarioGroupRestore(t *testing.T, e *env) {
	topic := e.topic(t, 2)
	e.produce(t, topic, 0, vals("a", 10)...)
	e.produce(t, topic, 1, vals("b", 10)...)
	group := uniq(t, "g")
	conf := fmt.Sprintf(`
topics: [ %s ]
consumer_group: %s
group_membership: true
start_offset: committed
reset_offset: earliest
max_batch_records: 100
`, topic, group)
	h1 := e.newInput(t, conf)
	h1.mustConnect()
	first := h1.readN(20, readTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	require.NoError(t, h1.in.Close(ctx))
	// Promptly: well under the 45s session timeout a Close that did not
	// leave the group would wait for, with room for a loaded machine.
	assert.Less(t, time.Since(start), 15*time.Second, "Close returns promptly and leaves the group")
	assert.Len(t, first, 20)
	assert.Equal(t, int64(10), e.committed(t, group, topic, 0), "Close commits what was acknowledged")
	assert.Equal(t, int64(10), e.committed(t, group, topic, 1))

	e.produce(t, topic, 1, []byte("b-new"))
	h2 := e.newInput(t, conf)
	h2.mustConnect()
	assert.Equal(t, []string{"b-new"}, values(h2.readN(1, readTimeout)))
}

// A revoke with unacknowledged batches: the revoke waits revoke_ack_timeout,
// commits the acknowledged prefix only, and the new owner reads the rest
// again; the old owner's late acks are ignored.
func scenarioGroupRevokeUnacked(t *testing.T, e *env) {
	topic := e.topic(t, 2)
	e.produce(t, topic, 0, vals("a", 10)...)
	e.produce(t, topic, 1, vals("b", 10)...)
	group := uniq(t, "g")
	conf := fmt.Sprintf(`
topics: [ %s ]
consumer_group: %s
group_membership: true
start_offset: committed
reset_offset: earliest
max_batch_records: 5
commit_period: 20ms
revoke_ack_timeout: 300ms
`, topic, group)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := e.newInput(t, conf)
	a.mustConnect()
	type held struct {
		g   got
		ack service.AckFunc
	}
	var late []held
	acked := map[int32]bool{}
	for len(late) < 2 || len(acked) < 2 {
		b, ack, err := a.in.ReadBatch(ctx)
		require.NoError(t, err)
		g := toGot(b)[0]
		if !acked[g.Partition] {
			acked[g.Partition] = true
			require.NoError(t, ack(ctx, nil))
			continue
		}
		late = append(late, held{g, ack})
	}
	wait(t, 10*time.Second, func() bool {
		return e.committed(t, group, topic, 0) == 5 && e.committed(t, group, topic, 1) == 5
	})

	b := e.newInput(t, conf)
	b.mustConnect()
	var bGot []got
	for len(bGot) < 5 {
		batch, ack, err := b.in.ReadBatch(ctx)
		require.NoError(t, err)
		bGot = append(bGot, toGot(batch)...)
		require.NoError(t, ack(ctx, nil))
	}
	moved := bGot[0].Partition
	assert.Equal(t, int64(5), bGot[0].Offset, "the new owner starts at the acknowledged prefix")
	for _, h := range late {
		require.NoError(t, h.ack(ctx, nil)) // the moved partition's is ignored
	}
	kept := 1 - moved
	wait(t, 10*time.Second, func() bool {
		return e.committed(t, group, topic, kept) == 10 && e.committed(t, group, topic, moved) == 10
	})
}

// A session_timeout the broker refuses (below group.min.session.timeout.ms,
// 6s on Kafka and kfake alike) stops the stream with an error naming the
// field, instead of kgo rejoining with it forever.
func scenarioGroupSessionTimeoutRefused(t *testing.T, e *env) {
	topic := e.topic(t, 1)
	h := e.newInput(t, fmt.Sprintf(`
topics: [ %s ]
consumer_group: %s
group_membership: true
start_offset: committed
reset_offset: earliest
session_timeout: 2s
heartbeat_interval: 500ms
`, topic, uniq(t, "g")))
	h.mustConnect()
	err := h.readError()
	requireFatal(t, h, err, nil)
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, knFieldSessionTimeout, ce.Field)
	assert.Contains(t, err.Error(), "2s")
}

// session_timeout reaches the group: a member whose process is killed
// (SIGKILL: it never leaves the group) is dropped by the coordinator after
// its session_timeout of 6s, well before the default 45s would expire, so
// that its partitions go to the other members that soon.
func scenarioGroupSessionTimeoutKill(t *testing.T, e *env) {
	topic := e.topic(t, 2)
	group := uniq(t, "g")
	conf := filepath.Join(t.TempDir(), "member.yaml")
	require.NoError(t, os.WriteFile(conf, fmt.Appendf(nil, `
input:
  kafka_native:
    seed_brokers: [ %s ]
    topics: [ %s ]
    consumer_group: %s
    group_membership: true
    start_offset: committed
    reset_offset: earliest
    session_timeout: 6s
    heartbeat_interval: 1s
output:
  drop: {}
logger:
  level: warn
`, strings.Join(e.brokers, ","), topic, group), 0o600))
	// The process's output goes to a file, read when a wait fails.
	logPath := filepath.Join(filepath.Dir(conf), "member.log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	defer logFile.Close()
	output := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	cmd := exec.Command(kafkatest.Binary(t), "run", conf)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	require.NoError(t, cmd.Start())
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	members := func() (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		gs, err := e.adm.DescribeGroups(ctx, group)
		if err != nil || gs.Error() != nil {
			return -1, fmt.Sprint(err, gs.Error())
		}
		g := gs[group]
		return len(g.Members), g.State
	}
	waitFor(t, 60*time.Second, func() string {
		n, state := members()
		if n == 1 && state == "Stable" {
			return ""
		}
		return fmt.Sprintf("%d members, %s; output:\n%s", n, state, output())
	})
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	killed = true
	killedAt := time.Now()
	waitFor(t, 30*time.Second, func() string {
		if n, state := members(); n != 0 {
			return fmt.Sprintf("the killed member is still in the group after %v (%d members, %s): session_timeout 6s was not applied (the default is 45s)", time.Since(killedAt).Round(time.Second), n, state)
		}
		return ""
	})
	t.Logf("the killed member left the group %v after the kill", time.Since(killedAt).Round(100*time.Millisecond))
}
