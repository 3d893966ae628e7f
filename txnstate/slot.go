package txnstate

import (
	"fmt"
	"regexp"
	"strconv"
)

// MinPoolSize is the smallest producer pool: epoch N+1 produces on one slot
// while epoch N commits on another.
const MinPoolSize = 2

// SlotID is the transactional.id of slot n of prefix: "<prefix>-<n>".
func SlotID(prefix string, n int) string { return prefix + "-" + strconv.Itoa(n) }

// SlotMatcher recognises the transactional.ids of one prefix exactly:
// `^<prefix>-(\d+)$` with n written canonically (no sign, no leading zero),
// so "<prefix>-01" or "<prefix>-1-x" (another deployment whose id extends
// ours) never match. A bare prefix match would let recovery fence another
// deployment's live instance.
type SlotMatcher struct {
	prefix string
	re     *regexp.Regexp
}

// NewSlotMatcher returns the matcher for prefix.
func NewSlotMatcher(prefix string) *SlotMatcher {
	return &SlotMatcher{prefix: prefix, re: regexp.MustCompile(`^` + regexp.QuoteMeta(prefix) + `-(\d+)$`)}
}

// Slot returns n if id is slot n of the prefix.
func (m *SlotMatcher) Slot(id string) (int, bool) {
	sub := m.re.FindStringSubmatch(id)
	if sub == nil {
		return 0, false
	}
	n, err := strconv.Atoi(sub[1])
	if err != nil || SlotID(m.prefix, n) != id {
		return 0, false
	}
	return n, true
}

// Orphan returns n if id is slot n of the prefix and n >= poolSize: a slot a
// larger pool used before and this one will not initialise.
func (m *SlotMatcher) Orphan(id string, poolSize int) (int, bool) {
	n, ok := m.Slot(id)
	if !ok || n < poolSize {
		return 0, false
	}
	return n, true
}

// SlotFor is the slot that carries epoch n in a pool of poolSize.
func SlotFor(epoch uint64, poolSize int) int {
	if poolSize < 1 {
		panic(fmt.Sprintf("txnstate: pool size %d", poolSize))
	}
	return int(epoch % uint64(poolSize))
}
