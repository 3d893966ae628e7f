package output

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// In dedupe mode a message held back behind one that cannot be written is
// owed its replay also when its batch joins no epoch: when the batch's other
// messages are all replays (a restart re-reads a batch whose writable
// messages committed before) or when nothing of it is writable. Otherwise a
// later position of the key commits first, and the held-back message's
// replay is then dropped as below the key's committed position and
// acknowledged, never written (I2, I4).
func TestDedupeHeldBackOwedWithoutAnEpoch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		restart bool
	}{
		{name: "replay batch after a restart", restart: true},
		{name: "nothing writable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			res := newResources()
			yaml := baseYAML(c.ListenAddrs(), "held-"+fmt.Sprint(tc.restart), "max_message_bytes: 600\n"+dedupeExtra)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			o := newTestOutput(t, res, yaml)
			if tc.restart {
				// a@2 cannot be written and holds a@3 back; a@1, b@1 and
				// b@2 commit. Then the process stops before the input
				// acknowledged anything, and the next one reads the batch
				// again.
				b := append(posBatch("a", 1, 3), posBatch("b", 1, 2)...)
				b[1].SetBytes(make([]byte, 1000))
				if err := o.WriteBatch(ctx, b); err == nil {
					t.Fatal("a batch holding an unwritable message was acknowledged whole")
				}
				_ = o.Close(ctx)
				o = newTestOutput(t, res, yaml)
				b = append(posBatch("a", 1, 3), posBatch("b", 1, 2)...)
				b[1].SetBytes(make([]byte, 1000))
				if err := o.WriteBatch(ctx, b); err == nil {
					t.Fatal("the replayed batch was acknowledged whole: a@3 was held back")
				}
			} else {
				b := posBatch("a", 2, 3)
				b[0].SetBytes(make([]byte, 1000))
				if err := o.WriteBatch(ctx, b); err == nil {
					t.Fatal("[a@2 unwritable, a@3] acknowledged whole")
				}
			}
			// A batch read ahead arrives before the replay of a@3.
			if err := o.WriteBatch(ctx, posBatch("a", 4, 4)); !errors.Is(err, ErrAwaitingReplay) {
				t.Fatalf("a@4 before the replay of a@3: %v, want ErrAwaitingReplay", err)
			}
			if err := o.WriteBatch(ctx, posBatch("a", 3, 3)); err != nil {
				t.Fatalf("replay of a@3: %v", err)
			}
			if err := o.WriteBatch(ctx, posBatch("a", 4, 4)); err != nil {
				t.Fatalf("a@4 after the replay of a@3: %v", err)
			}
			got := counts(t, c.ListenAddrs())
			for _, v := range []string{"a@3", "a@4"} {
				if got[v] != 1 {
					t.Fatalf("%s visible %d times, want 1: %v", v, got[v], got)
				}
			}
			if got["a@2"] != 0 {
				t.Fatalf("the unwritable a@2 is visible: %v", got)
			}
		})
	}
}
