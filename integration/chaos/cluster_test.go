package chaos

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/connect-eos/connect-eos/integration/kafkatest"
)

// cluster is a 3-node Apache Kafka cluster (KRaft, every node broker and
// controller) started by integration/kafka/up-cluster.sh and owned by the
// chaos suite, so that it can kill and restart its nodes.
type cluster struct {
	name  string
	tv    int
	dir   string // up-cluster.sh's state dir
	addr  string // the bootstrap list, comma separated
	kafka string
	// nodes[i] is node id i+1: a broker whose dir is the node's dir
	// (pid, server.properties) and addr its own listener, so that
	// broker.pid and broker.bounce work on it as on a single node.
	nodes []*broker
}

// upCluster starts (or reuses) the cluster named name with up-cluster.sh.
func upCluster(ctx context.Context, kafkaDir, name string, tv int) (*cluster, error) {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(kafkaDir, "up-cluster.sh"), "--tv", strconv.Itoa(tv), "--name", name)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("up-cluster.sh --tv %d --name %s: %v\n%s", tv, name, err, tail(stderr.String(), 60))
	}
	c := &cluster{name: name, tv: tv, kafka: kafkaDir}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "KAFKA_BROKERS="); ok {
			c.addr = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(sc.Text(), "KAFKA_CLUSTER_STATE="); ok {
			c.dir = strings.TrimSpace(v)
		}
	}
	if c.addr == "" || c.dir == "" {
		return nil, fmt.Errorf("up-cluster.sh --name %s printed no KAFKA_BROKERS or KAFKA_CLUSTER_STATE line:\n%s", name, stdout.String())
	}
	raw, err := os.ReadFile(filepath.Join(c.dir, "cluster"))
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || n < 1 {
		return nil, fmt.Errorf("%s/cluster: %q", c.dir, raw)
	}
	for i := 1; i <= n; i++ {
		d := filepath.Join(c.dir, fmt.Sprintf("n%d", i))
		addr, err := os.ReadFile(filepath.Join(d, "broker"))
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, &broker{name: fmt.Sprintf("%s/n%d", name, i), tv: tv, dir: d, addr: strings.TrimSpace(string(addr)), kafka: kafkaDir})
	}
	return c, nil
}

// down stops every node with down.sh (which removes the state dir).
func (c *cluster) down() error {
	out, err := exec.Command("bash", filepath.Join(c.kafka, "down.sh"), "--name", c.name).CombinedOutput()
	for _, n := range c.nodes {
		n.mu.Lock()
		done := n.done
		n.mu.Unlock()
		if done != nil {
			select {
			case <-done:
			case <-time.After(40 * time.Second):
			}
		}
	}
	if err != nil {
		return fmt.Errorf("down.sh --name %s: %v: %s", c.name, err, out)
	}
	return nil
}

// node returns the node with the given id (1-based, as node.id).
func (c *cluster) node(id int32) (*broker, error) {
	if id < 1 || int(id) > len(c.nodes) {
		return nil, fmt.Errorf("cluster %s has no node %d", c.name, id)
	}
	return c.nodes[id-1], nil
}

func (c *cluster) client(opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(c.addr, ",")...), kgo.RetryTimeout(5 * time.Second)}, opts...)...)
}

// waitInSync polls until the metadata lists every node and every partition
// of topics has a leader and all its replicas in sync (so that the next
// round may take any one node away without leaving a partition below
// min.insync.replicas), or fails after wait.
func (c *cluster) waitInSync(ctx context.Context, wait time.Duration, topics ...string) error {
	cl, err := c.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var last error
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		md, err := adm.Metadata(rctx, topics...)
		cancel()
		if err != nil {
			last = err
			continue
		}
		last = inSync(md, len(c.nodes), topics)
		if last == nil {
			return nil
		}
	}
	return fmt.Errorf("cluster %s not in sync after %v: %v", c.name, wait, last)
}

// inSync says what keeps md from a fully replicated cluster of n brokers:
// a missing broker, a partition without a leader, or one whose in-sync
// replicas are fewer than its replicas.
func inSync(md kadm.Metadata, n int, topics []string) error {
	if len(md.Brokers) != n {
		return fmt.Errorf("%d brokers in the metadata, want %d", len(md.Brokers), n)
	}
	for _, name := range topics {
		td, ok := md.Topics[name]
		if !ok {
			return fmt.Errorf("topic %s not in the metadata", name)
		}
		if td.Err != nil {
			return fmt.Errorf("%s: %v", name, td.Err)
		}
		for _, p := range td.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return fmt.Errorf("%s[%d]: leader %d, %v", name, p.Partition, p.Leader, p.Err)
			}
			if len(p.ISR) < len(p.Replicas) {
				return fmt.Errorf("%s[%d]: in-sync replicas %v of %v", name, p.Partition, p.ISR, p.Replicas)
			}
		}
	}
	return nil
}

