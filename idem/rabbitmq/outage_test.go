package rabbitmq_test

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/consumer"
	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
	"github.com/idemgen/idemgen/idem/rabbitmq"
	"github.com/idemgen/idemgen/idem/relay"
)

// TestRelayOutageLogIsBounded: a relay whose broker refuses connections for
// 20s, with 200 rows retried every few hundred milliseconds, logs the
// failing batch once and then a summary per interval (not a record per row
// and attempt), and one record when the broker is back and every row is
// published.
func TestRelayOutageLogIsBounded(t *testing.T) {
	const outage = 20 * time.Second
	url := amqpURL(t)
	db := database(t)
	top := rabbitmq.Topology{Queue: uniqueName(t)}
	declare(t, url, top)
	rows := orderRows(t, top.Queue, "outage", 0, 200)
	commitOutbox(t, db.Pool, rows)

	var refusing atomic.Bool
	refusing.Store(true)
	var refused atomic.Int64
	dial := func(network, addr string) (net.Conn, error) {
		if refusing.Load() {
			refused.Add(1)
			return nil, errors.New("connect: connection refused (the test's broker outage)")
		}
		return amqp.DefaultDial(10*time.Second)(network, addr)
	}
	logs, log := brokertest.NewLogs(t)
	pub := rabbitmq.NewPublisher(url, rabbitmq.WithConfig(amqp.Config{Dial: dial}), consumer.WithLogger(log))
	t.Cleanup(func() { pub.Close() })
	r := relay.New(db.Pool, pub, relay.WithID("outage"), relay.WithPollInterval(50*time.Millisecond),
		relay.WithBackoff(100*time.Millisecond, 400*time.Millisecond), relay.WithMaxAttempts(1000), relay.WithLogger(log))
	brokertest.Run(t, r)
	time.Sleep(outage)
	during := strings.Count(logs.String(), "\n")
	attempts := brokertest.QueryInt(t, db.Pool, `SELECT coalesce(sum(attempts), 0)::int FROM idem_outbox`)
	refusing.Store(false)
	waitFor(t, 30*time.Second, "every row published once the broker is back", func() bool { return pendingRows(t, db.Pool) == 0 })
	time.Sleep(200 * time.Millisecond)
	text := logs.String()
	total := strings.Count(text, "\n")
	t.Logf("relay against a refusing broker for %v: %d rows, %d failed attempts in all, %d connections refused; %d log records during the outage, %d in all (%d summaries, %d recovery records)",
		outage, len(rows), attempts, refused.Load(), during, total, strings.Count(text, "still failing"), strings.Count(text, "publishes again"))
	if during > 10 || strings.Count(text, "publishes again") != 1 {
		t.Errorf("%d log records during a %v outage, %d recovery records; want a handful (the first failure, a summary per 10s), and one recovery", during, outage, strings.Count(text, "publishes again"))
	}
}

// TestConsumerOutageLogIsBounded: a consumer whose handler fails for 12s
// (its database down, say), with 50 messages retried every 100ms, logs the
// first retry and then a summary per interval, not a record per retry, and
// one record when deliveries succeed again.
func TestConsumerOutageLogIsBounded(t *testing.T) {
	const outage = 12 * time.Second
	url := amqpURL(t)
	db := database(t)
	top := rabbitmq.Topology{Queue: uniqueName(t), RetryDelay: 100 * time.Millisecond}
	declare(t, url, top)
	ch := channel(t, url)
	for i := range 50 {
		id := fmt.Sprintf("down-%d", i)
		publish(t, ch, top.Queue, id, mustJSON(t, order{OrderID: id, Amount: 1}))
	}
	var down atomic.Bool
	down.Store(true)
	var failed atomic.Int64
	fail := func(idem.Message[order]) error {
		if down.Load() {
			failed.Add(1)
			return errors.New("the database is down (the test's outage)")
		}
		return nil
	}
	logs, log := brokertest.NewLogs(t)
	rec := &recorder{}
	stop := run(t, rabbitmq.NewConsumer(url, top, rec.Wrap(chargeInbox(db.Pool, fail), nil), consumer.WithLogger(log),
		consumer.WithMaxAttempts(1000), consumer.WithBatch(1, 0)))
	time.Sleep(outage)
	down.Store(false)
	waitFor(t, 30*time.Second, "every message processed once the outage ends", func() bool { return rec.Count(idem.Processed) == 50 })
	stop()
	text := logs.String()
	retries, summaries, recovered := strings.Count(text, "retry after the delay"), strings.Count(text, "still failing"), strings.Count(text, "succeed again")
	t.Logf("a consumer failing for %v: %d failed deliveries; %d retry records (%d of them summaries), %d recovery records", outage, failed.Load(), retries, summaries, recovered)
	if retries > 4 || recovered != 1 || failed.Load() < 100 {
		t.Errorf("%d retry records for %d failed deliveries, %d recovery records; want a handful, and one recovery", retries, failed.Load(), recovered)
	}
}
