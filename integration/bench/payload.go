package main

import (
	"fmt"
	"strconv"
	"strings"
)

// Payloads of the compression rows. The throughput rows send one value for
// every record (payload), which a codec turns into almost nothing: a batch
// of copies of one value. What a codec does with real data depends on how
// much one record repeats of its neighbours, so the compression rows send
// order events as JSON, each record its own: field names and vocabulary
// repeat from record to record, ids, amounts and timestamps do not.

// payloadKinds are the -payload values: letters (one random upper-case
// value for every record, the throughput rows) and json (order events).
var payloadKinds = []string{"letters", "json"}

// jsonPoolSize is how many distinct records the json payload cycles
// through: more than a batch (1024 records), so that no batch holds a
// record twice.
const jsonPoolSize = 4096

// values are the record values the bench source sends in turn.
func values(kind string, size int) ([][]byte, error) {
	switch kind {
	case "", "letters":
		return [][]byte{payload(size)}, nil
	case "json":
		out := make([][]byte, jsonPoolSize)
		g := &orderGen{x: 88172645463325252}
		for i := range out {
			v, err := g.order(i, size)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown payload %q (one of %s)", kind, strings.Join(payloadKinds, ", "))
}

// orderGen makes order events from a xorshift generator (the same records
// on every run).
type orderGen struct{ x uint64 }

func (g *orderGen) next() uint64 {
	g.x ^= g.x << 13
	g.x ^= g.x >> 7
	g.x ^= g.x << 17
	return g.x
}

func (g *orderGen) pick(words []string) string { return words[g.next()%uint64(len(words))] }

var (
	orderStatus = []string{"created", "paid", "packed", "shipped", "delivered", "cancelled"}
	currencies  = []string{"EUR", "USD", "GBP", "SEK", "CHF"}
	channels    = []string{"web", "ios", "android", "store", "partner"}
	firstNames  = []string{"Anna", "Ben", "Chloe", "David", "Emma", "Felix", "Grace", "Hugo", "Ines", "Jonas", "Kira", "Liam", "Mia", "Noah", "Olga", "Paul"}
	lastNames   = []string{"Meyer", "Schmidt", "Martin", "Garcia", "Rossi", "Novak", "Jensen", "Kowalski", "Dubois", "Silva", "Brown", "Nakamura"}
	streets     = []string{"Main Street", "Station Road", "Church Lane", "Mill Road", "Park Avenue", "High Street", "Harbour Way", "Oak Drive"}
	cities      = []string{"Berlin", "Lyon", "Leeds", "Porto", "Malmo", "Graz", "Utrecht", "Turin", "Krakow", "Aarhus"}
	countries   = []string{"DE", "FR", "GB", "PT", "SE", "AT", "NL", "IT", "PL", "DK"}
	products    = []string{"espresso beans 1kg", "oat milk 6x1l", "ceramic mug", "pour-over kettle", "paper filters 100", "grinder burr set", "travel tumbler", "cold brew jar", "tea sampler", "milk frother"}
	colours     = []string{"BLK", "WHT", "RED", "BLU", "GRN", "GRY"}
	noteWords   = []string{"please", "leave", "the", "parcel", "at", "front", "door", "ring", "bell", "twice", "gift", "wrap", "no", "invoice", "in", "box", "deliver", "after", "5pm", "call", "on", "arrival", "side", "entrance", "neighbour", "number", "12", "can", "accept"}
)

// order is one order event of exactly size bytes: the fields that fit, in
// order, then a free-text note that pads it to size.
func (g *orderGen) order(i, size int) ([]byte, error) {
	base := int64(1764600000000) + int64(i)*37 + int64(g.next()%30)
	id := fmt.Sprintf("o-%08x", uint32(g.next()))
	fields := []string{
		`"id":"` + id + `"`,
		`"ts":` + strconv.FormatInt(base, 10),
		`"cust":` + strconv.Itoa(10000+int(g.next()%90000)),
		`"st":"` + g.pick(orderStatus) + `"`,
		`"amt":` + strconv.Itoa(100+int(g.next()%99900)),
		`"cur":"` + g.pick(currencies) + `"`,
		`"ch":"` + g.pick(channels) + `"`,
	}
	if size >= 512 {
		first, last := g.pick(firstNames), g.pick(lastNames)
		fields = append(fields,
			`"customer":{"name":"`+first+" "+last+`","email":"`+strings.ToLower(first)+"."+strings.ToLower(last)+"@example.com"+`","since":"20`+fmt.Sprintf("%02d-%02d-%02d", 10+g.next()%16, 1+g.next()%12, 1+g.next()%28)+`"}`,
			`"ship_to":{"street":"`+strconv.Itoa(1+int(g.next()%200))+" "+g.pick(streets)+`","city":"`+g.pick(cities)+`","zip":"`+strconv.Itoa(10000+int(g.next()%89999))+`","country":"`+g.pick(countries)+`"}`,
		)
		fields = append(fields, `"payment":{"method":"`+g.pick([]string{"card", "paypal", "invoice", "sepa"})+`","auth":"`+fmt.Sprintf("%012x", g.next()&0xffffffffffff)+`"}`)
	}
	var b strings.Builder
	b.WriteByte('{')
	for j, f := range fields {
		// Room for this field, the separator, the closing brace and the
		// shortest note (`,"n":""`).
		if b.Len()+len(f)+1+len(`,"n":""}`) > size {
			break
		}
		if j > 0 {
			b.WriteByte(',')
		}
		b.WriteString(f)
	}
	if b.Len() == 1 {
		return nil, fmt.Errorf("json payload: %d bytes is too small for an order event", size)
	}
	// Line items while they fit (at 1 KiB about seven), so that the note
	// pads less than one item.
	if size >= 512 {
		const open, end = `,"items":[`, `]`
		n := 0
		for {
			item := fmt.Sprintf(`{"sku":"SKU-%04d-%s","name":"%s","qty":%d,"unit":%d}`,
				g.next()%10000, g.pick(colours), g.pick(products), 1+g.next()%5, 199+g.next()%9800)
			sep := open
			if n > 0 {
				sep = ","
			}
			if b.Len()+len(sep)+len(item)+len(end)+len(`,"n":""}`) > size {
				break
			}
			b.WriteString(sep + item)
			n++
		}
		if n > 0 {
			b.WriteString(end)
		}
	}
	b.WriteString(`,"n":"`)
	room := size - b.Len() - len(`"}`)
	var note strings.Builder
	for note.Len() < room {
		if note.Len() > 0 {
			note.WriteByte(' ')
		}
		note.WriteString(g.pick(noteWords))
	}
	b.WriteString(note.String()[:room])
	b.WriteString(`"}`)
	if b.Len() != size {
		return nil, fmt.Errorf("json payload: made %d bytes, not %d", b.Len(), size)
	}
	return []byte(b.String()), nil
}