// checkTopology checks that c is the production topology the cluster
// variant claims: every node a broker in the metadata, the internal topics
// (created here by first use: a transactional id and a group commit) with
// replication factor 3 and min.insync.replicas 2, a topic created without a
// replication factor likewise, and the partition leaders and the group and
// transaction coordinators spread over every node.
func checkTopology(ctx context.Context, c *cluster) error {
	n := len(c.nodes)
	uniq := strconv.FormatInt(time.Now().UnixNano(), 36)
	tcl, err := c.client(kgo.TransactionalID("topology-"+uniq), kgo.TransactionTimeout(10*time.Second))
	if err != nil {
		return err
	}
	defer tcl.Close()
	if _, _, err := tcl.ProducerID(ctx); err != nil {
		return fmt.Errorf("init producer id (creates __transaction_state): %v", err)
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topic := "topology-" + uniq
	if _, err := adm.CreateTopic(ctx, int32(n), -1, nil, topic); err != nil {
		return fmt.Errorf("create %s without a replication factor: %v", topic, err)
	}
	defer adm.DeleteTopic(context.Background(), topic) //nolint:errcheck
	var offs kadm.Offsets
	offs.AddOffset(topic, 0, 0, -1)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		resp, err := adm.CommitOffsets(ctx, "topology-"+uniq, offs)
		if err == nil {
			err = resp.Error()
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("group offset commit (creates __consumer_offsets): %v", err)
		}
	}
	topics := []string{topic, "__consumer_offsets", "__transaction_state"}
	if err := c.waitInSync(ctx, 2*time.Minute, topics...); err != nil {
		return err
	}
	md, err := adm.Metadata(ctx, topics...)
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range topics {
		leaders := map[int32]bool{}
		for _, p := range md.Topics[name].Partitions {
			leaders[p.Leader] = true
			if len(p.Replicas) != n {
				errs = append(errs, fmt.Errorf("%s[%d]: replicas %v, want %d", name, p.Partition, p.Replicas, n))
			}
		}
		if len(leaders) != n {
			errs = append(errs, fmt.Errorf("%s: leaders on nodes %v only, want all %d", name, keys(leaders), n))
		}
	}
	cfgs, err := adm.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		return err
	}
	for _, rc := range cfgs {
		v := ""
		for _, cv := range rc.Configs {
			if cv.Key == "min.insync.replicas" {
				v = cv.MaybeValue()
			}
		}
		if v != "2" {
			errs = append(errs, fmt.Errorf("%s: min.insync.replicas %q, want 2 (%v)", rc.Name, v, rc.Err))
		}
	}
	// Coordinators: the partition of __transaction_state (or
	// __consumer_offsets) a key hashes to is led by its coordinator; 30
	// keys land on every node with near certainty (10 partitions, leaders
	// on every node, checked above).
	var ids []string
	for i := range 30 {
		ids = append(ids, fmt.Sprintf("topology-%s-%d", uniq, i))
	}
	for kind, resp := range map[string]kadm.FindCoordinatorResponses{
		"transaction": adm.FindTxnCoordinators(ctx, ids...),
		"group":       adm.FindGroupCoordinators(ctx, ids...),
	} {
		nodes := map[int32]bool{}
		for _, r := range resp {
			if r.Err != nil {
				errs = append(errs, fmt.Errorf("%s coordinator of %s: %v", kind, r.Name, r.Err))
				continue
			}
			nodes[r.NodeID] = true
		}
		if len(nodes) != n {
			errs = append(errs, fmt.Errorf("%s coordinators of 30 keys on nodes %v only, want all %d", kind, keys(nodes), n))
		}
	}
	if err := tcl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func keys[K interface{ ~int32 | ~string }, V any](m map[K]V) []K {
	var ks []K
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// TestClusterTopology starts a cluster and checks it is one (checkTopology):
// CHAOS=1 or where the real-broker tests run, like TestChaos.
// CHAOS_CLUSTER_NAME reuses a cluster already started under that name by
// up-cluster.sh (left running).
func TestClusterTopology(t *testing.T) {
	c := chaosCluster(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := checkTopology(ctx, c); err != nil {
		t.Fatal(err)
	}
}

// chaosCluster starts the cluster of transaction version tv for a test (and
// stops it at its end), or reuses the one named by CHAOS_CLUSTER_NAME.
func chaosCluster(t *testing.T, tv int) *cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("the cluster tests are not short")
	}
	if os.Getenv("CHAOS") != "1" {
		kafkatest.Brokers(t, tv)
	}
	kafkaDir, err := filepath.Abs("../kafka")
	if err != nil {
		t.Fatal(err)
	}
	name, reuse := os.LookupEnv("CHAOS_CLUSTER_NAME")
	if !reuse {
		name = fmt.Sprintf("chaos-cluster-tv%d-%d", tv, os.Getpid())
	}
	var c *cluster
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		c, err = upCluster(ctx, kafkaDir, name, tv)
		cancel()
		if err == nil {
			break
		}
		if attempt == 2 {
			t.Fatal(err)
		}
		t.Logf("starting the cluster failed, retrying: %v", err)
		time.Sleep(5 * time.Second)
	}
	if !reuse {
		t.Cleanup(func() {
			if err := c.down(); err != nil {
				t.Log(err)
			}
		})
	}
	t.Logf("cluster %s (transaction.version=%d) at %s, state %s", name, tv, c.addr, c.dir)
	return c
}
