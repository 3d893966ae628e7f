package input

import (
	"bufio"
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// TestScenariosKafka runs every scenario against Apache Kafka, once per
// broker configured (transaction.version 0 and 2; see integration/kafkatest).
// The marker, abort and LSO behaviour is proven here: kfake is not the judge
// of it.
func TestScenariosKafka(t *testing.T) {
	for _, tv := range []int{0, 2} {
		t.Run(kafkatest.EnvVar(tv), func(t *testing.T) {
			brokers := strings.Split(kafkatest.Brokers(t, tv), ",")
			for _, s := range scenarios {
				t.Run(s.name, func(t *testing.T) { s.fn(t, newEnv(t, kafkatest.EnvVar(tv), brokers)) })
			}
		})
	}
}

func init() {
	readCommittedJudge = consoleConsumer
}

// consoleConsumer reads topic from the beginning with Kafka's own
// ConsoleConsumer under read_committed, until it has been idle for 10s (the
// idle timeout also covers the JVM start and the group join, which take
// several seconds on a loaded machine: 3s read nothing once in CI).
func consoleConsumer(t *testing.T, e *env, topic string) map[int32][]judged {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd, err := kafkatest.ToolCmd(ctx, "consumer.ConsoleConsumer",
		"--bootstrap-server", strings.Join(e.brokers, ","), "--topic", topic, "--from-beginning",
		"--isolation-level", "read_committed", "--timeout-ms", "10000",
		"--formatter-property", "print.partition=true", "--formatter-property", "print.offset=true")
	require.NoError(t, err)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	_ = cmd.Run() // exits non-zero on its idle timeout
	out := map[int32][]judged{}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), "\t", 3)
		if len(f) != 3 || !strings.HasPrefix(f[0], "Partition:") || !strings.HasPrefix(f[1], "Offset:") {
			continue
		}
		p, err1 := strconv.Atoi(strings.TrimPrefix(f[0], "Partition:"))
		o, err2 := strconv.ParseInt(strings.TrimPrefix(f[1], "Offset:"), 10, 64)
		require.NoError(t, err1)
		require.NoError(t, err2)
		out[int32(p)] = append(out[int32(p)], judged{offset: o, value: f[2]})
	}
	require.NotEmpty(t, out, "ConsoleConsumer read nothing")
	return out
}
