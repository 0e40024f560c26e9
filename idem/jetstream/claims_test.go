package jetstream_test

import (
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
	idemjs "github.com/idemgen/idemgen/idem/jetstream"
)

// claimAdapter declares a topology whose ack wait is shorter than the
// claim scenarios' lease, so that the killed worker's messages come again
// while its claims are still live.
func claimAdapter(t *testing.T) brokertest.ClaimAdapter {
	url := natsURL(t)
	top := topology(t)
	top.AckWait = 2 * time.Second
	declare(t, url, top)
	_, js := connect(t, url)
	return brokertest.ClaimAdapter{
		Env:         map[string]string{"url": url, "stream": top.Stream, "subject": top.Subjects[0]},
		Publish:     func(t testing.TB, id string, _ int, body []byte) { publish(t, js, top.Subjects[0], id, body) },
		DeadLetters: func(t testing.TB) int { return len(streamMsgs(t, js, top.DeadLetterStreamName())) },
		Pending: func(t testing.TB) int {
			info := consumerInfo(t, js, top)
			return int(info.NumPending) + info.NumAckPending + info.NumRedelivered
		},
	}
}

func claimConsumer(t testing.TB, env map[string]string, h idem.Handler[idem.Message[brokertest.Order]], retry time.Duration, opts ...consumer.Option) brokertest.Runner {
	_, js := connect(t, env["url"])
	top := idemjs.Topology{Stream: env["stream"], Subjects: []string{env["subject"]}, Consumer: "billing"}
	return idemjs.NewConsumer(js, top, h, append(opts, idemjs.WithRetryDelay(retry, retry))...)
}

// TestConsumerKilledExternalWaitsForTheLease: see brokertest.KilledExternal.
func TestConsumerKilledExternalWaitsForTheLease(t *testing.T) {
	brokertest.KilledExternal(t, claimAdapter, claimConsumer)
}

// TestConsumerSlowCopiesInProgress: see brokertest.SlowCopies.
func TestConsumerSlowCopiesInProgress(t *testing.T) {
	brokertest.SlowCopies(t, claimAdapter(t), claimConsumer)
}

// TestConsumerMissingTableFailsFast: see brokertest.MissingTable.
func TestConsumerMissingTableFailsFast(t *testing.T) {
	brokertest.MissingTable(t, claimAdapter(t), claimConsumer)
}
