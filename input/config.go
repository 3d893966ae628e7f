package input

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/connect-eos/connect-eos/internal/kafkaconf"
)

// tp names one partition of one topic.
type tp struct {
	Topic     string
	Partition int32
}

func (p tp) String() string { return p.Topic + ":" + strconv.Itoa(int(p.Partition)) }

// topicSel is one parsed `topics` entry set for a topic: all partitions, or
// the pinned ones.
type topicSel struct {
	all        bool
	partitions map[int32]bool
}

// config is the parsed kafka_native config. Tests build it through the spec
// (newInputFromParsed) so that defaults stay in one place.
type config struct {
	conn *kafkaconf.Conn

	topics        map[string]*topicSel
	topicOrder    []string // the topics read, sorted; the patterns with regexp_topics
	regexpTopics  bool
	patterns      []*regexp.Regexp // regexp_topics: anchored, matched against whole names
	discovery     time.Duration    // partition_discovery_interval (unbounded reads)
	group         string
	membership    bool
	instanceID    string // static membership, with membership
	rack          string
	revokeTimeout time.Duration
	// session, rebalance and heartbeat are the group's timeouts
	// (group_membership only).
	session, rebalance, heartbeat time.Duration
	readCommitted                 bool

	start        string
	startOffsets map[tp]int64
	startMillis  int64
	reset        string
	resetSet     bool // reset_offset was written (else its default applies)

	stop           string
	stopOffsets    map[tp]int64
	stopMillis     int64
	stopAtHWM      bool
	hwmWaitTimeout time.Duration

	tombstones string
	format     string // formatMessage or formatArrow

	maxBatchRecords   int
	maxBatchBytes     int
	maxPartitionBytes int32
	maxBufferedBytes  int64
	maxBufferedTotal  int64
	maxDecompressed   int

	commitPeriod        time.Duration
	stallWarning        time.Duration
	connectTimeout      time.Duration
	unknownTopicGrace   time.Duration
	idleProbeInterval   time.Duration
	progressLogInterval time.Duration
}

// defaultReset is reset_offset when it is not written: none for a committed
// start, earliest otherwise.
func (c *config) defaultReset() string {
	if c.start == offsetCommitted {
		return offsetNone
	}
	return offsetEarliest
}

// commits reports whether the input commits offsets to its group: it has one,
// and does not stop at its committed offsets (then they are only read).
func (c *config) commits() bool { return c.group != "" && c.stop != offsetCommitted }

// discovers reports whether the read adds partitions found after its start:
// unbounded, assigned directly, with partition_discovery_interval set.
func (c *config) discovers() bool { return !c.bounded() && !c.membership && c.discovery > 0 }

// bounded reports whether the read has stop offsets and ends.
func (c *config) bounded() bool { return c.stop != offsetNone }

// parseTP parses a `topic:partition` key. A topic name may not hold a colon
// (Kafka allows only [a-zA-Z0-9._-]), so the last colon splits.
func parseTP(s string) (tp, error) {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 || i == len(s)-1 {
		return tp{}, fmt.Errorf("%q is not topic:partition", s)
	}
	p, err := strconv.ParseInt(s[i+1:], 10, 32)
	if err != nil || p < 0 {
		return tp{}, fmt.Errorf("%q: partition %q is not a non-negative number", s, s[i+1:])
	}
	return tp{Topic: s[:i], Partition: int32(p)}, nil
}

func parseTPMap(conf *service.ParsedConfig, field string) (map[tp]int64, error) {
	if !conf.Contains(field) {
		return nil, nil
	}
	m, err := conf.FieldIntMap(field)
	if err != nil {
		return nil, err
	}
	out := make(map[tp]int64, len(m))
	for k, v := range m {
		p, err := parseTP(k)
		if err != nil {
			return nil, fmt.Errorf("field %s: %w", field, err)
		}
		if v < 0 {
			return nil, fmt.Errorf("field %s: %s: offset %d is negative", field, k, v)
		}
		out[p] = int64(v)
	}
	return out, nil
}

// maxRangePartitions bounds a partition range of a topics entry.
const maxRangePartitions = 100000

