package rabbitmq_test

import (
	"context"
	"fmt"
	"log"
	"os"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest/brokertest"
	"github.com/idemgen/idemgen/idem/rabbitmq"
)

// exampleAMQPURL is the test node: IDEMGEN_TEST_AMQP_URL, else the local one.
func exampleAMQPURL() string {
	if url := os.Getenv(brokertest.AMQPURLEnv); url != "" {
		return url
	}
	return brokertest.DefaultAMQPURL
}

// A Publisher sends the relay's messages with publisher confirms. The
// outbox row's stable id travels as the AMQP message_id, so the next
// consumer can key on it.
func ExamplePublisher() {
	ctx := context.Background()
	url := exampleAMQPURL()
	conn, err := amqp.Dial(url)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		log.Fatal(err)
	}
	q, err := ch.QueueDeclare("example.charge-completed."+idem.OutgoingMessageID("example", []any{os.Getpid()}, 0), false, true, false, false, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer ch.QueueDelete(q.Name, false, false, false)

	// A destination without "/" is a routing key on the default exchange.
	pub := rabbitmq.NewPublisher(url)
	defer pub.Close()
	id := idem.OutgoingMessageID("billing.charge", []any{"order-1"}, 0)
	errs := pub.Publish(ctx, []idem.OutgoingMessage{{
		ID:          id,
		Destination: q.Name,
		Payload:     []byte(`{"order_id":"order-1"}`),
		Attempt:     1,
	}})
	fmt.Println("confirmed:", errs[0] == nil)

	d, ok, err := ch.Get(q.Name, true)
	if err != nil || !ok {
		log.Fatal("no message: ", err)
	}
	fmt.Println("message_id is the outbox id:", d.MessageId == id)
	fmt.Println(string(d.Body))
	// Output:
	// confirmed: true
	// message_id is the outbox id: true
	// {"order_id":"order-1"}
}
