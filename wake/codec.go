package wake

import (
	"strconv"
	"strings"
	"time"
)

// kindLetters name the kinds in an encoded list, one letter a bit.
var kindLetters = [...]struct {
	k Kind
	c byte
}{{Tasks, 't'}, {Items, 'i'}, {Changed, 'c'}, {Cancel, 'x'}}

// MaxEncoded bounds Encode's output: an event list that would be longer
// is sent as its kinds alone, with any id.
const MaxEncoded = 4000

// Encode writes events as a short text without spaces, for a message
// between processes (a PostgreSQL NOTIFY payload): one entry per kind of
// each event, separated by commas, each its letter, the id, and "@" and
// the unix milliseconds of At when set. Ids are the store's (UUIDs): no
// commas, no "@", no spaces.
func Encode(evs []Event) string {
	var b strings.Builder
	var kinds Kind
	for _, ev := range evs {
		kinds |= ev.Kind
		for _, l := range kindLetters {
			if ev.Kind&l.k == 0 {
				continue
			}
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteByte(l.c)
			b.WriteString(ev.ID)
			if !ev.At.IsZero() {
				b.WriteByte('@')
				b.WriteString(strconv.FormatInt(ev.At.UnixMilli(), 10))
			}
		}
	}
	if b.Len() <= MaxEncoded {
		return b.String()
	}
	return Encode([]Event{{Kind: kinds}})
}

// Decode reads what Encode wrote; an entry it cannot read makes it answer
// false.
func Decode(s string) ([]Event, bool) {
	if s == "" {
		return nil, true
	}
	var out []Event
	for _, e := range strings.Split(s, ",") {
		if e == "" {
			return nil, false
		}
		var k Kind
		for _, l := range kindLetters {
			if e[0] == l.c {
				k = l.k
			}
		}
		if k == 0 {
			return nil, false
		}
		ev := Event{Kind: k, ID: e[1:]}
		if id, at, ok := strings.Cut(ev.ID, "@"); ok {
			ms, err := strconv.ParseInt(at, 10, 64)
			if err != nil {
				return nil, false
			}
			ev.ID, ev.At = id, time.UnixMilli(ms)
		}
		if strings.ContainsAny(ev.ID, " \x00") {
			return nil, false
		}
		out = append(out, ev)
	}
	return out, true
}
