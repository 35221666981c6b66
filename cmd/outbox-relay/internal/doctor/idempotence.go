package doctor

import (
	"errors"
	"fmt"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/kafkaproduce"
)

// The idempotent producer starts with InitProducerId without a
// transactional id: the broker hands out a producer id, which the relay
// then puts in each batch with per-partition sequence numbers. A broker
// with an authorizer answers it only for a principal with IDEMPOTENT_WRITE
// on the cluster (Kafka < 3.0) or WRITE on some topic (3.0+); without that
// every write of an idempotent relay fails, so doctor asks for a producer
// id just as the relay does. The id it takes writes nothing, so no
// partition keeps state for it.

// evalIdempotence adds the idempotent producer's finding: on (idempotent)
// it passes when InitProducerId gave a producer id (pid, err), fails when
// the broker refused the principal, and warns on any other error; off, it
// warns that a retried batch may be stored twice.
func evalIdempotence(idempotent bool, pid kafkaproduce.ProducerID, err error, r *Report) {
	const check = "idempotent producer"
	switch {
	case !idempotent:
		r.add(check, Warn, "off (--idempotent=false): writes are not idempotent, a retried produce request may store its batch twice",
			"run with --idempotent (the default) once the relay's principal may write idempotently (docs/kafka.md)")
	case errors.Is(err, kafka.ClusterAuthorizationFailed) || errors.Is(err, kafka.TransactionalIDAuthorizationFailed):
		r.add(check, Fail, "the relay's principal may not write idempotently: "+err.Error(),
			"grant IDEMPOTENT_WRITE on the cluster (Kafka < 3.0) or WRITE on the outbox topics (3.0+), "+
				"or run with --idempotent=false (retried writes may then be duplicated)")
	case err != nil:
		r.add(check, Warn, "cannot check that the relay's principal may write idempotently: "+err.Error(),
			"check the brokers' logs; if they refuse InitProducerId for good, run with --idempotent=false (retried writes may then be duplicated)")
	default:
		r.add(check, Pass, fmt.Sprintf("InitProducerId answered producer id %d, epoch %d: the relay's principal may write idempotently", pid.ID, pid.Epoch), "")
	}
}
