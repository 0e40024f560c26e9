package rabbitmq_test

import (
	"errors"
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
	r := idem.NewRelay(db.Pool, pub, idem.WithRelayID("outage"), idem.WithRelayPollInterval(50*time.Millisecond),
		idem.WithRelayBackoff(100*time.Millisecond, 400*time.Millisecond), idem.WithRelayMaxAttempts(1000), idem.WithRelayLogger(log))
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
