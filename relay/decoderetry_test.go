package relay

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/replication"
)

func stopAt(lsn uint64, err error) error {
	return &replication.StopError{LSN: pglogrepl.LSN(0x1000000 + lsn), Err: err}
}

// TestDecodeErrorsRetryBounded: an undecodable pgoutput message is retried
// (the relay reconnects, the slot replays it: a message garbled on its way
// decodes then) but the same failure at the same place three times in a
// row stops the relay; schema problems and a renamed outbox stop at once.
func TestDecodeErrorsRetryBounded(t *testing.T) {
	r := &Relay{}
	garbled := stopAt(1, &replication.WALDecodeError{Err: errors.New("pgoutput: message truncated")})
	for i := 1; i < maxDecodeAttempts; i++ {
		if err := r.classifyStreamErr(garbled); poison.IsPermanent(err) || err == nil {
			t.Fatalf("attempt %d: %v is permanent, want a reconnect", i, err)
		}
	}
	err := r.classifyStreamErr(garbled)
	if !poison.IsPermanent(err) || !strings.Contains(err.Error(), "failed to decode 3 times") || !strings.Contains(err.Error(), "message truncated") {
		t.Fatalf("third failure at the same place: %v, want permanent", err)
	}

	// Another message, or an attempt that ended otherwise, starts over.
	r = &Relay{}
	for i := 0; i < 2*maxDecodeAttempts; i++ {
		if err := r.classifyStreamErr(stopAt(uint64(i), &replication.WALDecodeError{Err: errors.New("pgoutput: message truncated")})); poison.IsPermanent(err) {
			t.Fatalf("failures at different positions stopped the relay: %v", err)
		}
	}
	r = &Relay{}
	for i := 0; i < 2*maxDecodeAttempts; i++ {
		if err := r.classifyStreamErr(garbled); poison.IsPermanent(err) {
			t.Fatalf("attempt %d: %v", i, err)
		}
		_ = r.classifyStreamErr(fmt.Errorf("replication receive: %w", errors.New("connection reset")))
	}

	for _, err := range []error{
		stopAt(1, &replication.RelationError{Table: "public.outbox", Problems: []string{`missing column "aggregate_id"`}}),
		stopAt(1, &replication.RowError{Column: "*", Reason: "tuple has 2 columns, relation 9"}),
		&replication.StopError{Err: &replication.RelationRenamedError{OID: 1, Old: "public.outbox", New: "public.outbox_v2"}},
	} {
		if got := (&Relay{}).classifyStreamErr(err); !poison.IsPermanent(got) {
			t.Errorf("%v: not permanent", err)
		}
	}
	if err := (&Relay{}).classifyStreamErr(nil); err != nil {
		t.Errorf("nil became %v", err)
	}
}
