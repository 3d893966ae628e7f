package output

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// TestFieldFastPathsAgreeWithBenthos: the static and metadata-only fast
// paths give what Benthos' interpolation gives, for every expression shape
// and metadata value type, errors included (a value of another type, or a
// missing key, goes through Benthos).
func TestFieldFastPathsAgreeWithBenthos(t *testing.T) {
	exprs := []string{`${! meta("k") }`, `${!meta("k")}`, `${! @k }`, `${! metadata("k") }`, `static-topic`, `7`,
		`${! meta("k") }-suffix`, `${! @k.string().uppercase() }`, `${! meta("missing") }`, `${! @missing }`}
	values := []any{"abc", "", "42", "-3", []byte("xyz"), []byte{}, int64(0), int64(3), int64(-1), int64(1 << 40), int(7), int32(5), true, 1.5, nil, map[string]any{"a": 1}}
	for _, expr := range exprs {
		is, err := service.NewInterpolatedString(expr)
		if err != nil {
			t.Fatal(err)
		}
		f := newField(is, expr)
		var batch service.MessageBatch
		for _, v := range values {
			m := service.NewMessage([]byte("body"))
			if v != nil {
				m.MetaSetMut("k", v)
			}
			batch = append(batch, m)
		}
		fast, ref := f.over(batch), batch.InterpolationExecutor(is)
		for i, v := range values {
			name := fmt.Sprintf("%s with %T %v", expr, v, v)
			gs, gerr := fast.str(i)
			ws, werr := ref.TryString(i)
			if gs != ws || (gerr == nil) != (werr == nil) {
				t.Errorf("%s: str %q, %v; Benthos %q, %v", name, gs, gerr, ws, werr)
			}
			gb, gerr := fast.bytes(i)
			wb, werr := ref.TryBytes(i)
			if string(gb) != string(wb) || (gerr == nil) != (werr == nil) {
				t.Errorf("%s: bytes %q, %v; Benthos %q, %v", name, gb, gerr, wb, werr)
			}
			gp, gerr := fast.int32(i)
			wp, werr := int32(0), werr
			if werr == nil {
				var p int64
				p, werr = strconv.ParseInt(ws, 10, 32)
				wp = int32(p)
			}
			if gp != wp || (gerr == nil) != (werr == nil) {
				t.Errorf("%s: partition %d, %v; Benthos %d, %v", name, gp, gerr, wp, werr)
			}
		}
		if exp := f.isStatic || f.metaKey != ""; exp != (expr != `${! meta("k") }-suffix` && expr != `${! @k.string().uppercase() }`) {
			t.Errorf("%s: fast path %v", expr, exp)
		}
	}
}
