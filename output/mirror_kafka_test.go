package output

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// Mirror mode on Apache Kafka (skipped without KAFKA_BROKERS_TV0/2): the two
// shared brokers are two clusters; each test runs A=tv0 -> B=tv2 and A=tv2 ->
// B=tv0, so that the positions commit under both transaction versions.
func forEachMirrorKafka(t *testing.T, parts int32, fn func(t *testing.T, e mirrorEnv)) {
	for _, dir := range [][2]int{{0, 2}, {2, 0}} {
		t.Run(fmt.Sprintf("tv%d-to-tv%d", dir[0], dir[1]), func(t *testing.T) {
			fn(t, kafkaMirrorEnv(t, dir[0], dir[1], parts))
		})
	}
}

func kafkaMirrorEnv(t *testing.T, from, to int, parts int32) mirrorEnv {
	a, b := kafkatest.Brokers(t, from), kafkatest.Brokers(t, to)
	// Groups, transactional ids and topics outlive the test on a real
	// broker.
	stamp := time.Now().UnixNano()
	return mirrorEnv{
		a: strings.Split(a, ","), b: strings.Split(b, ","),
		src: kafkatest.Topic(t, a, parts), dst: kafkatest.Topic(t, b, parts),
		group:     fmt.Sprintf("mirror-%d", stamp),
		positions: fmt.Sprintf("mirror-positions-%d", stamp),
		id:        fmt.Sprintf("mirror-%d-", stamp),
	}
}

func TestMirrorKafkaCopyAndResume(t *testing.T) {
	forEachMirrorKafka(t, 3, testMirrorCopyAndResume)
}

func TestMirrorKafkaArrow(t *testing.T) {
	forEachMirrorKafka(t, 2, testMirrorArrow)
}

func TestMirrorKafkaCrash(t *testing.T) {
	for _, dir := range [][2]int{{0, 2}, {2, 0}} {
		t.Run(fmt.Sprintf("tv%d-to-tv%d", dir[0], dir[1]), func(t *testing.T) {
			testMirrorCrash(t, func(t *testing.T) mirrorEnv { return kafkaMirrorEnv(t, dir[0], dir[1], 3) })
		})
	}
}

func TestMirrorKafkaMembersRebalance(t *testing.T) {
	forEachMirrorKafka(t, 4, testMirrorMembersRebalance)
}

func TestMirrorKafkaMembersKillNine(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	forEachMirrorKafka(t, 4, testMirrorMembersKillNine)
}
