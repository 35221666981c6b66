package deadletter

import "context"

// Target names the aggregate an operator acts on: the aggregate of
// EventID, or else the one of AggregateID (AggregateType is needed only
// when several aggregate types share the id).
type Target struct {
	EventID                    string
	AggregateID, AggregateType string
}

// Find resolves t to a quarantined aggregate. An event names its aggregate
// whatever its status; an aggregate id must have open rows (ErrEntryNotFound
// otherwise, ErrAmbiguous when it needs a type).
func (s *Store) Find(ctx context.Context, t Target) (Aggregate, error) {
	if t.EventID != "" {
		e, err := s.Get(ctx, t.EventID)
		if err != nil {
			return Aggregate{}, err
		}
		return e.Aggregate, nil
	}
	return s.FindAggregate(ctx, t.AggregateID, t.AggregateType)
}