// parseTopicEntry parses one topics entry (commas already split): `name`,
// `name:P` or `name:A-B` (partitions A to B, both included). A topic name may
// not hold a colon (Kafka allows only [a-zA-Z0-9._-]), so the last colon
// splits.
func parseTopicEntry(e string) (name string, parts []int32, err error) {
	i := strings.LastIndexByte(e, ':')
	if i < 0 {
		return e, nil, nil
	}
	name, spec := e[:i], e[i+1:]
	if name == "" || spec == "" {
		return "", nil, fmt.Errorf("%q is not topic, topic:partition or topic:first-last", e)
	}
	from, to, isRange := strings.Cut(spec, "-")
	a, errA := strconv.ParseInt(from, 10, 32)
	b := a
	var errB error
	if isRange {
		b, errB = strconv.ParseInt(to, 10, 32)
	}
	switch {
	case errA != nil || errB != nil || a < 0 || b < 0:
		return "", nil, fmt.Errorf("%q: partition %q is not a non-negative number or range", e, spec)
	case b < a:
		return "", nil, fmt.Errorf("%q: the range %d-%d is empty", e, a, b)
	case b-a >= maxRangePartitions:
		return "", nil, fmt.Errorf("%q: the range %d-%d is longer than %d partitions", e, a, b, maxRangePartitions)
	}
	for p := a; p <= b; p++ {
		parts = append(parts, int32(p))
	}
	return name, parts, nil
}

// parseTopics reads topics and regexp_topics.
func (c *config) parseTopics(conf *service.ParsedConfig) error {
	entries, err := conf.FieldStringList(knFieldTopics)
	if err != nil {
		return err
	}
	if c.regexpTopics, err = conf.FieldBool(knFieldRegexpTopics); err != nil {
		return err
	}
	for _, raw := range entries {
		if c.regexpTopics {
			// One expression per entry: a comma may be part of it
			// (orders-[0-9]{1,3}).
			e := strings.TrimSpace(raw)
			if e == "" {
				continue
			}
			re, err := regexp.Compile(`^(?:` + e + `)$`)
			if err != nil {
				return fmt.Errorf("field %s: %q is no regular expression: %w", knFieldTopics, e, err)
			}
			c.patterns = append(c.patterns, re)
			c.topicOrder = append(c.topicOrder, e)
			continue
		}
		for _, e := range strings.Split(raw, ",") {
			e = strings.TrimSpace(e)
			if e == "" {
				continue
			}
			name, parts, err := parseTopicEntry(e)
			if err != nil {
				return fmt.Errorf("field %s: %w", knFieldTopics, err)
			}
			ts, ok := c.topics[name]
			if !ok {
				ts = &topicSel{partitions: map[int32]bool{}}
				c.topics[name] = ts
				c.topicOrder = append(c.topicOrder, name)
			}
			if parts == nil {
				ts.all = true
			}
			for _, p := range parts {
				ts.partitions[p] = true
			}
		}
	}
	if len(c.topicOrder) == 0 {
		return fmt.Errorf("field %s: at least one topic is required", knFieldTopics)
	}
	for name, ts := range c.topics {
		if ts.all && len(ts.partitions) > 0 {
			return fmt.Errorf("field %s: topic %s is listed both whole and with pinned partitions", knFieldTopics, name)
		}
	}
	sort.Strings(c.topicOrder)
	return nil
}

// matches reports whether topic is read under regexp_topics: a pattern
// matches its whole name.
func (c *config) matches(topic string) bool {
	for _, re := range c.patterns {
		if re.MatchString(topic) {
			return true
		}
	}
	return false
}

// selOf returns how topic is read: its entries, or whole when a pattern
// matched it.
func (c *config) selOf(topic string) *topicSel {
	if ts, ok := c.topics[topic]; ok {
		return ts
	}
	return &topicSel{all: true}
}

