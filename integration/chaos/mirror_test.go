package chaos

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
	"github.com/connect-eos/connect-eos/txnstate"
)

// TestChaosMirror runs the mirror mode's chaos runs: kafka_eos copies from a
// source cluster (the input's) to a target cluster, both single-node brokers
// started here, so that the rounds can bounce each of them; the target runs
// each transaction version of CHAOS_TVS (the source the same one). The runs
// are CHAOS_MIRROR_RUNS (default mirror/1to1-unbounded: two processes sharing
// the source's partitions through group membership, every kill a rebalance).
// The judges read the target against what the source was given, as in
// TestChaos; the positions topic on the target must end at the source's end
// offsets, and the group's offsets on the source (committed after the fact)
// too.
//
// On demand (CHAOS_MIRROR=1), at the scale of the knobs; the large run of
// docs/evidence.md, one transaction version at a time (the rate and a step of
// a tenth pace the copy so that every round lands while it runs, not at the
// gate):
//
//	CHAOS_MIRROR=1 CHAOS_TVS=0 CHAOS_RECORDS=1000000 CHAOS_KILLS=10 CHAOS_BROKER_RESTARTS=4 \
//	  CHAOS_RATE=2000 CHAOS_STEP=0.1 CHAOS_TIMEOUT=80m \
//	  go test ./integration/chaos -run TestChaosMirror -v -timeout 100m
func TestChaosMirror(t *testing.T) {
	if testing.Short() || os.Getenv("CHAOS_MIRROR") != "1" {
		t.Skip("the mirror chaos runs are on demand: CHAOS_MIRROR=1")
	}
	k := loadKnobs(t)
	k.runs = strings.Split(cmpOr(os.Getenv("CHAOS_MIRROR_RUNS"), "mirror/1to1-unbounded"), ",")
	kafkaDir, err := filepath.Abs("../kafka")
	if err != nil {
		t.Fatal(err)
	}
	for _, tv := range k.tvs {
		t.Run(fmt.Sprintf("tv%d", tv), func(t *testing.T) {
			t.Parallel()
			bin := binary(t)
			src := chaosBroker(t, kafkaDir, fmt.Sprintf("chaos-mirror-src-tv%d-%d", tv, os.Getpid()), tv)
			dst := chaosBroker(t, kafkaDir, fmt.Sprintf("chaos-mirror-dst-tv%d-%d", tv, os.Getpid()), tv)
			dst.source = src
			t.Logf("source %s, target %s (transaction.version=%d)", src.addr, dst.addr, tv)
			for i, run := range k.runs {
				mode, variant, _ := strings.Cut(run, "/")
				t.Run(strings.ReplaceAll(run, "/", "_"), func(t *testing.T) {
					runChaos(t, k, dst, bin, mode, variant, k.seed+uint64(tv)*1000+uint64(i))
				})
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// chaosBroker starts a broker of the suite's own (up.sh; retried, as
// TestChaos does) and stops it when the test ends.
func chaosBroker(t *testing.T, kafkaDir, name string, tv int) *broker {
	var b *broker
	var err error
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		b, err = upBroker(ctx, kafkaDir, name, tv)
		cancel()
		if err == nil {
			break
		}
		if attempt == 3 {
			t.Fatal(err)
		}
		t.Logf("starting broker %s failed, retrying: %v", name, err)
		time.Sleep(5 * time.Second)
	}
	t.Cleanup(func() {
		if err := b.down(); err != nil {
			t.Log(err)
		}
	})
	return b
}

// checkPositions checks that the mirror's positions topic on the target
// (read_committed, to its settled end) holds, for every partition of the
// source topic, the source's end: the copy's record of progress says
// everything was copied, no more.
func checkPositions(ctx context.Context, brokers, topic, source string, input map[int32][]int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		return err
	}
	defer cl.Close()
	byPart, err := kafkatest.ReadCommitted(ctx, cl, topic)
	if err != nil {
		return fmt.Errorf("reading the positions topic %s: %w", topic, err)
	}
	var st txnstate.Positions
	for _, rs := range byPart {
		for _, r := range rs {
			pr, err := txnstate.ParsePositionRecord(r.Key, r.Value)
			if err != nil {
				return fmt.Errorf("positions topic %s: %w", topic, err)
			}
			st.Apply(pr)
		}
	}
	for p, vs := range input {
		next, ok := st.Next(txnstate.SourcePartition{Topic: source, Partition: p})
		if !ok || next != int64(len(vs)) {
			return fmt.Errorf("POSITIONS: the positions topic says %s[%d] is copied up to %d (found %v), the source ends at %d", source, p, next, ok, len(vs))
		}
	}
	return nil
}

// countLines counts the lines matching re in the files at paths.
func countLines(paths []string, re *regexp.Regexp) int {
	n := 0
	for _, p := range paths {
		n += len(grepLines(p, re, math.MaxInt))
	}
	return n
}
