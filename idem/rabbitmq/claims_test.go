package rabbitmq_test

import (
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
	"github.com/idemgen/idemgen/idem/rabbitmq"
)

// claimAdapter declares a work queue with the retry delay of the claim
// scenarios.
func claimAdapter(t *testing.T) brokertest.ClaimAdapter {
	url := amqpURL(t)
	top := rabbitmq.Topology{Queue: uniqueName(t), RetryDelay: brokertest.KillRetry}
	declare(t, url, top)
	ch := channel(t, url)
	return brokertest.ClaimAdapter{
		Env:         map[string]string{"url": url, "queue": top.Queue},
		Publish:     func(t testing.TB, id string, _ int, body []byte) { publish(t, ch, top.Queue, id, body) },
		DeadLetters: func(t testing.TB) int { return depth(t, url, top.DeadLetterQueue()) },
		Pending:     func(t testing.TB) int { return depth(t, url, top.Queue) + depth(t, url, top.RetryQueue()) },
	}
}

func claimConsumer(t testing.TB, env map[string]string, h idem.Handler[idem.Message[brokertest.Order]], retry time.Duration, opts ...consumer.Option) brokertest.Runner {
	return rabbitmq.NewConsumer(env["url"], rabbitmq.Topology{Queue: env["queue"], RetryDelay: retry}, h, opts...)
}

// TestConsumerClaims: a key in progress is a wait, not a failure, and a
// missing table stops the consumer at once (see brokertest.Claims).
func TestConsumerClaims(t *testing.T) {
	brokertest.Claims(t, claimAdapter, claimConsumer)
}
