package rabbitmq_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
	"github.com/idemgen/idemgen/idem/rabbitmq"
)

// The tests run against a real RabbitMQ: IDEMGEN_TEST_AMQP_URL, the local
// node at 127.0.0.1:5672, or a throwaway node started from the machine's
// rabbitmq-server (brokertest.RabbitMQURL says which, and Main stops it).
func TestMain(m *testing.M) { os.Exit(brokertest.Main(m)) }

var amqpURL = brokertest.RabbitMQURL

// channel opens a connection and channel for the test's own declarations,
// publishing and inspection, closed when the test ends.
func channel(t testing.TB, url string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// uniqueName returns a name no other test run uses, for queues, exchanges and
// connection names.
func uniqueName(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	return "idemtest-" + name + "-" + hex.EncodeToString(b[:])
}

// declare declares top and deletes all of it when the test ends.
func declare(t testing.TB, url string, top rabbitmq.Topology) {
	t.Helper()
	ch := channel(t, url)
	if err := rabbitmq.Declare(ch, top); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := amqp.Dial(url)
		if err != nil {
			t.Errorf("delete the topology of %s: %v", top.Queue, err)
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Errorf("delete the topology of %s: %v", top.Queue, err)
			return
		}
		for _, q := range []string{top.Queue, top.RetryQueue(), top.DeadLetterQueue()} {
			if _, err := ch.QueueDelete(q, false, false, false); err != nil {
				t.Errorf("delete queue %s: %v", q, err)
			}
		}
		for _, x := range []string{top.DeadLetterExchange(), top.Exchange} {
			if x == "" {
				continue
			}
			if err := ch.ExchangeDelete(x, false, false); err != nil {
				t.Errorf("delete exchange %s: %v", x, err)
			}
		}
	})
}

// depth returns how many messages queue holds ready (not counting those
// delivered and not yet acked).
func depth(t testing.TB, url, queue string) int {
	t.Helper()
	ch := channel(t, url)
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("inspect queue %s: %v", queue, err)
	}
	return q.Messages
}

// drain takes every message queue holds, acking them.
func drain(t testing.TB, url, queue string) []amqp.Delivery {
	t.Helper()
	ch := channel(t, url)
	defer ch.Close()
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("get from %s: %v", queue, err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

// publish publishes body to queue on the default exchange, with confirms.
func publish(t testing.TB, ch *amqp.Channel, queue, id string, body []byte) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, true, false,
		amqp.Publishing{MessageId: id, ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(context.Background()); !ok || err != nil {
		t.Fatalf("publish %s to %s: not confirmed (%v)", id, queue, err)
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// closeConnectionsNamed closes, from the server side (rabbitmqctl
// close_connection, on the node the tests use), every connection whose
// connection_name starts with prefix, and returns how many it closed.
var closeConnectionsNamed = brokertest.CloseRabbitMQConnections

// conns records the network connections a consumer or publisher dials, so
// that a test can cut them.
type conns struct {
	mu  sync.Mutex
	all []net.Conn
}

func (c *conns) dial(network, addr string) (net.Conn, error) {
	conn, err := amqp.DefaultDial(10*time.Second)(network, addr)
	if err == nil {
		c.mu.Lock()
		c.all = append(c.all, conn)
		c.mu.Unlock()
	}
	return conn, err
}

// cut closes the socket of every connection dialled so far: the client
// side drops, the broker sees the connection gone and requeues what it had
// delivered and not been acked.
func (c *conns) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.all {
		conn.Close()
	}
}

// The consumer's database side, its recorded handler, its logs and the
// helpers that run it are the adapters' shared ones (idem/idemtest/brokertest):
// an inbox keyed on the AMQP message_id (key=ID of an idem.Message[order]) and a
// charge per order, counted in charged.

type (
	order    = brokertest.Order
	recorder = brokertest.Recorder
)

var (
	charges            = brokertest.NewCharges("test.rabbit.charge", "idem_rabbit_charge")
	chargeInbox        = charges.Inbox
	database           = charges.Database
	queryInt           = brokertest.QueryInt
	newLogs            = brokertest.NewLogs
	checkAttemptLogged = brokertest.CheckAttemptLogged
	run                = brokertest.Run
	waitFor            = brokertest.WaitFor
	describe           = brokertest.Describe
)