func configFromParsed(conf *service.ParsedConfig) (*config, error) {
	c := &config{topics: map[string]*topicSel{}}
	var err error
	if c.conn, err = kafkaconf.FromParsed(conf); err != nil {
		return nil, err
	}

	if err := c.parseTopics(conf); err != nil {
		return nil, err
	}

	if c.group, err = conf.FieldString(knFieldConsumerGroup); err != nil {
		return nil, err
	}
	if c.membership, err = conf.FieldBool(knFieldGroupMembership); err != nil {
		return nil, err
	}
	if c.instanceID, err = conf.FieldString(knFieldInstanceID); err != nil {
		return nil, err
	}
	if c.rack, err = conf.FieldString(knFieldRackID); err != nil {
		return nil, err
	}
	if c.revokeTimeout, err = conf.FieldDuration(knFieldRevokeTimeout); err != nil {
		return nil, err
	}
	if c.session, err = conf.FieldDuration(knFieldSessionTimeout); err != nil {
		return nil, err
	}
	if c.rebalance, err = conf.FieldDuration(knFieldRebalanceTimeout); err != nil {
		return nil, err
	}
	if c.heartbeat, err = conf.FieldDuration(knFieldHeartbeatInterval); err != nil {
		return nil, err
	}
	if c.membership {
		// The lint rules' checks, for configs built without lint.
		if c.heartbeat >= c.session {
			return nil, fmt.Errorf("field %s (%v) must be shorter than %s (%v)", knFieldHeartbeatInterval, c.heartbeat, knFieldSessionTimeout, c.session)
		}
		if 2*c.revokeTimeout >= c.rebalance {
			return nil, fmt.Errorf("field %s (%v) must be less than half of %s (%v): a revoke waits up to it twice", knFieldRevokeTimeout, c.revokeTimeout, knFieldRebalanceTimeout, c.rebalance)
		}
	}
	iso, err := conf.FieldString(knFieldIsolationLevel)
	if err != nil {
		return nil, err
	}
	c.readCommitted = iso == isolationReadCommitted

	if c.start, err = conf.FieldString(knFieldStartOffset); err != nil {
		return nil, err
	}
	if c.startOffsets, err = parseTPMap(conf, knFieldStartOffsets); err != nil {
		return nil, err
	}
	var ms int
	if ms, err = conf.FieldInt(knFieldStartTimestamp); err != nil {
		return nil, err
	}
	c.startMillis = int64(ms)
	// reset_offset has no fixed default: none for a committed start (a
	// missing or out-of-range committed offset fails, as Flink's
	// committedOffsets() and Redpanda Connect's committed start do, rather
	// than re-reading a whole topic for a mistyped group), earliest
	// otherwise.
	if c.resetSet = conf.Contains(knFieldResetOffset); c.resetSet {
		if c.reset, err = conf.FieldString(knFieldResetOffset); err != nil {
			return nil, err
		}
	} else {
		c.reset = c.defaultReset()
	}
	if c.stop, err = conf.FieldString(knFieldStopOffset); err != nil {
		return nil, err
	}
	if c.stopOffsets, err = parseTPMap(conf, knFieldStopOffsets); err != nil {
		return nil, err
	}
	if ms, err = conf.FieldInt(knFieldStopTimestamp); err != nil {
		return nil, err
	}
	c.stopMillis = int64(ms)
	if c.stopAtHWM, err = conf.FieldBool(knFieldStopAtHWM); err != nil {
		return nil, err
	}
	if c.hwmWaitTimeout, err = conf.FieldDuration(knFieldStopHWMWaitTimeout); err != nil {
		return nil, err
	}
	if c.tombstones, err = conf.FieldString(knFieldTombstones); err != nil {
		return nil, err
	}
	if c.format, err = conf.FieldString(knFieldFormat); err != nil {
		return nil, err
	}
	if c.maxBatchRecords, err = conf.FieldInt(knFieldMaxBatchRecords); err != nil {
		return nil, err
	}
	var nb int64
	if nb, err = kafkaconf.FieldBytes(conf, knFieldMaxBatchBytes); err != nil {
		return nil, fmt.Errorf("field %s: %w", knFieldMaxBatchBytes, err)
	}
	c.maxBatchBytes = int(nb)
	var n int64
	if n, err = kafkaconf.FieldBytes(conf, knFieldMaxPartitionBytes); err != nil {
		return nil, fmt.Errorf("field %s: %w", knFieldMaxPartitionBytes, err)
	}
	if n < 1 || n > math.MaxInt32 {
		// The protocol field is an int32: a larger value would wrap.
		return nil, fmt.Errorf("field %s: %d is out of range [1, %d]", knFieldMaxPartitionBytes, n, math.MaxInt32)
	}
	c.maxPartitionBytes = int32(n)
	if n, err = kafkaconf.FieldBytes(conf, knFieldMaxBufferedBytes); err != nil {
		return nil, fmt.Errorf("field %s: %w", knFieldMaxBufferedBytes, err)
	}
	c.maxBufferedBytes = n
	if n, err = kafkaconf.FieldBytes(conf, knFieldMaxBufferedTotal); err != nil {
		return nil, fmt.Errorf("field %s: %w", knFieldMaxBufferedTotal, err)
	}
	c.maxBufferedTotal = n
	if c.maxDecompressed, err = conf.FieldInt(knFieldMaxDecompressed); err != nil {
		return nil, err
	}
	for _, d := range []struct {
		field string
		to    *time.Duration
	}{
		{knFieldCommitPeriod, &c.commitPeriod},
		{knFieldDiscovery, &c.discovery},
		{knFieldStallWarning, &c.stallWarning},
		{knFieldConnectTimeout, &c.connectTimeout},
		{knFieldUnknownTopicGrace, &c.unknownTopicGrace},
		{knFieldIdleProbeInterval, &c.idleProbeInterval},
		{knFieldProgressLogInterval, &c.progressLogInterval},
	} {
		if *d.to, err = conf.FieldDuration(d.field); err != nil {
			return nil, err
		}
	}
	return c, c.validate()
}

