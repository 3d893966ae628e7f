package output

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestPositionsReadRefused: a read of the positions topic that the broker
// refuses for authorization (the output's user lacks Read or Describe on the
// topic) fails at once, naming the refusal, instead of being retried until
// the claim's context ends: no retry fixes a missing ACL.
func TestPositionsReadRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		key  kmsg.Key
	}{
		{"Fetch", kmsg.Fetch},             // no Read on the topic
		{"ListOffsets", kmsg.ListOffsets}, // no Describe on the topic
	} {
		t.Run(c.name, func(t *testing.T) {
			cl, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "pos"))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			w, err := kgo.NewClient(kgo.SeedBrokers(cl.ListenAddrs()...), kgo.DefaultProduceTopic("pos"))
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := w.ProduceSync(ctx, &kgo.Record{Key: []byte("k"), Value: []byte("v")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			cl.ControlKey(int16(c.key), func(req kmsg.Request) (kmsg.Response, error, bool) {
				cl.KeepControl()
				switch req := req.(type) {
				case *kmsg.FetchRequest:
					resp := req.ResponseKind().(*kmsg.FetchResponse)
					for _, rt := range req.Topics {
						st := kmsg.NewFetchResponseTopic()
						st.Topic, st.TopicID = rt.Topic, rt.TopicID
						for _, rp := range rt.Partitions {
							sp := kmsg.NewFetchResponseTopicPartition()
							sp.Partition, sp.ErrorCode = rp.Partition, kerr.TopicAuthorizationFailed.Code
							st.Partitions = append(st.Partitions, sp)
						}
						resp.Topics = append(resp.Topics, st)
					}
					return resp, nil, true
				case *kmsg.ListOffsetsRequest:
					resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
					for _, rt := range req.Topics {
						st := kmsg.NewListOffsetsResponseTopic()
						st.Topic = rt.Topic
						for _, rp := range rt.Partitions {
							sp := kmsg.NewListOffsetsResponseTopicPartition()
							sp.Partition, sp.ErrorCode = rp.Partition, kerr.TopicAuthorizationFailed.Code
							st.Partitions = append(st.Partitions, sp)
						}
						resp.Topics = append(resp.Topics, st)
					}
					return resp, nil, true
				}
				return nil, nil, false
			})
			adm, err := kgo.NewClient(kgo.SeedBrokers(cl.ListenAddrs()...))
			if err != nil {
				t.Fatal(err)
			}
			defer adm.Close()
			start := time.Now()
			_, err = newPositionsLog(adm, "pos").read(ctx, true)
			if !errors.Is(err, kerr.TopicAuthorizationFailed) {
				t.Fatalf("read: %v, want TOPIC_AUTHORIZATION_FAILED", err)
			}
			if ctx.Err() != nil {
				t.Fatalf("read returned only when its context ended (%v): %v", time.Since(start), err)
			}
			t.Logf("read failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
		})
	}
}
