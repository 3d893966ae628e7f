package output

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/connect-eos/connect-eos/handover"
)

// mirrorCreatingOutput is a mirror-mode output on e with create_topics set,
// owning every partition of e.src (generation 1).
func mirrorCreatingOutput(t *testing.T, e mirrorEnv, txnID string) *output {
	t.Helper()
	return mirrorOutputConf(t, e, txnID, &fakeGroup{owned: map[int32]uint64{0: 1, 1: 1, 2: 1}, gen: 1, member: "m"}, ", create_topics: true", "")
}

// claimCreating claims partitions 0 to 2 of e.src for o (of three on the
// source), with configs as the source's configs.
func claimCreating(ctx context.Context, t *testing.T, o *output, e mirrorEnv, configs func(context.Context, []string) (map[string]map[string]string, error)) {
	t.Helper()
	req := handover.PositionsRequest{
		Partitions: map[string][]int32{e.src: {0, 1, 2}}, PartitionCounts: map[string]int32{e.src: 3}, Generation: 1,
		SourceConfigs: configs,
	}
	if _, err := o.mirror.positions(ctx, req); err != nil {
		t.Fatalf("claim: %v", err)
	}
}

// targetConfigsSet returns the configs set on topic itself on brokers, and
// its partition count.
func targetConfigsSet(t *testing.T, brokers []string, topic string) (map[string]string, int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		t.Fatalf("configs of %s: %v", topic, err)
	}
	set := map[string]string{}
	for _, c := range rc.Configs {
		if c.Source == kmsg.ConfigSourceDynamicTopicConfig {
			set[c.Key] = c.MaybeValue()
		}
	}
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	return set, len(md.Topics[topic].Partitions)
}

// TestMirrorCreateTopicsLikeSource: with create_topics, a missing target
// topic is created when its source's partitions are first claimed, with the
// source's partition count and the configs set on the source topic (its
// retention above all: records keep their source timestamps), except those
// that would change what is copied (the timestamp type and bounds) or belong
// to the source cluster (min.insync.replicas, Confluent's and Redpanda's own).
// The source is asked only when a target is missing.
func TestMirrorCreateTopicsLikeSource(t *testing.T) {
	e := newMirrorEnv(t, 3)
	e.dst = "created-" + e.src // B has no such topic
	o := mirrorCreatingOutput(t, e, e.id+"x")
	var asked atomic.Int32
	source := map[string]string{
		"retention.ms":                        "-1",
		"cleanup.policy":                      "compact",
		"max.message.bytes":                   "2000000",
		"message.timestamp.type":              "LogAppendTime",
		"message.timestamp.difference.max.ms": "60000",
		"min.insync.replicas":                 "2",
		"redpanda.remote.read":                "true",
		"confluent.placement.constraints":     "{}",
	}
	configs := func(_ context.Context, topics []string) (map[string]map[string]string, error) {
		asked.Add(1)
		if len(topics) != 1 || topics[0] != e.src {
			return nil, fmt.Errorf("asked for %v, want [%s]", topics, e.src)
		}
		return map[string]map[string]string{e.src: source}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), mirrorDeadline)
	defer cancel()
	claimCreating(ctx, t, o, e, configs)
	got, parts := targetConfigsSet(t, e.b, e.dst)
	want := map[string]string{"retention.ms": "-1", "cleanup.policy": "compact", "max.message.bytes": "2000000"}
	if fmt.Sprint(got) != fmt.Sprint(want) || parts != 3 {
		t.Fatalf("created %s with %d partitions and configs %v, want 3 and %v", e.dst, parts, got, want)
	}
	if n := asked.Load(); n != 1 {
		t.Fatalf("the source's configs were asked for %d times, want once", n)
	}
	// The target exists now: a later claim does not ask the source.
	claimCreating(ctx, t, o, e, configs)
	if n := asked.Load(); n != 1 {
		t.Fatalf("the source's configs were asked for %d times after the target existed, want once", n)
	}
}

// TestMirrorCreateTopicsSourceUnreadable: when the source topic's configs
// cannot be read, the target is not created with the broker's defaults
// instead (a shorter retention than the source's would delete copied
// records): the claim fails, naming what to grant.
func TestMirrorCreateTopicsSourceUnreadable(t *testing.T) {
	e := newMirrorEnv(t, 3)
	e.dst = "created-" + e.src
	o := mirrorCreatingOutput(t, e, e.id+"x")
	denied := kerr.TopicAuthorizationFailed
	req := handover.PositionsRequest{
		Partitions: map[string][]int32{e.src: {0}}, PartitionCounts: map[string]int32{e.src: 3}, Generation: 1,
		SourceConfigs: func(context.Context, []string) (map[string]map[string]string, error) { return nil, denied },
	}
	ctx, cancel := context.WithTimeout(context.Background(), mirrorDeadline)
	defer cancel()
	_, err := o.mirror.positions(ctx, req)
	if !errors.Is(err, denied) || !strings.Contains(err.Error(), "DescribeConfigs") {
		t.Fatalf("claim: %v, want the describe error, naming DescribeConfigs", err)
	}
	cl, cerr := kgo.NewClient(kgo.SeedBrokers(e.b...))
	if cerr != nil {
		t.Fatal(cerr)
	}
	defer cl.Close()
	md, merr := kadm.NewClient(cl).Metadata(ctx, e.dst)
	if merr != nil {
		t.Fatal(merr)
	}
	if td := md.Topics[e.dst]; td.Err == nil {
		t.Fatalf("%s was created (%d partitions) although its source's configs were not read", e.dst, len(td.Partitions))
	}
}
