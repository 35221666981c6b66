package reconcile

import (
	"context"
	"errors"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/listoffsets"
)

// offsetsScript answers ListOffsets for partition 0 with its codes in turn,
// then with offset 42.
type offsetsScript struct {
	codes []int16
	calls int
}

func (s *offsetsScript) RoundTrip(_ context.Context, _ net.Addr, _ kafka.Request) (kafka.Response, error) {
	s.calls++
	p := listoffsets.ResponsePartition{Partition: 0, Offset: 42, Timestamp: -1}
	if len(s.codes) > 0 {
		p = listoffsets.ResponsePartition{Partition: 0, ErrorCode: s.codes[0], Offset: -1, Timestamp: -1}
		s.codes = s.codes[1:]
	}
	return &listoffsets.Response{Topics: []listoffsets.ResponseTopic{{Topic: "t", Partitions: []listoffsets.ResponsePartition{p}}}}, nil
}

// TestListOffsetsRetriesMovingLeader: a partition whose leader has not
// taken over yet (a topic just created) answers NOT_LEADER_OR_FOLLOWER or
// LEADER_NOT_AVAILABLE for a moment; reconcile asks again instead of
// failing. A lasting error is returned after the last attempt, and a
// permanent one at once.
func TestListOffsetsRetriesMovingLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ask := func(s *offsetsScript) (*kafka.ListOffsetsResponse, error) {
			c := &kafka.Client{Addr: kafka.TCP("b:9092"), Transport: s}
			return listOffsets(context.Background(), c, "t", offsetRequests("t", []int{0}, time.Time{}))
		}
		s := &offsetsScript{codes: []int16{int16(kafka.NotLeaderForPartition), int16(kafka.LeaderNotAvailable)}}
		res, err := ask(s)
		if err != nil || res.Topics["t"][0].Error != nil || res.Topics["t"][0].LastOffset != 42 || s.calls != 3 {
			t.Fatalf("after a moving leader: %+v, %v in %d calls, want offset 42 in 3", res, err, s.calls)
		}
		s = &offsetsScript{codes: make([]int16, 20)}
		for i := range s.codes {
			s.codes[i] = int16(kafka.NotLeaderForPartition)
		}
		res, err = ask(s)
		if err != nil || !errors.Is(res.Topics["t"][0].Error, kafka.NotLeaderForPartition) || s.calls != 8 {
			t.Fatalf("a lasting NOT_LEADER: %+v, %v in %d calls, want the error after 8", res, err, s.calls)
		}
		s = &offsetsScript{codes: []int16{int16(kafka.TopicAuthorizationFailed)}}
		res, err = ask(s)
		if err != nil || !errors.Is(res.Topics["t"][0].Error, kafka.TopicAuthorizationFailed) || s.calls != 1 {
			t.Fatalf("a refusal: %+v, %v in %d calls, want the error after 1", res, err, s.calls)
		}
	})
}
