package chaos

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	// The first InitProducerID creates __transaction_state; its new
	// partitions' leaders then load them and answer
	// COORDINATOR_LOAD_IN_PROGRESS meanwhile, for longer than the client's
	// retries on a loaded machine: a fresh client tries again until ctx
	// ends.
	var tcl *kgo.Client
	for attempt := 1; ; attempt++ {
		var err error
		if tcl, err = c.client(kgo.TransactionalID("topology-"+uniq), kgo.TransactionTimeout(10*time.Second)); err != nil {
			return err
		}
		if _, _, err = tcl.ProducerID(ctx); err == nil {
			defer tcl.Close()
			break
		}
		tcl.Close()
		if ctx.Err() != nil {
			return fmt.Errorf("init producer id (creates __transaction_state), %d attempts: %v", attempt, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
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
	// Leaders spread: right after a start (or a restart) a node may not
	// have its preferred leaderships yet; the cluster moves them back
	// (leader.imbalance.check.interval.seconds=10).
	var md kadm.Metadata
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(time.Second) {
		if md, err = adm.Metadata(ctx, topics...); err != nil {
			return err
		}
		spread := true
		for _, name := range topics {
			leaders := map[int32]bool{}
			for _, p := range md.Topics[name].Partitions {
				leaders[p.Leader] = true
			}
			spread = spread && len(leaders) == n
		}
		if spread || time.Now().After(deadline) {
			break
		}
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

// TestChaosCluster is the chaos suite's cluster variant: each run of
// CHAOS_CLUSTER_RUNS (default k2k/2to3 and dedupe/2to3) on a 3-node cluster
// of its own (up-cluster.sh) per transaction version of CHAOS_CLUSTER_TVS
// (default 2; `make test` runs that, 0,2 on demand), one version after the
// other. First the topology subtest checks that the cluster is one
// (checkTopology). Each run has CHAOS_CLUSTER_KILLS SIGKILLs of the copier
// (default 2) and one of each cluster round (CHAOS_CLUSTER_TXN_COORD_KILLS,
// _LEADER_KILLS, _GROUP_COORD_KILLS, _ROLLING; default 1 each), no SIGTERM,
// zombie or single-broker bounce (CHAOS_CLUSTER_SIGTERMS and
// CHAOS_CLUSTER_ZOMBIES add them), over CHAOS_CLUSTER_RECORDS (20000)
// records at CHAOS_CLUSTER_RATE (150 records/s; the dedupe run three
// times that, as TestChaos's); every other knob is TestChaos's. The judges are TestChaos's, and
// with every process stopped nothing may be left open in the output or the
// offsets topic (DescribeProducers).
// CHAOS_CLUSTER_NAME reuses a cluster already started under that name by
// up-cluster.sh (left running).
func TestChaosCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos suite is not short")
	}
	k := loadKnobs(t)
	// The rounds take 15 to 60 s each (a node's restart, every replica
	// back in sync): a slower copy keeps them under traffic, rather than
	// on a copy already waiting for the tail.
	k.records = envInt(t, "CHAOS_CLUSTER_RECORDS", 20000)
	k.rate = envInt(t, "CHAOS_CLUSTER_RATE", 150)
	k.kills = envInt(t, "CHAOS_CLUSTER_KILLS", 2)
	k.sigterms = envInt(t, "CHAOS_CLUSTER_SIGTERMS", 0)
	k.zombies = envInt(t, "CHAOS_CLUSTER_ZOMBIES", 0)
	k.brokerRestarts = 0
	k.cluster = clusterKnobs{
		txnCoordKills:   envInt(t, "CHAOS_CLUSTER_TXN_COORD_KILLS", 1),
		leaderKills:     envInt(t, "CHAOS_CLUSTER_LEADER_KILLS", 1),
		groupCoordKills: envInt(t, "CHAOS_CLUSTER_GROUP_COORD_KILLS", 1),
		rolling:         envInt(t, "CHAOS_CLUSTER_ROLLING", 1),
	}
	k.runs = []string{"k2k/2to3", "dedupe/2to3"}
	if v := os.Getenv("CHAOS_CLUSTER_RUNS"); v != "" {
		k.runs = strings.Split(v, ",")
	}
	if k.records < 100 {
		t.Fatalf("CHAOS_CLUSTER_RECORDS=%d: at least 100", k.records)
	}
	tvs := []int{2}
	if v := os.Getenv("CHAOS_CLUSTER_TVS"); v != "" {
		tvs = nil
		for _, s := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || (n != 0 && n != 2) {
				t.Fatalf("CHAOS_CLUSTER_TVS=%q: want 0, 2 or 0,2", v)
			}
			tvs = append(tvs, n)
		}
	}
	for _, tv := range tvs {
		t.Run(fmt.Sprintf("tv%d", tv), func(t *testing.T) {
			c := chaosCluster(t, tv)
			bin := binary(t)
			if !t.Run("topology", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				if err := checkTopology(ctx, c); err != nil {
					t.Fatal(err)
				}
			}) {
				t.FailNow()
			}
			b := &broker{name: c.name, tv: tv, dir: c.dir, addr: c.addr, kafka: c.kafka, cluster: c}
			for i, run := range k.runs {
				mode, variant, _ := strings.Cut(run, "/")
				t.Run(strings.ReplaceAll(run, "/", "_"), func(t *testing.T) {
					runChaos(t, k, b, bin, mode, variant, k.seed+uint64(tv)*1000+500+uint64(i))
				})
			}
		})
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

// The cluster variant's rounds: kill -9 of the node that is the transaction
// coordinator of a live slot, of a partition's leader, of the group
// coordinator (dedupe mode has no group: the leader of its state cache topic
// instead), and a rolling restart of every node (clean, one at a time, each
// back in sync before the next). Every kill -9 is followed by a restart of
// the node on its data after 0 to 2 s, and every round ends once every
// partition of the copy's topics and of the internal topics has all its
// replicas in sync again, so that the next round may take any node away.
const (
	evTxnCoordKill   event = "txn-coordinator-kill9"
	evLeaderKill     event = "leader-kill9"
	evGroupCoordKill event = "group-coordinator-kill9"
	evRolling        event = "rolling-restart"
)

// clusterKnobs are the cluster rounds per run (CHAOS_CLUSTER_*).
type clusterKnobs struct {
	txnCoordKills, leaderKills, groupCoordKills, rolling int
}

func (ck clusterKnobs) events() []event {
	var evs []event
	for range ck.txnCoordKills {
		evs = append(evs, evTxnCoordKill)
	}
	for range ck.leaderKills {
		evs = append(evs, evLeaderKill)
	}
	for range ck.groupCoordKills {
		evs = append(evs, evGroupCoordKill)
	}
	for range ck.rolling {
		evs = append(evs, evRolling)
	}
	return evs
}

// clusterStats counts the cluster rounds that landed and what they hit.
type clusterStats struct {
	txnCoordKills, leaderKills, groupCoordKills, rolling int
	targets                                              []string
	// failover: from each transaction coordinator's kill -9 until its
	// slot's transactional id shows a transaction that began after the
	// kill as CompleteCommit (the slot commits again).
	failover []time.Duration
}

// missed lists the planned cluster rounds that did not land.
func (s clusterStats) missed(want map[event]int) []string {
	var out []string
	for _, c := range []struct {
		ev  event
		got int
	}{{evTxnCoordKill, s.txnCoordKills}, {evLeaderKill, s.leaderKills}, {evGroupCoordKill, s.groupCoordKills}, {evRolling, s.rolling}} {
		if c.got < want[c.ev] {
			out = append(out, fmt.Sprintf("planned %d %s rounds, %d happened", want[c.ev], c.ev, c.got))
		}
	}
	return out
}

func (s clusterStats) summary() string {
	ms := make([]string, len(s.failover))
	for i, d := range s.failover {
		ms[i] = strconv.FormatInt(d.Milliseconds(), 10)
	}
	return fmt.Sprintf(" cluster_nodes=3 txn_coordinator_kill9=%d leader_kill9=%d group_coordinator_kill9=%d rolling_restarts=%d targets=[%s] coord_failover_ms=[%s]",
		s.txnCoordKills, s.leaderKills, s.groupCoordKills, s.rolling, strings.Join(s.targets, " "), strings.Join(ms, " "))
}

// clusterRound runs one cluster round of run c (process slot proc names
// the live process whose slot's coordinator a transaction coordinator kill
// targets).
func (cl *cluster) round(ctx context.Context, ev event, c runCfg, proc int, rng *rand.Rand, st *clusterStats) error {
	ccl, err := cl.client()
	if err != nil {
		return err
	}
	defer ccl.Close()
	adm := kadm.NewClient(ccl)
	topics := []string{c.in, c.out, c.state, "__consumer_offsets", "__transaction_state"}
	down := time.Duration(rng.IntN(2000)) * time.Millisecond
	find := func() (int32, string, error) {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		switch ev {
		case evTxnCoordKill:
			id := fmt.Sprintf("%s-%d-%d", c.txnID, max(proc, 0), rng.IntN(2))
			r := adm.FindTxnCoordinators(rctx, id)[id]
			return r.NodeID, "txn-coordinator(" + id + ")", r.Err
		case evGroupCoordKill:
			if c.mode == "dedupe" {
				md, err := adm.Metadata(rctx, c.state)
				if err != nil {
					return 0, "", err
				}
				return md.Topics[c.state].Partitions[0].Leader, "state-leader(" + c.state + "/0)", nil
			}
			r := adm.FindGroupCoordinators(rctx, c.group)[c.group]
			return r.NodeID, "group-coordinator", r.Err
		default:
			topic := []string{c.in, c.out}[rng.IntN(2)]
			md, err := adm.Metadata(rctx, topic)
			if err != nil {
				return 0, "", err
			}
			ps := md.Topics[topic].Partitions.Sorted()
			if len(ps) == 0 {
				return 0, "", fmt.Errorf("no partitions of %s in the metadata", topic)
			}
			p := ps[rng.IntN(len(ps))]
			which := "in"
			if topic == c.out {
				which = "out"
			}
			return p.Leader, fmt.Sprintf("leader(%s/%d)", which, p.Partition), nil
		}
	}
	if ev == evRolling {
		var order []string
		for _, i := range rng.Perm(len(cl.nodes)) {
			n := cl.nodes[i]
			if _, err := n.bounce(ctx, false, 0, c.in, c.out); err != nil {
				return fmt.Errorf("rolling restart of %s: %v", n.name, err)
			}
			if err := cl.waitInSync(ctx, 3*time.Minute, topics...); err != nil {
				return fmt.Errorf("rolling restart, after %s: %v", n.name, err)
			}
			order = append(order, fmt.Sprintf("n%d", i+1))
		}
		st.rolling++
		st.targets = append(st.targets, "rolling:"+strings.Join(order, ","))
		return nil
	}
	var id int32
	var what string
	for attempt := 0; ; attempt++ {
		if id, what, err = find(); err == nil && id >= 1 {
			break
		}
		if attempt == 20 {
			return fmt.Errorf("%s: finding the node to kill: node %d, %v", ev, id, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	n, err := cl.node(id)
	if err != nil {
		return err
	}
	txnID := strings.TrimSuffix(strings.TrimPrefix(what, "txn-coordinator("), ")")
	var measured chan time.Duration
	if ev == evTxnCoordKill {
		measured = make(chan time.Duration, 1)
		killed := time.Now()
		go func() { measured <- failoverTime(ctx, cl, txnID, killed) }()
	}
	if _, err := n.bounce(ctx, true, down, c.in, c.out); err != nil {
		return fmt.Errorf("%s of %s: %v", ev, n.name, err)
	}
	if err := cl.waitInSync(ctx, 3*time.Minute, topics...); err != nil {
		return fmt.Errorf("%s of %s: %v", ev, n.name, err)
	}
	st.targets = append(st.targets, fmt.Sprintf("%s:n%d", what, id))
	switch ev {
	case evTxnCoordKill:
		st.txnCoordKills++
		if d := <-measured; d > 0 {
			st.failover = append(st.failover, d)
		}
	case evLeaderKill:
		st.leaderKills++
	case evGroupCoordKill:
		st.groupCoordKills++
	}
	return nil
}

// failoverTime polls DescribeTransactions of id every 50 ms from killed
// until it shows a transaction that began after killed as CompleteCommit
// (the slot commits again after its coordinator's kill -9), and returns
// the time that took; 0 if it did not happen within 3 minutes.
func failoverTime(ctx context.Context, cl *cluster, id string, killed time.Time) time.Duration {
	ccl, err := cl.client()
	if err != nil {
		return 0
	}
	defer ccl.Close()
	adm := kadm.NewClient(ccl)
	for deadline := killed.Add(3 * time.Minute); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(50 * time.Millisecond) {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ds, err := adm.DescribeTransactions(rctx, id)
		cancel()
		if err != nil {
			continue
		}
		d, ok := ds[id]
		if ok && d.Err == nil && d.State == "CompleteCommit" && time.UnixMilli(d.StartTimestamp).After(killed) {
			return time.Since(killed)
		}
	}
	return 0
}

// openAtEnd lists every transaction still open in the partitions of topics
// (DescribeProducers): with every process stopped, nothing of the copy may
// be open, hanging or not. It waits up to wait for one still ending.
func openAtEnd(ctx context.Context, adm *kadm.Client, wait time.Duration, topics ...string) ([]string, error) {
	for deadline := time.Now().Add(wait); ; time.Sleep(time.Second) {
		set := kadm.TopicsSet{}
		for _, t := range topics {
			set[t] = nil
		}
		ds, err := adm.DescribeProducers(ctx, set)
		var open []string
		if err == nil {
			ds.EachPartition(func(p kadm.DescribedProducersPartition) {
				if p.Err != nil {
					open = append(open, fmt.Sprintf("%s/%d: %v", p.Topic, p.Partition, p.Err))
				}
			})
			ds.EachProducer(func(p kadm.DescribedProducer) {
				if p.CurrentTxnStartOffset >= 0 {
					open = append(open, fmt.Sprintf("%s/%d from %d: pid %d epoch %d", p.Topic, p.Partition, p.CurrentTxnStartOffset, p.ProducerID, p.ProducerEpoch))
				}
			})
			slices.Sort(open)
		}
		if (err == nil && len(open) == 0) || time.Now().After(deadline) || ctx.Err() != nil {
			return open, err
		}
	}
}

// processLogCounts counts the output's hanging-transaction log lines in the
// processes' logs: found and closed.
func processLogCounts(paths []string) (found, repaired int) {
	for _, p := range paths {
		found += len(grepLines(p, regexp.MustCompile(`kafka_eos: hanging transaction: `), 1000))
		repaired += len(grepLines(p, regexp.MustCompile(`kafka_eos: hanging transaction of .* closed`), 1000))
	}
	return found, repaired
}

// TestClusterRoundsPlannedAndCounted: the cluster rounds are in the plan,
// and a run where one did not land is failed by missedChaos.
func TestClusterRoundsPlannedAndCounted(t *testing.T) {
	k := knobs{kills: 2, cluster: clusterKnobs{txnCoordKills: 1, leaderKills: 1, groupCoordKills: 1, rolling: 1}}
	plan := k.plan(rand.New(rand.NewPCG(1, 2)))
	want := map[event]int{}
	for _, ev := range plan {
		want[ev]++
	}
	for _, ev := range []event{evTxnCoordKill, evLeaderKill, evGroupCoordKill, evRolling} {
		if want[ev] != 1 {
			t.Errorf("%s planned %d times, want 1 (plan %v)", ev, want[ev], plan)
		}
	}
	if want[evKill] != 2 || len(plan) != 6 {
		t.Errorf("plan %v: want 2 kills and 6 rounds", plan)
	}
	// The transaction coordinator's kill -9 is the first round of every
	// plan (its failover needs a copy still committing), and the SIGKILLs
	// do not all come after the cluster rounds (there the copy may wait at
	// the gate): over the seeds, some SIGKILL follows each cluster round
	// but the last.
	followed := map[int]bool{}
	for seed := range uint64(50) {
		evs := k.plan(rand.New(rand.NewPCG(seed, 2)))
		if evs[0] != evTxnCoordKill {
			t.Fatalf("seed %d: plan %v, want %s first", seed, evs, evTxnCoordKill)
		}
		nth := -1
		for i, ev := range evs {
			if ev != evKill {
				nth++
			} else if i > 0 && evs[i-1] != evKill {
				followed[nth] = true
			}
		}
	}
	for nth := range 3 {
		if !followed[nth] {
			t.Errorf("no plan of 50 has a SIGKILL right after cluster round %d", nth+1)
		}
	}
	st := stats{kills: 2, cl: clusterStats{txnCoordKills: 1, leaderKills: 1, groupCoordKills: 1}}
	if m := missedChaos(plan, st); len(m) != 1 || !strings.Contains(m[0], string(evRolling)) {
		t.Errorf("missedChaos without the rolling restart: %v", m)
	}
	st.cl.rolling = 1
	if m := missedChaos(plan, st); len(m) != 0 {
		t.Errorf("missedChaos with every round: %v", m)
	}
}