// validate repeats the lint rules (a config built in code is not linted) and
// checks what lint cannot.
func (c *config) validate() error {
	switch {
	case c.start == offsetCommitted && c.group == "":
		return fmt.Errorf("field %s: committed needs a %s", knFieldStartOffset, knFieldConsumerGroup)
	case c.stop == offsetCommitted && c.group == "":
		return fmt.Errorf("field %s: committed needs a %s", knFieldStopOffset, knFieldConsumerGroup)
	case c.stop == offsetCommitted && c.start == offsetCommitted:
		return fmt.Errorf("field %s: committed with %s committed reads nothing", knFieldStopOffset, knFieldStartOffset)
	case c.reset == offsetNone && c.start != offsetCommitted && c.start != offsetSpecific:
		return fmt.Errorf("field %s: none applies only to %s committed or specific", knFieldResetOffset, knFieldStartOffset)
	case c.start == offsetSpecific && len(c.startOffsets) == 0:
		return fmt.Errorf("field %s: specific needs %s", knFieldStartOffset, knFieldStartOffsets)
	case c.stop == offsetSpecific && len(c.stopOffsets) == 0:
		return fmt.Errorf("field %s: specific needs %s", knFieldStopOffset, knFieldStopOffsets)
	case c.start == offsetTimestamp && c.startMillis < 0:
		return fmt.Errorf("field %s: timestamp needs %s", knFieldStartOffset, knFieldStartTimestamp)
	case c.stop == offsetTimestamp && c.stopMillis < 0:
		return fmt.Errorf("field %s: timestamp needs %s", knFieldStopOffset, knFieldStopTimestamp)
	case c.stopAtHWM && c.stop != offsetLatest:
		return fmt.Errorf("field %s: applies only to %s latest", knFieldStopAtHWM, knFieldStopOffset)
	case c.instanceID != "" && !c.membership:
		return fmt.Errorf("field %s: static membership needs %s: true", knFieldInstanceID, knFieldGroupMembership)
	case c.membership && c.group == "":
		return fmt.Errorf("field %s: needs a %s", knFieldGroupMembership, knFieldConsumerGroup)
	case c.membership && c.stop != offsetNone:
		return fmt.Errorf("field %s: needs %s none (a bounded read never uses membership), got %s", knFieldGroupMembership, knFieldStopOffset, c.stop)
	case c.membership && c.start != offsetCommitted:
		return fmt.Errorf("field %s: needs %s committed, got %s", knFieldGroupMembership, knFieldStartOffset, c.start)
	case c.format == formatArrow && c.tombstones == tombstonesFail:
		return fmt.Errorf("field %s: fail cannot apply to one record of an Arrow message (format arrow): use emit (null values are kept) or drop", knFieldTombstones)
	case c.maxBatchRecords < 1:
		return fmt.Errorf("field %s: must be at least 1", knFieldMaxBatchRecords)
	case c.maxBatchBytes < 1:
		return fmt.Errorf("field %s: must be at least 1", knFieldMaxBatchBytes)
	case c.maxPartitionBytes < 1:
		return fmt.Errorf("field %s: must be at least 1", knFieldMaxPartitionBytes)
	case c.maxBufferedBytes < 1:
		return fmt.Errorf("field %s: must be at least 1", knFieldMaxBufferedBytes)
	case c.maxBufferedTotal < 1:
		return fmt.Errorf("field %s: must be at least 1", knFieldMaxBufferedTotal)
	case c.maxDecompressed < 1:
		return fmt.Errorf("field %s: must be at least 1", knFieldMaxDecompressed)
	case c.discovery < 0:
		return fmt.Errorf("field %s: must not be negative", knFieldDiscovery)
	case c.stallWarning < 0:
		return fmt.Errorf("field %s: must not be negative", knFieldStallWarning)
	case c.commitPeriod <= 0:
		return fmt.Errorf("field %s: must be positive", knFieldCommitPeriod)
	case c.connectTimeout <= 0:
		return fmt.Errorf("field %s: must be positive", knFieldConnectTimeout)
	case c.idleProbeInterval <= 0:
		return fmt.Errorf("field %s: must be positive", knFieldIdleProbeInterval)
	}
	if c.membership {
		for name, ts := range c.topics {
			if !ts.all {
				return fmt.Errorf("field %s: %s pins partitions, but with %s the group assigns them", knFieldTopics, name, knFieldGroupMembership)
			}
		}
	}
	for _, m := range []struct {
		field string
		offs  map[tp]int64
	}{{knFieldStartOffsets, c.startOffsets}, {knFieldStopOffsets, c.stopOffsets}} {
		for p := range m.offs {
			if c.regexpTopics {
				if !c.matches(p.Topic) {
					return fmt.Errorf("field %s: %s: no pattern of %s matches the topic", m.field, p, knFieldTopics)
				}
				continue
			}
			ts, ok := c.topics[p.Topic]
			if !ok || (!ts.all && !ts.partitions[p.Partition]) {
				return fmt.Errorf("field %s: %s is not among the partitions read (field %s)", m.field, p, knFieldTopics)
			}
		}
	}
	return nil
}
