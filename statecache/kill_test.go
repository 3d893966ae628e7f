package statecache

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The kill -9 test re-executes the test binary as a writer process (TestMain
// runs the writer instead of the tests when writerEnv is set), kills it with
// SIGKILL while it writes, and reads back with a new cache.
const (
	writerEnv        = "STATECACHE_TEST_WRITER" // "brokers|topic|round"
	writerKeys       = 4
	writerMaxValue   = 256 << 10
	killAfterAcks    = 25
	killRounds       = 3
	writerSeqPerTurn = 1 << 20 // seq = round*writerSeqPerTurn + i
)

func TestMain(m *testing.M) {
	if arg := os.Getenv(writerEnv); arg != "" {
		os.Exit(runWriter(arg))
	}
	os.Exit(m.Run())
}

// writerValue is seq (8 bytes), sha256 of the payload (32 bytes), payload.
// The payload size varies up to writerMaxValue so that the kill often lands
// while a large record is on the wire.
func writerValue(seq int64, rng *rand.Rand) []byte {
	payload := make([]byte, 1+rng.IntN(writerMaxValue))
	for i := range payload {
		payload[i] = byte(rng.Uint32())
	}
	sum := sha256.Sum256(payload)
	v := binary.BigEndian.AppendUint64(nil, uint64(seq))
	v = append(v, sum[:]...)
	return append(v, payload...)
}

// checkValue returns the seq of a value, or an error if it is torn.
func checkValue(v []byte) (int64, error) {
	if len(v) < 8+32+1 {
		return 0, fmt.Errorf("value of %d bytes is shorter than a header", len(v))
	}
	sum := sha256.Sum256(v[40:])
	if string(sum[:]) != string(v[8:40]) {
		return 0, fmt.Errorf("checksum mismatch over %d payload bytes: torn value", len(v)-40)
	}
	return int64(binary.BigEndian.Uint64(v[:8])), nil
}

func writerKey(seq int64) string { return "key-" + strconv.FormatInt(seq%writerKeys, 10) }

// runWriter writes values in a loop until killed, printing "acked SEQ" after
// each Set returns.
func runWriter(arg string) int {
	parts := strings.Split(arg, "|")
	if len(parts) != 3 {
		fmt.Fprintln(os.Stderr, "bad", writerEnv, arg)
		return 2
	}
	round, _ := strconv.Atoi(parts[2])
	c, err := New(Config{Opts: []kgo.Opt{kgo.SeedBrokers(strings.Split(parts[0], ",")...)}, Topic: parts[1]})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(round), uint64(time.Now().UnixNano())))
	for i := int64(0); ; i++ {
		seq := int64(round)*writerSeqPerTurn + i
		if err := c.Set(ctx, writerKey(seq), writerValue(seq, rng), nil); err != nil {
			fmt.Fprintln(os.Stderr, "set:", err)
			return 1
		}
		fmt.Fprintf(os.Stdout, "acked %d\n", seq) // os.Stdout is unbuffered
	}
}

// testKill9NeverTorn kills a writer process mid-write, killRounds times, and
// checks after each kill that every key holds a complete value, at least as
// new as the last one acknowledged to the writer (durable once Set returns),
// and at most the one write in flight beyond it.
func testKill9NeverTorn(t *testing.T, b *backend) {
	if testing.Short() {
		t.Skip("spawns writer processes")
	}
	topic := topicName(t)
	b.createTopic(t, topic, 1, "cleanup.policy", "compact")

	lastAcked := make(map[string]int64) // key -> last acknowledged seq
	for round := 1; round <= killRounds; round++ {
		acked := runAndKill(t, b, topic, round)
		maxAcked := int64(-1)
		for _, seq := range acked {
			lastAcked[writerKey(seq)] = seq
			maxAcked = max(maxAcked, seq)
		}
		if maxAcked < 0 {
			t.Fatalf("round %d: the writer acknowledged nothing before the kill", round)
		}

		ctx := testCtx(t)
		c := b.newCache(t, topic)
		for k := 0; k < writerKeys; k++ {
			key := writerKey(int64(k))
			v, err := c.Get(ctx, key)
			if errors.Is(err, service.ErrKeyNotFound) {
				if _, ok := lastAcked[key]; ok {
					t.Fatalf("round %d: %s is absent, yet seq %d was acknowledged", round, key, lastAcked[key])
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			seq, err := checkValue(v)
			if err != nil {
				t.Fatalf("round %d: %s: %v", round, key, err)
			}
			if writerKey(seq) != key {
				t.Fatalf("round %d: %s holds seq %d, which belongs to %s", round, key, seq, writerKey(seq))
			}
			if want, ok := lastAcked[key]; ok && seq < want {
				t.Fatalf("round %d: %s holds seq %d, older than the acknowledged %d: an acknowledged write was lost", round, key, seq, want)
			}
			if seq > maxAcked+1 {
				t.Fatalf("round %d: %s holds seq %d, beyond the one write in flight (last acked %d)", round, key, seq, maxAcked)
			}
			// The write in flight at the kill may have landed: it is
			// now the value to compare the next round against.
			lastAcked[key] = seq
		}
		t.Logf("round %d: killed after %d acknowledged writes; every key complete", round, len(acked))
		_ = c.Close(ctx)
	}
}

// runAndKill starts a writer, SIGKILLs it after killAfterAcks acknowledged
// writes plus a random delay, and returns the acknowledged seqs.
func runAndKill(t *testing.T, b *backend, topic string, round int) []int64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%d", writerEnv, strings.Join(b.brokers, ","), topic, round))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ackc := make(chan int64, 1024)
	go func() {
		defer close(ackc)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if s, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
				if seq, err := strconv.ParseInt(s, 10, 64); err == nil {
					ackc <- seq
				}
			}
		}
	}()

	var acked []int64
	timeout := time.After(60 * time.Second)
	for len(acked) < killAfterAcks {
		select {
		case seq, ok := <-ackc:
			if !ok {
				_ = cmd.Wait()
				t.Fatalf("writer exited early: %s", stderr.String())
			}
			acked = append(acked, seq)
		case <-timeout:
			_ = cmd.Process.Kill()
			t.Fatalf("writer acknowledged %d writes in 60s: %s", len(acked), stderr.String())
		}
	}
	time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Acks printed before the kill are still in the pipe.
	for seq := range ackc {
		acked = append(acked, seq)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("writer did not die of SIGKILL: %v (stderr %s)", err, stderr.String())
	}
	return acked
}

// TestCheckValueDetectsTearing makes sure the kill test would notice a torn
// value: a prefix, a value with a byte changed, or two halves joined.
func TestCheckValueDetectsTearing(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	a, b := writerValue(7, rng), writerValue(8, rng)
	if seq, err := checkValue(a); err != nil || seq != 7 {
		t.Fatalf("checkValue of a whole value: %d, %v", seq, err)
	}
	flipped := append([]byte{}, a...)
	flipped[len(flipped)-1] ^= 1
	for name, v := range map[string][]byte{
		"prefix":  a[:len(a)/2],
		"flipped": flipped,
		"spliced": append(append([]byte{}, a[:len(a)/2]...), b[len(b)/2:]...),
		"header":  a[:40],
	} {
		if _, err := checkValue(v); err == nil {
			t.Errorf("%s: checkValue accepted a torn value", name)
		}
	}
}
