package kafkaproduce

import (
	"errors"

	"github.com/segmentio/kafka-go"
)

// ErrOperationNotAttempted is OPERATION_NOT_ATTEMPTED, which kafka-go
// names BrokerAuthorizationFailed (its pre-2.0 meaning):
// AddPartitionsToTxn answers it for the partitions it left alone because
// another one of the request failed.
const ErrOperationNotAttempted = kafka.BrokerAuthorizationFailed

// The error classes of the transactional calls. Each reads the broker's
// code wrapped in err (errors.As); a transport error is none of them.

// Fenced reports a refusal because a newer producer with the same
// transactional id took over (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED):
// this producer can do nothing more under its id.
func Fenced(err error) bool {
	var kerr kafka.Error
	return errors.As(err, &kerr) && (kerr == kafka.InvalidProducerEpoch || kerr == kafka.ProducerFenced)
}

// EndsTransaction reports a refusal of the producer's identity or of the
// transaction's state, besides Fenced: the broker will not accept a later
// batch or EndTxn of the open transaction.
func EndsTransaction(err error) bool {
	var kerr kafka.Error
	if !errors.As(err, &kerr) {
		return false
	}
	switch kerr {
	case kafka.InvalidTransactionState, kafka.OutOfOrderSequenceNumber, kafka.UnknownProducerId,
		kafka.InvalidProducerIDMapping, kafka.TransactionalIDAuthorizationFailed, kafka.TransactionCoordinatorFenced,
		kafka.InvalidTransactionTimeout:
		return true
	}
	return false
}

// CoordinatorMoving reports a transaction coordinator that moved or is
// loading its state (a broker died, a __transaction_state partition got
// a new leader): it heals within the cluster's election.
func CoordinatorMoving(err error) bool {
	return errors.Is(err, kafka.GroupCoordinatorNotAvailable) || errors.Is(err, kafka.NotCoordinatorForGroup) ||
		errors.Is(err, kafka.GroupLoadInProgress)
}

// CoordinatorBusy reports a coordinator answer that asks to try again:
// CoordinatorMoving, CONCURRENT_TRANSACTIONS (it is still completing the
// previous transaction) or REQUEST_TIMED_OUT. It says nothing of a
// transport error; the caller decides about those.
func CoordinatorBusy(err error) bool {
	return CoordinatorMoving(err) || errors.Is(err, kafka.ConcurrentTransactions) || errors.Is(err, kafka.RequestTimedOut)
}
