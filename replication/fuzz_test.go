package replication

import (
	"testing"

	"github.com/jackc/pglogrepl"
)

// FuzzDecode feeds arbitrary bytes to the pgoutput decoder after a valid
// outbox relation: it must never panic, whatever the input claims.
func FuzzDecode(f *testing.F) {
	f.Add(beginBytes(1, 1))
	f.Add(commitBytes(1, 2))
	f.Add(relationBytes(1, "public", "outbox", outboxCols))
	f.Add(insertBytes(1, s("id"), s("t"), s("a"), s("1"), s("e"), s("1"), s("{}"), nil, s("now")))
	f.Add(insertBytes(1, s("id"), s("t"), nil, s("1"), s("e"), s("1"), s(`\xzz`), nil, s("now")))
	f.Add((&enc{}).u8(msgMessage).u8(0).u64(5).str(HeartbeatPrefix).u32(0).b)
	f.Fuzz(func(t *testing.T, data []byte) {
		st := newTestStream(&recSink{})
		st.progress = nopProgress{}
		_ = st.decode(1, relationBytes(1, "public", "outbox", outboxCols))
		_ = st.decode(2, beginBytes(10, 1))
		_ = st.decode(3, data)
		st.inTx = false
		_ = st.decode(4, data)
	})
}

type nopProgress struct{}

func (nopProgress) Flushed() pglogrepl.LSN         { return 0 }
func (nopProgress) AdvanceIdle(pglogrepl.LSN) bool { return false }
func (nopProgress) Idle() bool                     { return true }
func (nopProgress) Full() bool                     { return false }
func (nopProgress) Space() <-chan struct{}         { return nil }
